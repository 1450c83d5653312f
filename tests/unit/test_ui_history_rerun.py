"""The Single tab's history (issue 23, Why 5): a generation with emotion (IndexTTS 2's controls) is re-run with the
same emotion, clip included, and the re-run's sidecar records it; a re-run of an uploaded clip still names that clip;
an entry lists only the knobs the loaded model has, and its time in the browser's time zone. Through the tab's own
handlers on the fake model."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

gr = pytest.importorskip("gradio")

from tests.fakes import FakeAdapter, fake_facts  # noqa: E402
from tts_app.config import EngineConfig, ModelConfig  # noqa: E402
from tts_app.runtime import Runtime  # noqa: E402
from tts_app.server.sessions import COOKIE_NAME, new_browser_token  # noqa: E402
from tts_app.ui import handlers  # noqa: E402
from tts_app.ui import history as history_ui  # noqa: E402
from tts_app.ui.context import AppContext, AppSettings  # noqa: E402

VECTOR = dict(happy=0.6, angry=0.0, sad=0.0, afraid=0.0, disgusted=0.0, melancholic=0.0, surprised=0.25, calm=0.0)


def _ctx(tmp_path, facts):
    config = EngineConfig(wait_window_ms=1)
    return AppContext(AppSettings(model_config=ModelConfig(), engine_config=config, output_root=tmp_path / "out"),
                      runtime=Runtime.from_adapter(FakeAdapter(facts), "fake", config))


@pytest.fixture()
def browser():
    return SimpleNamespace(headers={"cookie": f"{COOKIE_NAME}={new_browser_token()}", "accept-language": "en"},
                           session_hash="tab1")


def _settings(ctx) -> dict:
    """The Settings widgets as the page sends them untouched: hidden knobs still send their widget's value."""
    from tts_app.ui.controls import generation_controls

    controls = generation_controls(ctx.engine.facts)
    value = {name: c.default if c.default is not None else c.minimum for name, c in controls.items()}
    return dict(seed=3, greedy=value["greedy"], temperature=value["temperature"], top_p=value["top_p"],
                top_k=value["top_k"], cfg_scale=value["cfg_scale"], max_new_tokens=value["max_new_tokens"],
                max_segment_chars=value["max_segment_chars"], pause_ms=value["pause_between_segments_ms"],
                use_cache=True, speed=1.0, duration_s=0, loudness_lufs=0, audio_format="wav",
                segment_durations_s="", num_beams=value["num_beams"], length_penalty=value["length_penalty"],
                num_diffusion_steps=value["num_diffusion_steps"], prompt_cache=bool(value["prompt_cache"]))


def _generate_and_remember(ctx, browser, reference: str, text: str, emotion: dict) -> list[dict]:
    """What the page does on Generate: synthesize, then ``remember`` with the same widget values."""
    settings = _settings(ctx)
    synth_settings = {k: v for k, v in settings.items() if k != "audio_format"}
    audio, _, metadata, _, used_seed = handlers.synthesize(
        ctx, reference, text, "", **synth_settings, **emotion, request=browser, progress=lambda *a, **k: None)
    return history_ui.remember(ctx, metadata, used_seed, reference, text, "", None, **settings, **emotion,
                               request=browser)


def _rerun(ctx, browser, entry_id: str) -> dict:
    """The Single tab's inputs after "Re-run" (``rerun_values``), by name."""
    names = ["reference_audio", "text", "reference_text", "seed", "randomize_seed", "voice",
             *(n for n in history_ui.SETTINGS if n != "seed"), *history_ui.EMOTION_INPUTS]
    values = history_ui.rerun_values(ctx, entry_id, request=browser)
    assert len(values) == len(names)
    return dict(zip(names, values))


def _rerun_synthesis(ctx, browser, inputs: dict):
    """Generate with the inputs a Re-run put back (what the page's chained event does)."""
    args = {k: v for k, v in inputs.items() if k not in ("reference_audio", "text", "reference_text", "voice",
                                                         "audio_format")}
    return handlers.synthesize(ctx, inputs["reference_audio"], inputs["text"], inputs["reference_text"],
                               voice=inputs["voice"] or None, **args, request=browser,
                               progress=lambda *a, **k: None)


