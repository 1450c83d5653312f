"""The OpenAI-compatible API with the official ``openai`` client against the launched app (tiny VibeVoice), plus
the server's address, the web page's log-in and /metrics on the same server."""

from __future__ import annotations

import io
import os
import urllib.request

import numpy as np
import pytest
import soundfile as sf

from tests.ui_app import start_app, stop_app

openai = pytest.importorskip("openai")

KEY = "sk-integration-test"
TEXT = "Hello there. This is a test."


@pytest.fixture(scope="module")
def app_url(tiny_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("api-out")
    proc, url = start_app(tiny_checkpoint("vibevoice"), "--output-dir", str(out), "--api-key", KEY,
                          "--rate-limit", "0")
    yield url
    stop_app(proc)


@pytest.fixture()
def client(app_url):
    return openai.OpenAI(base_url=f"{app_url}v1", api_key=KEY, max_retries=0, timeout=300)


def speak(client, fmt: str, **kw) -> bytes:
    return client.audio.speech.create(model="tts-1", voice="en-female", input=TEXT, response_format=fmt,
                                      **kw).content


def test_every_format_decodes_to_the_same_speech(client):
    from tts_app.audio.formats import decode_audio

    pcm = np.frombuffer(speak(client, "pcm"), dtype="<i2").astype(np.float32) / 32768.0
    wav, wav_rate = sf.read(io.BytesIO(speak(client, "wav")), dtype="float32")
    flac, flac_rate = sf.read(io.BytesIO(speak(client, "flac")), dtype="float32")
    assert wav_rate == flac_rate == 24000
    assert pcm.size > 0 and np.abs(pcm).max() > 0
    # lossless formats hold the same 16-bit samples (libsndfile rounds float -> int16 for FLAC one step apart from
    # WAV on some samples: at most 1 LSB)
    np.testing.assert_array_equal(wav, pcm)
    assert flac.shape == pcm.shape and np.abs(flac - pcm).max() <= 1 / 32768
    for fmt in ("mp3", "opus"):
        audio, rate = decode_audio(speak(client, fmt))
        assert rate in (24000, 48000), fmt
        seconds = audio.size / rate
        assert abs(seconds - pcm.size / 24000) < 0.1, fmt  # lossy codecs pad a few ms
        assert np.abs(audio).max() > 0, fmt


def test_unknown_voice_is_404_listing_the_voices(client):
    with pytest.raises(openai.NotFoundError) as err:
        client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT)
    assert "en-female" in str(err.value) and "alloy" in str(err.value)


def test_over_long_input_is_413(client):
    with pytest.raises(openai.APIStatusError) as err:
        client.audio.speech.create(model="tts-1", voice="en-female", input="word " * 1000)
    assert err.value.status_code == 413
    assert "4096" in str(err.value)


def test_missing_or_wrong_key_is_401(app_url):
    for key in ("wrong-key", "sk-" + KEY):
        bad = openai.OpenAI(base_url=f"{app_url}v1", api_key=key, max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.audio.speech.create(model="tts-1", voice="en-female", input=TEXT)
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
    request = urllib.request.Request(f"{app_url}v1/models")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=30)
    assert err.value.code == 401


def test_models_and_voices(client, data_dir):
    models = client.models.list()
    assert models.data[0].id.startswith("tiny-vibevoice")  # the folder's name, not the server's path
    assert "/" not in models.data[0].id and models.data[0].family == "vibevoice"
    created = client.audio.voices.create(name="Tester", audio_sample=open(data_dir / "en_male_1.wav", "rb"),
                                         consent="none")
    assert created.name == "Tester" and created.id == "Tester"
    audio = client.audio.speech.create(model="tts-1", voice="Tester", input=TEXT, response_format="wav").content
    assert sf.info(io.BytesIO(audio)).frames > 0
    listed = client.get("/audio/voices", cast_to=object)
    assert "Tester" in [v["id"] for v in listed["data"]]
    assert client.audio.voices.delete("Tester").deleted


