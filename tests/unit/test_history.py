"""Generation history (tts_app.history): entries kept per browser on disk, newest first, pruned to the configured
size, found again by a new store (a restart), never visible to another browser, written whole or not at all; the
Single tab's "re-run" gives back the inputs the generation ran with, and a generation is remembered only from this
browser's own folder (tts_app.ui.history)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tts_app.errors import InputError
from tts_app.history import HistoryStore, check_history_size, is_owner_key
from tts_app.output_layout import HISTORY_DIR
from tts_app.server.sessions import COOKIE_NAME, new_browser_token, owner_key


def new_user_id() -> str:
    """A browser's owner key (what ``AppContext.owner`` finds from its cookie)."""
    return owner_key(new_browser_token())


@pytest.fixture()
def outputs(tmp_path: Path, data_dir: Path) -> dict[str, Path]:
    """Files as ``save_outputs`` leaves them after one generation (audio, sidecar, subtitles) and an upload."""
    folder = tmp_path / "web"
    folder.mkdir()
    audio = folder / "20261201-120000_今天天气很好_abc123.mp3"
    audio.write_bytes(b"ID3 not really audio")
    metadata = audio.with_suffix(".json")
    metadata.write_text(json.dumps({"audio": {"sha256": "x"}}), encoding="utf-8")
    subtitles = audio.with_suffix(".srt")
    subtitles.write_text("1\n00:00:00,000 --> 00:00:01,000\n今天天气很好\n", encoding="utf-8")
    return {"audio": audio, "metadata": metadata, "subtitles": subtitles, "upload": data_dir / "zh_female_1.wav"}


def add(store: HistoryStore, user: str, outputs: dict[str, Path], text: str, **overrides):
    fields = dict(audio=outputs["audio"], metadata=outputs["metadata"], subtitles=outputs["subtitles"], text=text,
                  voice=None, reference_file=outputs["upload"], reference_text="参考文本",
                  settings={"seed": 7, "speed": 1.25, "audio_format": "mp3"})
    fields.update(overrides)
    return store.add(user, **fields)


def test_entries_are_listed_newest_first_with_their_files_and_survive_a_restart(tmp_path, outputs):
    user = new_user_id()
    store = HistoryStore(tmp_path / "single", max_entries=5)
    first = add(store, user, outputs, "今天天气很好。")
    second = add(store, user, outputs, "Second one.", voice="zh-female", reference_file=None)
    outputs["audio"].unlink()  # the entry keeps its own copies: the web folder may be cleaned
    restarted = HistoryStore(tmp_path / "single", max_entries=5)
    entries = restarted.list(user)
    assert [e.text for e in entries] == ["Second one.", "今天天气很好。"]
    assert entries[0].voice == "zh-female" and entries[0].reference_audio is None
    old = entries[1]
    assert old.entry_id == first.entry_id and old.reference_name == "zh_female_1.wav"
    assert old.reference_text == "参考文本" and old.settings == {"seed": 7, "speed": 1.25, "audio_format": "mp3"}
    assert old.audio.read_bytes() == b"ID3 not really audio" and old.audio.suffix == ".mp3"
    assert old.reference_audio.read_bytes() == outputs["upload"].read_bytes()
    assert old.subtitles.read_text(encoding="utf-8").endswith("今天天气很好\n")
    assert restarted.get(user, second.entry_id).text == "Second one."


def test_beyond_the_size_the_oldest_entries_go(tmp_path, outputs):
    user = new_user_id()
    store = HistoryStore(tmp_path / "single", max_entries=3)
    for i in range(5):
        add(store, user, outputs, f"line {i}")
    assert [e.text for e in store.list(user)] == ["line 4", "line 3", "line 2"]
    assert len([p for p in (tmp_path / "single" / user / HISTORY_DIR).iterdir()]) == 3  # removed from disk, not only hidden