@pytest.mark.parametrize("source", ["vector", "clip"])
def test_a_rerun_keeps_the_emotion_and_the_clips_name(tmp_path, data_dir, browser, source):
    ctx = _ctx(tmp_path, fake_facts(supports_emotion=True))
    try:
        clip = str(data_dir / "zh_female_2.wav")
        emotion = dict(emotion_mode=source, emotion_audio=clip if source == "clip" else None, **VECTOR,
                       emotion_weight=0.8, emotion_text="")
        entries = _generate_and_remember(ctx, browser, str(data_dir / "zh_female_1.wav"), "今天很开心。", emotion)
        inputs = _rerun(ctx, browser, entries[0]["entry_id"])
        assert inputs["emotion_mode"] == source and inputs["emotion_weight"] == 0.8
        assert [inputs[name] for name in VECTOR] == list(VECTOR.values())
        if source == "clip":  # the stored copy of the clip, byte for byte
            assert Path(inputs["emotion_audio"]).read_bytes() == Path(clip).read_bytes()
        _, _, metadata, _, _ = _rerun_synthesis(ctx, browser, inputs)
        sidecar = json.loads(Path(metadata).read_text(encoding="utf-8"))
        assert sidecar["emotion"] is not None and sidecar["emotion"]["source"] == source
        assert sidecar["emotion"]["weight"] == 0.8
        # the re-run's own entry names the uploaded clip, not the history's stored copy
        again = history_ui.remember(ctx, metadata, 3, inputs["reference_audio"], inputs["text"], "", None,
                                    **_settings(ctx), **emotion, request=browser)
        assert [e["reference_name"] for e in again] == ["zh_female_1.wav", "zh_female_1.wav"]
        summary = history_ui.entry_summary(again[0], "en", history_ui.page_defaults(ctx))
        assert "zh_female_1.wav" in summary and "emotion: " in summary and "emotion_weight 0.8" in summary
    finally:
        ctx.close()


def test_an_entry_lists_only_the_models_knobs_in_the_browsers_time_zone(tmp_path, data_dir, browser):
    ctx = _ctx(tmp_path, fake_facts())  # like VibeVoice's temperature and top-p, the fake lacks a knob: cfg_scale
    try:
        from tts_app.ui.controls import generation_controls

        hidden = [name for name, c in generation_controls(ctx.engine.facts).items() if not c.visible]
        assert hidden
        emotion = dict(emotion_mode="none", emotion_audio=None, **{k: 0.0 for k in VECTOR}, emotion_weight=1.0,
                       emotion_text="")
        entry = _generate_and_remember(ctx, browser, str(data_dir / "en_female_1.wav"), "Hello there.", emotion)[0]
        assert all(entry["settings"][n] is not None for n in hidden)  # the hidden widgets' values were sent...
        summary = history_ui.entry_summary(entry, "en", history_ui.page_defaults(ctx), "Asia/Shanghai")
        for name in hidden:  # ...but an entry never lists a knob the model lacks
            assert name not in summary, (name, summary)
        assert "seed 3" in summary and "emotion" not in summary
        entry = dict(entry, created_utc="2026-12-01T23:30:00+00:00")
        assert "**2026-12-02 07:30:00 (Asia/Shanghai)**" in history_ui.entry_summary(entry, "en", None,
                                                                                   "Asia/Shanghai")
        assert "**2026-12-01 23:30:00 UTC**" in history_ui.entry_summary(entry, "en", None, "Not/AZone")
    finally:
        ctx.close()