def test_metrics_on_the_same_server(app_url, client):
    from prometheus_client.parser import text_string_to_metric_families

    def scrape():
        request = urllib.request.Request(f"{app_url}metrics", headers={"Authorization": f"Bearer {KEY}"})
        text = urllib.request.urlopen(request, timeout=30).read().decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for f in text_string_to_metric_families(text) for s in f.samples}

    before = scrape()
    speak(client, "pcm")
    after = scrape()
    key = ("tts_request_duration_seconds_count", (("endpoint", "POST /v1/audio/speech"), ("outcome", "ok")))
    assert after[key] == before.get(key, 0) + 1
    assert after[("tts_model_loaded", ())] == 1
    assert after[("tts_model_load_seconds", ())] > 0


@pytest.fixture(scope="module")
def second_app(tiny_checkpoint, tmp_path_factory):
    """An app started with no --host, GRADIO_SERVER_NAME=127.0.0.2 and a web log-in from TTS_APP_AUTH."""
    out = tmp_path_factory.mktemp("api-out-2")
    env = {"GRADIO_SERVER_NAME": "127.0.0.2", "TTS_APP_AUTH": "mei:s3cret"}
    proc, url = start_app(tiny_checkpoint("vibevoice"), "--output-dir", str(out), host=None, env=env)
    yield url
    stop_app(proc)


def test_app_binds_the_address_from_gradio_server_name(second_app):
    assert second_app.startswith("http://127.0.0.2:")
    port = second_app.rsplit(":", 1)[1].strip("/")
    assert urllib.request.urlopen(f"{second_app}v1/audio/voices", timeout=30).status == 200
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/audio/voices", timeout=5)


def test_web_page_needs_its_login(second_app, data_dir):
    gradio_client = pytest.importorskip("gradio_client")
    with pytest.raises(Exception):
        gradio_client.Client(second_app, verbose=False)
    client = gradio_client.Client(second_app, auth=("mei", "s3cret"), verbose=False)
    _, report = client.predict(gradio_client.handle_file(str(data_dir / "en_female_1.wav")),
                               api_name="/reference_report")
    assert report
    # the HTTP API is not behind the page's log-in (it has its own key, none here)
    assert urllib.request.urlopen(f"{second_app}v1/models", timeout=30).status == 200


def test_env_is_documented_in_launch_help():
    import subprocess
    import sys

    from tests.ui_app import ROOT

    out = subprocess.run([sys.executable, str(ROOT / "app.py"), "--help"], capture_output=True, text=True,
                         env=dict(os.environ, GRADIO_ANALYTICS_ENABLED="False"), timeout=120).stdout
    for word in ("GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT", "TTS_APP_API_KEY", "--api-key", "--auth"):
        assert word in out, word


def test_another_browser_cannot_fetch_my_files(app_url, data_dir):
    """A file the page made for one browser is served to that browser only: another browser (its own cookie) or a
    client without the cookie gets 403, even with the file's exact URL."""
    import httpx

    gradio_client = pytest.importorskip("gradio_client")
    slow = {"timeout": 120}  # a busy shared CPU
    mine = gradio_client.Client(app_url, verbose=False, download_files=False, httpx_kwargs=slow)
    theirs = gradio_client.Client(app_url, verbose=False, download_files=False, httpx_kwargs=slow)
    audio, *_ = mine.predict(gradio_client.handle_file(str(data_dir / "en_female_1.wav")), "Hello.",
                             max_new_tokens=16, api_name="/synthesize")
    url = audio["url"]
    assert "/single/" in audio["path"]  # served from the browser's own folder, not copied to gradio's shared cache
    mine_response = httpx.get(url, cookies=mine.cookies, **slow)
    assert mine_response.status_code == 200 and mine_response.content[:4] == b"RIFF"
    assert httpx.get(url, cookies=theirs.cookies, **slow).status_code == 403
    assert httpx.get(url, **slow).status_code == 403
    # the same file asked for through another spelling of its path is refused too
    folder, name = audio["path"].rsplit("/", 1)
    sneaky = f"{app_url}gradio_api/file={folder}/../{folder.rsplit('/', 1)[1]}/{name}"
    assert httpx.get(sneaky, cookies=theirs.cookies, **slow).status_code == 403
