"""The web server's flags and environment: address (GRADIO_SERVER_NAME/PORT), keys, log-ins, limits."""

from __future__ import annotations

import pytest

from tts_app.cli.args import server_address, server_config_from
from tts_app.errors import InputError
from tts_app.server.main import build_parser


def parse(*flags):
    return build_parser().parse_args(list(flags))


def test_address_from_flags_then_gradio_env_then_loopback():
    assert server_address(parse(), {}) == ("127.0.0.1", None)
    env = {"GRADIO_SERVER_NAME": "0.0.0.0", "GRADIO_SERVER_PORT": "7861"}
    assert server_address(parse(), env) == ("0.0.0.0", 7861)
    assert server_address(parse("--host", "127.0.0.2", "--port", "9000"), env) == ("127.0.0.2", 9000)
    with pytest.raises(InputError, match="GRADIO_SERVER_PORT"):
        server_address(parse(), {"GRADIO_SERVER_PORT": "http"})


def test_keys_and_logins_from_flags_or_env(tmp_path):
    config = server_config_from(parse(), {"TTS_APP_API_KEY": "k1, k2", "TTS_APP_AUTH": "mei:pw"})
    assert config.api_keys == ("k1", "k2") and config.ui_auth == (("mei", "pw"),)
    config = server_config_from(parse("--api-key", "flag-key", "--auth", "a:b:c"), {"TTS_APP_API_KEY": "env"})
    assert config.api_keys == ("flag-key",) and config.ui_auth == (("a", "b:c"),)  # passwords may hold ':'
    logins = tmp_path / "logins.txt"
    logins.write_text("# team\nmei:one\n\nli:two\n", encoding="utf-8")
    assert server_config_from(parse("--auth-file", str(logins)), {}).ui_auth == (("mei", "one"), ("li", "two"))
    assert "k1" not in repr(server_config_from(parse("--api-key", "k1"), {}))  # secrets stay out of logs


@pytest.mark.parametrize("flags, message", [
    (["--auth", "nopassword"], "--auth"),
    (["--auth-file", "/nonexistent/logins"], "--auth-file"),
    (["--rate-limit", "-1"], "--rate-limit"),
])
def test_bad_values_name_their_flag(flags, message):
    with pytest.raises(InputError, match=message):
        server_config_from(parse(*flags), {})


def test_limits_and_cors_flags():
    config = server_config_from(parse("--rate-limit", "30", "--rate-limit-burst", "3", "--max-queue-depth", "5",
                                      "--max-input-chars", "100", "--cors-origin", "https://a.example"), {})
    assert (config.rate_limit_per_min, config.rate_limit_burst, config.max_queue_depth, config.max_input_chars,
            config.cors_origins) == (30, 3, 5, 100, ("https://a.example",))


def test_flags_from_tts_app_args_env_are_read_first(monkeypatch, capsys):
    from tts_app.server import main as launch

    monkeypatch.setenv("TTS_APP_ARGS", "--max-batch-size 0")
    assert launch.main([]) == 2  # the env's flag is parsed (and refused) like a command-line one
    assert "--max-batch-size" in capsys.readouterr().err
    monkeypatch.setenv("TTS_APP_ARGS", "--model 'unclosed")
    assert launch.main([]) == 2
