"""The completeness check every entry point's metadata sidecar must pass (``tts_app.outputs``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

GENERATION_KEYS = {"seed", "greedy", "use_cache", "temperature", "top_p", "top_k", "cfg_scale", "max_new_tokens",
                   "max_segment_chars", "pause_between_segments_ms", "ras_win_len", "ras_win_max_num_repeat"}
SEGMENT_KEYS = {"index", "text", "model_text", "seed", "start_s", "end_s", "batch_size", "generate_s",
                "max_new_tokens", "stop_reason"}


def check_sidecar(audio_path: str | Path, *, entry_point: str, text: str, reference: Path | None,
                  model_id: str | None = None) -> dict:
    """Load ``audio_path``'s sidecar and assert it is complete and agrees with the audio next to it. Returns it."""
    audio_path = Path(audio_path)
    sidecar_path = audio_path.with_suffix(".json")
    assert sidecar_path.is_file(), f"no sidecar next to {audio_path}"
    meta = json.loads(sidecar_path.read_text(encoding="utf-8"))
    assert meta["schema_version"] == 2 and meta["entry_point"] == entry_point
    assert meta["app"]["name"] == "tts_app" and meta["app"]["version"]
    model = meta["model"]
    assert {"id", "revision", "checkpoint_sha256", "family", "dtype", "device", "num_parameters"} <= set(model)
    assert model["family"] and model["dtype"] in ("float32", "bfloat16", "float16") and model["device"]
    assert model["languages"] and all(isinstance(code, str) for code in model["languages"])
    if model_id is not None:
        assert model["id"] == model_id
        if Path(model_id).is_dir():  # a local checkpoint folder (every tiny model) is identified by its content
            from tts_app.runtime import checkpoint_sha256

            assert model["checkpoint_sha256"] == checkpoint_sha256(Path(model_id))
    assert set(meta["generation"]) >= GENERATION_KEYS and set(meta["generation_sources"]) >= GENERATION_KEYS
    # after resolving defaults nothing the model needs is left open: a null knob is one the family lacks, and its
    # source says so; every other value names where it came from
    generation, sources = meta["generation"], meta["generation_sources"]
    assert generation["max_new_tokens"] >= 1 and generation["max_segment_chars"] >= 8
    assert all(isinstance(sources[name], str) and sources[name] for name in GENERATION_KEYS)
    assert all(s["max_new_tokens"] == generation["max_new_tokens"] for s in meta["segments"])
    assert meta["text"]["input"] == text and meta["text"]["normalized"]
    assert meta["segments"] and all(set(s) >= SEGMENT_KEYS for s in meta["segments"])
    assert [s["seed"] for s in meta["segments"]] == [meta["generation"]["seed"] + i
                                                      for i in range(len(meta["segments"]))]
    assert all(s["batch_size"] >= 1 for s in meta["segments"])
    assert isinstance(meta["warnings"], list)
    if reference is None:
        assert meta["reference"] is None
    else:
        ref = meta["reference"]
        assert ref["name"] == reference.name and ref["cleaned_duration_s"] > 0
        assert ref["sha256"] == hashlib.sha256(reference.read_bytes()).hexdigest()
    audio = meta["audio"]
    assert audio["file"] == audio_path.name
    assert audio["sha256"] == hashlib.sha256(audio_path.read_bytes()).hexdigest()
    assert audio["num_samples"] > 0 and audio["sampling_rate"] > 0
    return meta