def test_one_user_never_sees_or_reaches_another_users_entries(tmp_path, outputs):
    store = HistoryStore(tmp_path / "single")
    alice, bob = new_user_id(), new_user_id()
    entry = add(store, alice, outputs, "alice's words")
    assert store.list(bob) == []
    with pytest.raises(InputError, match="gone"):
        store.get(bob, entry.entry_id)
    for bad in ("../" + alice, "", None, alice.upper(), "x" * 32, "anonymous"):
        assert not is_owner_key(bad)
        assert store.list(bad) == []
        with pytest.raises(InputError):
            store.add(bad, audio=outputs["audio"], metadata=outputs["metadata"], subtitles=None, text="t",
                      voice=None, reference_file=None, reference_text=None, settings={})
    with pytest.raises(InputError):
        store.get(alice, "../" + entry.entry_id)


def test_a_failed_write_leaves_nothing_and_a_damaged_entry_hides_itself(tmp_path, outputs):
    user = new_user_id()
    store = HistoryStore(tmp_path / "single")
    kept = add(store, user, outputs, "kept")
    with pytest.raises(OSError):
        add(store, user, outputs, "lost", reference_file=tmp_path / "no-such-upload.wav")
    assert [e.text for e in store.list(user)] == ["kept"]
    assert sorted(p.name for p in (tmp_path / "single" / user / HISTORY_DIR).iterdir()) == [kept.entry_id]  # no temp folder
    broken = add(store, user, outputs, "broken")
    (broken.folder / "entry.json").write_text("{not json", encoding="utf-8")
    assert [e.text for e in store.list(user)] == ["kept"]
    with pytest.raises(InputError, match="gone"):
        store.get(user, broken.entry_id)
    shutil.rmtree(kept.folder)
    assert store.list(user) == []


def test_size_zero_turns_history_off_and_bad_sizes_are_refused(tmp_path, outputs):
    off = HistoryStore(tmp_path / "single", max_entries=0)
    assert not off.enabled
    with pytest.raises(InputError, match="off"):
        add(off, new_user_id(), outputs, "t")
    for bad in (-1, 501):
        with pytest.raises(InputError, match="--history-size"):
            check_history_size(bad)


class Browser:
    """A request from one browser (its cookie), as gradio hands it to a handler."""

    def __init__(self, session: str = "tab1"):
        self.token = new_browser_token()
        self.headers = {"cookie": f"{COOKIE_NAME}={self.token}", "accept-language": "en"}
        self.session_hash = session


@pytest.fixture()
def ctx(tmp_path):
    from tts_app.config import EngineConfig, ModelConfig
    from tts_app.ui.context import AppContext, AppSettings

    return AppContext(AppSettings(model_config=ModelConfig(), engine_config=EngineConfig(),
                                  output_root=tmp_path / "out"))


def _generation(ctx, browser: Browser, name: str = "20261201-120000_hello_abc123") -> Path:
    """The files a generation leaves in the browser's session folder; returns its sidecar."""
    folder = ctx.session_dir(browser.session_hash, browser.headers)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.wav").write_bytes(b"RIFF fake")
    (folder / f"{name}.srt").write_text("1\n00:00:00,000 --> 00:00:01,000\nhello\n", encoding="utf-8")
    sidecar = folder / f"{name}.json"
    sidecar.write_text(json.dumps({"audio": {"file": f"{name}.wav"}, "subtitles": {"file": f"{name}.srt"}}),
                       encoding="utf-8")
    return sidecar


def test_a_generation_is_remembered_for_its_browser_only_and_kept_after_a_server_stop(ctx, data_dir):
    pytest.importorskip("gradio")
    from tts_app.ui.history import SETTINGS, list_history, remember

    me, other = Browser(), Browser()
    settings = [None] * len(SETTINGS)
    entries = remember(ctx, str(_generation(ctx, me)), 42, str(data_dir / "zh_female_1.wav"), "Hello.", "",
                       None, *settings, request=me)
    assert [e["text"] for e in entries] == ["Hello."] and entries[0]["settings"]["seed"] == 42
    assert tuple(entries[0]["settings"]) == SETTINGS
    assert Path(entries[0]["audio"]).read_bytes() == b"RIFF fake"
    # the entry lies in this browser's own folder (served to it only), not in the tab's session folder
    assert ctx.browser_dir(me.headers) in Path(entries[0]["audio"]).parents
    assert list_history(ctx, request=other) == []
    # a sidecar path of another browser's folder, sent by a page, is not taken into this browser's history
    theirs = _generation(ctx, other, "theirs")
    assert [e["text"] for e in remember(ctx, str(theirs), 1, None, "Not mine.", "", "en-male", *settings,
                                        request=me)] == ["Hello."]
    assert list_history(ctx, request=other) == []
    ctx.end_session(me.session_hash, me.headers)  # the tab closed
    ctx.close()  # the server stopped: session folders go, the history stays
    assert not ctx.browser_dir(other.headers).exists()  # nothing of that browser's is kept
    assert [e["text"] for e in list_history(ctx, request=me)] == ["Hello."]
    assert Path(list_history(ctx, request=me)[0]["audio"]).is_file()