def test_a_rerun_keeps_segment_context_and_the_entry_lists_it(tmp_path, data_dir, browser):
    """A generation with "Segment context" ticked is listed with it and re-run with it (the entry did not keep it, so
    Re-run ran with whatever the box held); on a model without it the hidden box is never left ticked."""
    emotion = dict(emotion_mode="none", emotion_audio=None, **{k: 0.0 for k in VECTOR}, emotion_weight=1.0,
                   emotion_text="")
    ctx = _ctx(tmp_path / "with", fake_facts(supports_segment_context=True, max_segment_chars=20))
    try:
        settings = {k: v for k, v in _settings(ctx).items() if k != "audio_format"}
        text, reference = "One sentence here. Another one there.", str(data_dir / "en_female_1.wav")
        _, _, metadata, _, used_seed = handlers.synthesize(ctx, reference, text, "", **settings,
                                                           segment_context=True, request=browser,
                                                           progress=lambda *a, **k: None)
        entry = history_ui.remember(ctx, metadata, used_seed, reference, text, "", None, **_settings(ctx),
                                    segment_context=True, **emotion, request=browser)[0]
        assert "segment_context True" in history_ui.entry_summary(entry, "en", history_ui.page_defaults(ctx))
        inputs = _rerun(ctx, browser, entry["entry_id"])
        assert inputs["segment_context"] is True
        _, _, metadata, _, _ = _rerun_synthesis(ctx, browser, inputs)
        assert json.loads(Path(metadata).read_text(encoding="utf-8"))["generation"]["segment_context"] is True
    finally:
        ctx.close()
    ctx = _ctx(tmp_path / "without", fake_facts())
    try:
        settings = {k: v for k, v in _settings(ctx).items() if k != "audio_format"}
        _, _, metadata, _, used_seed = handlers.synthesize(ctx, reference, text, "", **settings,
                                                           segment_context=True, request=browser,
                                                           progress=lambda *a, **k: None)
        (entry,) = history_ui.remember(ctx, metadata, used_seed, reference, text, "", None, **_settings(ctx),
                                       segment_context=True, **emotion, request=browser)
        assert "segment_context" not in history_ui.entry_summary(entry, "en", history_ui.page_defaults(ctx))
        assert _rerun(ctx, browser, entry["entry_id"])["segment_context"] is False
    finally:
        ctx.close()


def test_dialogue_tab_cleans_uploads_with_its_choice_and_saved_voices_as_saved(tmp_path, data_dir, browser):
    """Issue 24: the Dialogue tab's reference_cleanup reaches its uploaded speakers' clips; a saved voice speaks as it
    was saved (here with "off")."""
    ctx = _ctx(tmp_path, fake_facts())
    try:
        ctx.voices.save("anna", data_dir / "en_female_1.wav", ctx.references, cleanup="off")
        _, _, metadata, _, _ = handlers.synthesize_dialogue(
            ctx, "Speaker 1: Hello Bob.\nSpeaker 2: Hi Anna.", voice_1="anna", audio_2=str(data_dir / "en_male_1.wav"),
            reference_cleanup="full", request=browser, progress=lambda *a, **k: None)
        sidecar = json.loads(Path(metadata).read_text(encoding="utf-8"))
    finally:
        ctx.close()
    assert [s["reference"]["cleanup"] for s in sidecar["speakers"]] == ["off", "full"]


def test_a_rerun_keeps_the_prompt_cache_box(tmp_path, data_dir, browser):
    """GLM-TTS's prompt cache (not the KV cache): an entry made with the box unticked re-runs with it unticked, and
    lists it, as it differs from the model's default (on)."""
    from dataclasses import replace

    from tests.fakes import FAKE_GENERATION_DEFAULTS

    ctx = _ctx(tmp_path, fake_facts(generation_defaults=replace(FAKE_GENERATION_DEFAULTS, prompt_cache=True)))
    try:
        emotion = dict(emotion_mode="none", emotion_audio=None, **{k: 0.0 for k in VECTOR}, emotion_weight=1.0,
                       emotion_text="")
        settings = {**_settings(ctx), "prompt_cache": False}
        audio, _, metadata, _, used_seed = handlers.synthesize(
            ctx, str(data_dir / "en_female_1.wav"), "Hello there.", "",
            **{k: v for k, v in settings.items() if k != "audio_format"}, **emotion, request=browser,
            progress=lambda *a, **k: None)
        entry = history_ui.remember(ctx, metadata, used_seed, str(data_dir / "en_female_1.wav"), "Hello there.", "",
                                    None, **settings, **emotion, request=browser)[0]
        assert "prompt_cache False" in history_ui.entry_summary(entry, "en", history_ui.page_defaults(ctx))
        inputs = _rerun(ctx, browser, entry["entry_id"])
        assert inputs["prompt_cache"] is False
        _, _, again, _, _ = _rerun_synthesis(ctx, browser, inputs)
        assert json.loads(Path(again).read_text(encoding="utf-8"))["generation"]["prompt_cache"] is False
    finally:
        ctx.close()
