"""For the same text, reference, seed and settings, every entry point produces the same audio: the web UI's handler
(fed the values its controls start with: the model's defaults), ``synth``, a JSONL line and the gradio_client API.

Sampling is left at each checkpoint's own choice (nothing but the seed and a decode cap given), so a UI that sent
its own sampling values instead of "not given" would produce different audio here. Each entry point writes a
16-bit WAV; the samples must be identical, and every sidecar must name the same effective settings.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import soundfile as sf

from tests.adapter_helpers import load_reference
from tests.ui_app import start_app, stop_app

gradio_client = pytest.importorskip("gradio_client")

TEXT = "Hello there. How are you today?"
SEED = 3
# family -> (reference clip, decode cap per segment: enough steps for audio from the tiny checkpoint, a setting that
# differs from the checkpoint's default: what a UI sending its own values instead of "not given" would change)
CASES = {"vibevoice": ("en_female_1.wav", 12, ["--cfg-scale", "2.0"]),
         "dia": ("en_female_2.wav", 24, ["--temperature", "1.0"])}


def _samples(path) -> np.ndarray:
    data, _ = sf.read(path, dtype="int16")
    return data


def _ui_handler_audio(model, ref, ref_text, max_new_tokens, out_dir):
    """The Single tab's handler in-process, with every control at the value the page starts with."""
    from tts_app.config import EngineConfig, ModelConfig
    from tts_app.runtime import Runtime
    from tts_app.ui import handlers
    from tts_app.ui.context import AppContext, AppSettings
    from tts_app.ui.controls import generation_controls

    ctx = AppContext(AppSettings(model_config=ModelConfig(str(model), device="cpu"), engine_config=EngineConfig(),
                                 output_root=out_dir))
    ctx.runtime = Runtime.load(ctx.model_config, ctx.engine_config)
    try:
        controls = generation_controls(ctx.engine.facts)
        start = {name: c.default for name, c in controls.items()}
        audio, _, metadata, _, seed = handlers.synthesize(
            ctx, str(ref), TEXT, ref_text, seed=SEED, randomize_seed=False, greedy=start["greedy"],
            temperature=start["temperature"], top_p=start["top_p"], top_k=start["top_k"],
            cfg_scale=start["cfg_scale"], max_new_tokens=max_new_tokens,
            max_segment_chars=start["max_segment_chars"], pause_ms=start["pause_between_segments_ms"],
            use_cache=True)
    finally:
        ctx.runtime.close()
    assert seed == SEED
    return audio, metadata


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(CASES))
def test_ui_synth_jsonl_and_api_give_the_same_audio(family, tiny_checkpoint, data_dir, tmp_path):
    from tts_app.cli.synth import main as synth_main
    from tts_app.cli.batch import main as batch_main

    model = tiny_checkpoint(family)
    ref_name, max_new_tokens, other_setting = CASES[family]
    ref = data_dir / ref_name
    _, ref_text = load_reference(ref_name, 24000)  # Dia needs the transcript; the others are given it too
    flags = ["--model", str(model), "--device", "cpu"]

    # synth
    assert synth_main([*flags, "--ref", str(ref), "--ref-text", ref_text, "--text", TEXT, "--out",
                       str(tmp_path / "synth.wav"), "--seed", str(SEED), "--max-new-tokens",
                       str(max_new_tokens)]) == 0
    # the control: one setting away from the checkpoint's default changes the audio, so equality below means
    # every entry point really ran the checkpoint's defaults
    assert synth_main([*flags, "--ref", str(ref), "--ref-text", ref_text, "--text", TEXT, "--out",
                       str(tmp_path / "other.wav"), "--seed", str(SEED), "--max-new-tokens", str(max_new_tokens),
                       *other_setting]) == 0
    # one JSONL line
    shutil.copy(ref, tmp_path / ref_name)
    job = tmp_path / "job.jsonl"
    job.write_text(json.dumps({"input_text": TEXT, "prompt_audio": ref_name, "prompt_text": ref_text, "seed": SEED,
                               "max_new_tokens": max_new_tokens, "output_name": "line"}) + "\n", encoding="utf-8")
    assert batch_main([str(job), "--out-dir", str(tmp_path / "job"), *flags]) == 0
    # the UI handler
    ui_audio, ui_metadata = _ui_handler_audio(model, ref, ref_text, max_new_tokens, tmp_path / "ui")
    # the API of a running app: only what the test sets, everything else left to the endpoint's defaults
    proc, url = start_app(model, "--output-dir", str(tmp_path / "app"))
    try:
        client = gradio_client.Client(url, verbose=False)
        api_audio, _, api_metadata, _, _ = client.predict(
            gradio_client.handle_file(str(ref)), TEXT, reference_text=ref_text, seed=SEED,
            max_new_tokens=max_new_tokens, api_name="/synthesize")
    finally:
        stop_app(proc)

    outputs = {"synth": tmp_path / "synth.wav", "jsonl": tmp_path / "job" / "line.wav", "ui": ui_audio,
               "api": api_audio}
    audio = {name: _samples(path) for name, path in outputs.items()}
    assert np.abs(audio["synth"]).max() > 0  # speech, not only the pause between segments
    for name, samples in audio.items():
        assert np.array_equal(samples, audio["synth"]), f"{name} differs from synth"
    assert not np.array_equal(_samples(tmp_path / "other.wav"), audio["synth"])

    sidecars = {"synth": tmp_path / "synth.json", "jsonl": tmp_path / "job" / "line.json", "ui": ui_metadata,
                "api": api_metadata}
    settings = {name: json.loads(open(path, encoding="utf-8").read())["generation"]
                for name, path in sidecars.items()}
    assert all(s == settings["synth"] for s in settings.values()), settings
    assert settings["synth"]["seed"] == SEED and settings["synth"]["max_new_tokens"] == max_new_tokens
