"""``python -m tts_app synth`` end to end on a tiny checkpoint: files written, batching-invariant audio, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf

from tests.ui_app import run_python_forked
from tts_app.cli.synth import main

FAMILY = "csm"  # its tiny checkpoint speaks (non-empty audio) under greedy decoding
TEXT = ("The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs. "
        "How vexingly quick daft zebras jump. Sphinx of black quartz, judge my vow.")


def _synth(model: Path, ref: Path, out: Path, *extra: str) -> int:
    return main(["--model", str(model), "--ref", str(ref), "--text", TEXT, "--out", str(out), "--greedy",
                 "--max-new-tokens", "4", "--max-segment-chars", "50", "--device", "cpu", *extra])


def test_batch_size_4_and_1_give_the_same_audio_and_subtitles(tiny_checkpoint, data_dir, tmp_path, capsys):
    model = tiny_checkpoint(FAMILY)
    ref = data_dir / "en_female_1.wav"
    assert _synth(model, ref, tmp_path / "b4.wav", "--batch-size", "4", "--srt", str(tmp_path / "b4.srt")) == 0
    summary = capsys.readouterr().out
    assert "largest 4" in summary
    assert _synth(model, ref, tmp_path / "b1.wav", "--batch-size", "1") == 0
    assert "largest 1" in capsys.readouterr().out
    b4, sr4 = sf.read(tmp_path / "b4.wav", dtype="float32")
    b1, sr1 = sf.read(tmp_path / "b1.wav", dtype="float32")
    assert sr4 == sr1 == 24000 and len(b4) == len(b1) > 0
    np.testing.assert_allclose(b4, b1, atol=2 / 32768)  # 16-bit PCM: at most a rounding step apart
    cues = (tmp_path / "b4.srt").read_text(encoding="utf-8").strip().split("\n\n")
    assert len(cues) == 4 and "quick brown fox" in cues[0] and "-->" in cues[0]
    assert not list(tmp_path.glob(".*.tmp"))  # atomic write left no temporary file


def test_simulated_oom_still_writes_the_same_audio(tiny_checkpoint, data_dir, tmp_path, capsys):
    model = tiny_checkpoint(FAMILY)
    ref = data_dir / "en_female_1.wav"
    assert _synth(model, ref, tmp_path / "plain.wav", "--batch-size", "4") == 0
    capsys.readouterr()
    assert _synth(model, ref, tmp_path / "oom.wav", "--batch-size", "4", "--simulate-oom-above-batch", "1") == 0
    out = capsys.readouterr().out
    assert "2 out-of-memory retries" in out and "largest 1" in out
    plain, _ = sf.read(tmp_path / "plain.wav", dtype="float32")
    oom, _ = sf.read(tmp_path / "oom.wav", dtype="float32")
    np.testing.assert_allclose(oom, plain, atol=2 / 32768)


def test_memory_budget_too_small_fails_with_the_text_length_that_fits(tiny_checkpoint, data_dir, tmp_path, capsys):
    code = _synth(tiny_checkpoint(FAMILY), data_dir / "en_female_1.wav", tmp_path / "x.wav",
                  "--memory-budget", "1KiB")
    err = capsys.readouterr().err
    assert code == 1 and "out of memory" in err and "memory budget" in err
    assert not (tmp_path / "x.wav").exists()


def test_a_target_duration_the_speech_cannot_meet_is_a_usage_error_in_the_users_language(tiny_checkpoint, data_dir,
                                                                                        tmp_path, capsys):
    # found only after generation (the engine's REFUSED): exit status 2 as the help says, the message in --lang
    code = _synth(tiny_checkpoint(FAMILY), data_dir / "en_female_1.wav", tmp_path / "x.wav", "--duration-s", "500",
                  "--lang", "zh")
    err = capsys.readouterr().err
    assert code == 2 and "请给出" in err and "give a target" not in err, err
    assert not (tmp_path / "x.wav").exists()


def test_bad_reference_and_bad_sizes_are_one_line_errors(tiny_checkpoint, data_dir, tmp_path, capsys):
    model = tiny_checkpoint(FAMILY)
    assert _synth(model, data_dir / "corrupt_random_data.wav", tmp_path / "x.wav") == 1
    assert "error:" in capsys.readouterr().err
    assert _synth(model, tmp_path / "missing.wav", tmp_path / "x.wav") == 1
    assert "does not exist" in capsys.readouterr().err
    assert _synth(model, data_dir / "en_female_1.wav", tmp_path / "x.wav", "--memory-budget", "lots") == 2
    assert "2GiB" in capsys.readouterr().err
    assert not (tmp_path / "x.wav").exists()


def test_uncached_model_offline_exits_1_naming_model_dir(data_dir, tmp_path):
    # its own process (forked: the run is under test, not the imports), so the user's stderr is what is checked
    proc = run_python_forked("-m", "tts_app", "synth", "--model", "nobody-here/not-a-cached-model",
                             "--ref", str(data_dir / "en_female_1.wav"), "--text", "Hello.", "--out",
                             str(tmp_path / "x.wav"), env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
                             timeout_s=300)
    assert proc.returncode == 1, proc.stderr
    assert "--model" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "x.wav").exists()


def test_cuda_requested_without_a_device_is_a_usage_error(monkeypatch, data_dir, tmp_path, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code = main(["--model", "any", "--ref", str(data_dir / "en_female_1.wav"), "--text", "Hi.",
                 "--out", str(tmp_path / "x.wav"), "--device", "cuda"])
    assert code == 2 and "--device cpu" in capsys.readouterr().err


def test_unusable_output_paths_are_refused_before_the_model_loads(data_dir, tmp_path, capsys):
    # "--model" names no checkpoint: had the model been loaded first, the exit status would be 1 (load failure).
    (tmp_path / "afile").write_bytes(b"")
    ref = str(data_dir / "en_female_1.wav")
    cases = [(["--out", str(tmp_path)], "is a folder"),
             (["--out", str(tmp_path / "afile" / "x.wav")], "is a file, not a folder"),
             (["--out", str(tmp_path / "x.wav"), "--srt", str(tmp_path)], "--srt"),
             (["--out", str(tmp_path / "x.wav"), "--srt", str(tmp_path / "afile" / "sub" / "x.srt")], "afile")]
    for flags, needle in cases:
        code = main(["--model", str(tmp_path / "no-model"), "--ref", ref, "--text", "Hi.", *flags])
        err = capsys.readouterr().err
        assert code == 2, (flags, err)
        assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # nothing written


def test_negative_or_zero_memory_budget_is_a_usage_error(data_dir, tmp_path, capsys):
    for flags in (["--memory-budget", "-5MB"], ["--memory-budget=-5MB"], ["--memory-budget", "0"]):
        code = main(["--model", "any", "--ref", str(data_dir / "en_female_1.wav"), "--text", "Hi.",
                     "--out", str(tmp_path / "x.wav"), *flags])
        err = capsys.readouterr().err
        assert code == 2 and "memory budget must be positive" in err, (flags, err)
        assert "expected one argument" not in err


def test_dia_reference_without_its_text_is_one_clear_error_line(tiny_checkpoint, data_dir, tmp_path):
    # its own process: the user's stderr, with the CLI's own logging set-up (pytest's log capture would hide a
    # duplicate WARNING line); forked, as the run is under test, not the imports
    proc = run_python_forked("-m", "tts_app", "synth", "--model", str(tiny_checkpoint("dia")),
                             "--ref", str(data_dir / "en_female_1.wav"), "--text", "Hi.", "--out",
                             str(tmp_path / "x.wav"), "--greedy", "--max-new-tokens", "20", "--device", "cpu",
                             env={"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}, timeout_s=300)
    lines = proc.stderr.replace("\r", "\n").splitlines()
    assert proc.returncode == 1, proc.stderr
    mentions = [line for line in lines if "transcript" in line]
    assert len(mentions) == 1 and mentions[0].startswith("error: Dia clones a voice only with"), lines
    assert "--ref-text" in mentions[0]
    assert not [line for line in lines if "WARNING" in line or "Traceback" in line], lines
    assert not (tmp_path / "x.wav").exists()


def test_synth_writes_a_complete_sidecar_next_to_the_audio(tiny_checkpoint, data_dir, tmp_path):
    from tests.sidecar_check import check_sidecar

    model, ref = tiny_checkpoint(FAMILY), data_dir / "en_female_1.wav"
    assert _synth(model, ref, tmp_path / "out.wav", "--seed", "5", "--srt", str(tmp_path / "out.srt")) == 0
    meta = check_sidecar(tmp_path / "out.wav", entry_point="synth", text=TEXT, reference=ref, model_id=str(model))
    assert meta["generation"]["seed"] == 5 and meta["generation"]["greedy"] is True
    assert meta["generation"]["max_new_tokens"] == 4 and meta["generation_sources"]["max_new_tokens"] == "request"
    assert meta["generation"]["max_segment_chars"] == 50 and len(meta["segments"]) == 4
    assert meta["subtitles"]["file"] == "out.srt"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json", "out.srt", "out.wav"]  # no temp files


def test_srt_path_that_would_overwrite_the_sidecar_is_refused(data_dir, tmp_path, capsys):
    code = main(["--model", str(tmp_path / "no-model"), "--ref", str(data_dir / "en_female_1.wav"), "--text", "Hi.",
                 "--out", str(tmp_path / "x.wav"), "--srt", str(tmp_path / "x.json")])
    assert code == 2 and "sidecar" in capsys.readouterr().err


def test_dia_reference_without_text_is_transcribed_by_the_asr_model(tiny_checkpoint, tiny_whisper, data_dir,
                                                                    tmp_path, capsys):
    from tts_app.audio.preparer import ReferencePreparer
    from tts_app.audio.transcribe import Transcriber

    ref = data_dir / "zh_female_1.wav"
    code = main(["--model", str(tiny_checkpoint("dia")), "--ref", str(ref), "--text", "你好。",
                 "--out", str(tmp_path / "x.wav"), "--greedy", "--max-new-tokens", "20", "--device", "cpu",
                 "--asr-model", str(tiny_whisper)])
    err = capsys.readouterr().err
    assert code == 0, err  # without --asr-model this is the "Dia clones a voice only with ..." error above
    meta = json.loads((tmp_path / "x.json").read_text(encoding="utf-8"))
    cleaned = ReferencePreparer(meta["reference"]["sampling_rate"]).prepare(ref).audio  # the clip the model got
    expected = Transcriber(str(tiny_whisper)).transcribe(cleaned.samples, cleaned.sampling_rate)
    assert expected and meta["reference"]["text"] == expected  # the transcript of the cleaned clip, recorded
    assert "transcribed automatically" in err and any("transcribed automatically" in w for w in meta["warnings"])


def test_reference_cleanup_auto_by_default_full_on_request_and_the_sidecar_says_what_changed(tiny_checkpoint,
                                                                                            data_dir, tmp_path):
    """--reference-cleanup: auto (default) only resamples the clip for the model; full trims, filters and levels it;
    the sidecar records the choice and the changes, and the audio differs as the reference does."""
    import json

    model, ref = tiny_checkpoint(FAMILY), data_dir / "en_male_1__flac_48k_pinknoise_hum50.flac"
    assert _synth(model, ref, tmp_path / "auto.wav") == 0
    assert _synth(model, ref, tmp_path / "full.wav", "--reference-cleanup", "full") == 0
    auto = json.loads((tmp_path / "auto.json").read_text(encoding="utf-8"))
    full = json.loads((tmp_path / "full.json").read_text(encoding="utf-8"))
    assert auto["reference"]["cleanup"] == "auto" and auto["reference"]["changes"] == ["resampled 48000 -> 24000 Hz"]
    assert full["reference"]["cleanup"] == "full"
    assert any("high-pass" in c for c in full["reference"]["changes"])
    assert full["reference"]["cleaned_duration_s"] < auto["reference"]["cleaned_duration_s"]
    assert auto["generation"]["reference_cleanup"] == "auto" and full["generation"]["reference_cleanup"] == "full"
    assert _synth(model, ref, tmp_path / "x.wav", "--reference-cleanup", "light") == 2  # a usage error