def test_rerun_gives_back_the_inputs_the_generation_ran_with(ctx, outputs):
    pytest.importorskip("gradio")
    from tts_app.ui.history import SETTINGS, entry_summary, rerun_values
    from tts_app.ui.voices import UPLOAD

    me = Browser()
    user = ctx.owner(me.headers)
    settings = {name: None for name in SETTINGS} | {"seed": 1234, "temperature": 0.7, "speed": 1.25,
                                                    "audio_format": "mp3"}
    upload = add(ctx.history_store, user, outputs, "上传的声音。", settings=settings)
    voice = add(ctx.history_store, user, outputs, "Saved voice.", voice="en-male", reference_file=None,
                reference_text=None, settings=settings)
    values = rerun_values(ctx, upload.entry_id, request=me)
    assert Path(values[0]).read_bytes() == outputs["upload"].read_bytes()  # the stored copy of the upload
    assert values[1:6] == ["上传的声音。", "参考文本", 1234, False, UPLOAD]  # seed fixed, "randomize" off
    assert dict(zip([n for n in SETTINGS if n != "seed"], values[6:])) == {
        n: v for n, v in settings.items() if n != "seed"} | {"segment_context": False, "prompt_cache": False}  # boxes: never None
    values = rerun_values(ctx, voice.entry_id, request=me)
    assert values[0] is None and values[5] == "en-male"
    import gradio as gr

    with pytest.raises(gr.Error):
        rerun_values(ctx, voice.entry_id, request=Browser())  # another browser's entry
    summary = entry_summary({"entry_id": voice.entry_id, "created_utc": voice.created_utc, "text": voice.text,
                             "voice": voice.voice, "reference_name": None, "settings": voice.settings,
                             "audio": str(voice.audio)}, "zh")
    assert "en-male" in summary and "Saved voice." in summary and "speed 1.25" in summary and "seed 1234" in summary
    # only what differs from the page's starting values is listed (the seed always)
    short = entry_summary({"entry_id": voice.entry_id, "created_utc": voice.created_utc, "text": voice.text,
                           "voice": voice.voice, "reference_name": None, "settings": voice.settings,
                           "audio": str(voice.audio)}, "en", {"speed": 1.0, "temperature": 0.7, "audio_format": "wav"})
    assert "speed 1.25" in short and "temperature" not in short and "audio_format mp3" in short and "seed" in short


def test_every_ui_handler_taking_the_request_gets_it_from_gradio():
    """gradio fills a ``gr.Request`` parameter only among the positional parameters before any ``*args``
    (gradio.helpers.special_args); one after ``*args`` stays None, so the handler would not know the browser (the
    history's first version stored nothing for that reason)."""
    gr = pytest.importorskip("gradio")
    import inspect
    import typing

    from tts_app.ui import batch, handlers, history, voices

    checked = 0
    for module in (handlers, batch, voices, history):
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if fn.__module__ != module.__name__:
                continue
            hints = typing.get_type_hints(fn)
            params = list(inspect.signature(fn).parameters.values())
            for i, param in enumerate(params):
                if hints.get(param.name) in (gr.Request, typing.Optional[gr.Request]):
                    checked += 1
                    assert not any(p.kind is p.VAR_POSITIONAL for p in params[:i]), f"{module.__name__}.{name}"
    assert checked >= 10
