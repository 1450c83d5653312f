"""The Single tab's per-line target durations (dubbing cues typed as "2.5, 1.8, 3"), through the tab's own handler
on the fake model: each line gets its length, and a bad box is refused in the user's language."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

gr = pytest.importorskip("gradio")

from tests.fakes import FakeAdapter  # noqa: E402
from tts_app.config import EngineConfig, ModelConfig  # noqa: E402
from tts_app.runtime import Runtime  # noqa: E402
from tts_app.ui import handlers  # noqa: E402
from tts_app.ui.context import AppContext, AppSettings  # noqa: E402

SAMPLES_PER_CHAR = 40  # FakeAdapter: 40 samples per character at 16 kHz
LINES = ["Good morning, everyone here.", "今天天气很好，我们去公园散步吧。"]


@pytest.fixture()
def ctx(tmp_path):
    ctx = AppContext(AppSettings(model_config=ModelConfig(), engine_config=EngineConfig(wait_window_ms=1),
                                 output_root=tmp_path / "out"),
                     runtime=Runtime.from_adapter(FakeAdapter(), "fake", EngineConfig(wait_window_ms=1)))
    yield ctx
    ctx.close()


def _request(lang: str):
    return SimpleNamespace(headers={"accept-language": lang}, session_hash="tab1")


def _synthesize(ctx, data_dir, text, lang="en", **settings):
    return handlers.synthesize(ctx, str(data_dir / "en_female_1.wav"), text, "Some words.", seed=4,
                               request=_request(lang), progress=lambda *a, **k: None, **settings)


def test_each_line_gets_the_duration_typed_for_it(ctx, data_dir):
    natural = [SAMPLES_PER_CHAR * len(line) / 16000 for line in LINES]
    targets = [round(natural[0] * 1.3, 3), round(natural[1] * 0.8, 3)]
    audio, _, metadata, table, _ = _synthesize(ctx, data_dir, "\n".join(LINES), pause_ms=100,
                                               segment_durations_s=f"{targets[0]}，{targets[1]}")  # a zh comma too
    rows = table.values.tolist()
    assert [r[2] for r in rows] == LINES  # one segment per line
    for row, target in zip(rows, targets):
        assert abs((row[4] - row[3]) - target) <= 0.011  # the table's times are rounded to 10 ms
    sidecar = json.loads(open(metadata, encoding="utf-8").read())
    assert sidecar["requested"]["segment_durations_s"] == pytest.approx(targets)
    assert [c["segment"] for c in sidecar["post_processing"]["segment_durations"]] == [1, 2]


@pytest.mark.parametrize("lang, bad, duration_s, expected", [
    ("en", "2.5, abc", 0, "Per-line durations: '2.5, abc' is not a list of seconds"),
    ("zh", "1, -2", 0, "每行时长：'1, -2' 不是用逗号分隔的秒数"),
    ("en", "1, 2", 4.0, "Give either per-line durations or a speed / target duration"),
    ("zh", "1, 2", 4.0, "每行时长与整段的语速 / 目标时长只能选一种"),
])
def test_a_bad_durations_box_is_refused_in_the_users_language(ctx, data_dir, lang, bad, duration_s, expected):
    with pytest.raises(gr.Error, match=expected.replace("(", r"\(").replace("?", r"\?")):
        _synthesize(ctx, data_dir, "\n".join(LINES), lang=lang, segment_durations_s=bad, duration_s=duration_s)


def test_a_count_that_does_not_match_the_lines_names_them(ctx, data_dir):
    with pytest.raises(gr.Error, match="gives 3 duration"):
        _synthesize(ctx, data_dir, "\n".join(LINES), segment_durations_s="1, 1, 1")


@pytest.mark.parametrize("lang", ["en", "zh-CN"])
def test_a_clipped_share_reads_the_same_in_the_warning_and_the_report(ctx, tmp_path, lang):
    """A noise clip clipped at full scale on ~0.2 % of its samples: the report's "clipped share" and the warning
    about it show one number, rounded once (was "clipped share: 0.00" next to "clipped (0.2% ...)")."""
    import re

    import numpy as np
    import soundfile as sf

    noise = np.clip(np.random.default_rng(0).normal(0, 0.32, 16000 * 4), -1, 1).astype(np.float32)
    sf.write(tmp_path / "noise.wav", noise, 16000, subtype="FLOAT")
    _, report = handlers.reference_report(ctx, str(tmp_path / "noise.wav"), request=_request(lang))
    in_table = re.search(r"(?:clipped share|削波比例): \*\*([\d.]+)%\*\*", report)
    in_warning = re.search(r"(?:is clipped \(|有削波（)([\d.]+)%", report)
    assert in_table and in_warning, report
    assert in_table.group(1) == in_warning.group(1) and float(in_table.group(1)) > 0


def test_the_segment_context_box_reaches_the_request_and_the_sidecar_says_it_was_ignored_here(ctx, data_dir):
    """Issue 29: the Single tab's "Segment context" box reaches the request; the fake model has none, so the
    sidecar records that it did not run (the engine's warning says why)."""
    *_, metadata, _, _ = _synthesize(ctx, data_dir, "\n".join(LINES), segment_context=True)
    sidecar = json.loads(open(metadata, encoding="utf-8").read())
    assert sidecar["requested"]["segment_context"] is True
    assert sidecar["generation"]["segment_context"] is False
    assert any("segment_context was ignored" in w for w in sidecar["warnings"])



@pytest.fixture(scope="module")
def prompt_cache_ctx(tmp_path_factory):
    """A fake model whose facts say it has a prompt cache, on by default (as GLM-TTS)."""
    from dataclasses import replace

    from tests.fakes import FAKE_GENERATION_DEFAULTS, fake_facts

    facts = fake_facts(generation_defaults=replace(FAKE_GENERATION_DEFAULTS, prompt_cache=True))
    ctx = AppContext(AppSettings(model_config=ModelConfig(), engine_config=EngineConfig(wait_window_ms=1),
                                 output_root=tmp_path_factory.mktemp("prompt-cache") / "out"),
                     runtime=Runtime.from_adapter(FakeAdapter(facts), "fake", EngineConfig(wait_window_ms=1)))
    yield ctx
    ctx.close()


@pytest.mark.parametrize("box, requested, ran", [(False, False, False), (True, None, True), (None, None, True)],
                         ids=["unticked", "ticked-is-the-default", "left-out"])
def test_the_prompt_cache_box_reaches_the_request_on_a_model_with_one(prompt_cache_ctx, data_dir, box, requested,
                                                                     ran):
    """Issue 28: the Single tab's "Prompt cache" box (GLM-TTS's use_cache, not the KV cache) reaches the request;
    the model's default (on) is sent as "not given", so the sidecar names the model as its source."""
    from tts_app.ui.controls import generation_controls

    assert generation_controls(prompt_cache_ctx.engine.facts)["prompt_cache"].visible
    *_, metadata, _, _ = _synthesize(prompt_cache_ctx, data_dir, LINES[0], prompt_cache=box)
    sidecar = json.loads(open(metadata, encoding="utf-8").read())
    assert sidecar["requested"]["prompt_cache"] is requested
    assert sidecar["generation"]["prompt_cache"] is ran


def test_a_model_without_a_prompt_cache_hides_the_box_and_ignores_it(ctx, data_dir):
    from tts_app.ui.controls import generation_controls

    assert not generation_controls(ctx.engine.facts)["prompt_cache"].visible
    *_, metadata, _, _ = _synthesize(ctx, data_dir, LINES[0], prompt_cache=False)
    sidecar = json.loads(open(metadata, encoding="utf-8").read())
    assert sidecar["requested"]["prompt_cache"] is None and sidecar["generation"]["prompt_cache"] is None


@pytest.mark.parametrize("box, ran, warned", [(None, True, False), (False, False, True)],
                         ids=["prompt-cache-default", "prompt-cache-off"])
def test_segment_context_on_a_model_with_a_prompt_cache_is_its_prompt_cache(prompt_cache_ctx, data_dir, box, ran,
                                                                            warned):
    """Issue 29 item 4: GLM-TTS's long-form context is its prompt cache, so "Segment context" there means the prompt
    cache on (no "ignored" warning); with the prompt cache turned off in the same request it is ignored, saying
    why."""
    *_, metadata, _, _ = _synthesize(prompt_cache_ctx, data_dir, "\n".join(LINES), segment_context=True,
                                     prompt_cache=box)
    sidecar = json.loads(open(metadata, encoding="utf-8").read())
    assert sidecar["generation"]["segment_context"] is ran and sidecar["generation"]["prompt_cache"] is ran
    assert any("segment_context was ignored" in w and "prompt cache" in w for w in sidecar["warnings"]) is warned
    assert not any("has no way to hear earlier segments" in w for w in sidecar["warnings"])
