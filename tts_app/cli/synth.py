"""``python -m tts_app synth``: synthesise one text (segmented, segments batched) in a cloned voice to a WAV file.

    python -m tts_app synth --model ID_OR_DIR --ref voice.wav [--ref-text T] --text "..." --out out.wav
        [--seed N] [--greedy] [--no-kv-cache] [--max-new-tokens N] [--dtype D] [--device auto|cpu|cuda]
        [--batch-size N] [--memory-budget SIZE] [--simulate-oom-above-batch N] [--srt out.srt]

Exit status: 0 written; 1 the model, the reference audio or the synthesis failed; 2 bad command-line values.
Errors print one line (no traceback). ``--text -`` reads the text from standard input.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from tts_app.cli.args import check_output_file, join_negative_values, memory_budget, positive_int
from tts_app.config import DEFAULT_MODEL_ID, EngineConfig
from tts_app.errors import InputError, ModelLoadError, ReferenceAudioError, TTSAppError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tts_app synth", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default=DEFAULT_MODEL_ID,
                   help=f"hub id or local checkpoint folder (default {DEFAULT_MODEL_ID})")
    p.add_argument("--ref", help="reference audio file (the voice to clone); cleaned before use")
    p.add_argument("--ref-text", help="transcript of the reference audio, if known")
    p.add_argument("--text", required=True, help="text to speak ('-' reads standard input)")
    p.add_argument("--out", required=True, help="output WAV path (written atomically)")
    p.add_argument("--srt", help="also write SubRip subtitles, one cue per segment")
    p.add_argument("--seed", type=int, default=0, help="base seed; segment i uses seed + i (default 0)")
    p.add_argument("--greedy", action="store_true", help="greedy decoding (deterministic)")
    p.add_argument("--no-kv-cache", action="store_true", help="decode without KV cache (slower, same output)")
    p.add_argument("--max-new-tokens", type=positive_int, help="cap on decode steps per segment")
    p.add_argument("--max-segment-chars", type=int, help="split the text into segments of at most this many chars")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--batch-size", type=positive_int, help="most segments per forward call (default "
                   f"{EngineConfig().max_batch_size})")
    p.add_argument("--memory-budget", type=memory_budget,
                   help="memory for KV cache + activations, e.g. 2GiB or 512MB "
                   "(default: from free device memory on CUDA, unlimited on CPU)")
    p.add_argument("--simulate-oom-above-batch", type=positive_int,
                   help="testing aid: raise a real out-of-memory error for batches larger than N")
    return p


def _load_reference(path: str, sampling_rate: int, reference_text: str | None):
    """Cleaned reference audio at the model's rate, plus the cleanup's warnings.

    Raises:
        ReferenceAudioError: missing, corrupt, silent or too-short file.
    """
    if not Path(path).is_file():
        raise ReferenceAudioError(f"reference audio {path!r} does not exist; give --ref an audio file")
    from tts_app.audio.reference import prepare_reference

    ref, report = prepare_reference(path, target_sampling_rate=sampling_rate, reference_text=reference_text)
    return ref, list(report.warnings)


def main(argv: list[str]) -> int:
    try:
        args = build_parser().parse_args(join_negative_values(list(argv), ("--memory-budget",)))
    except SystemExit as exc:  # argparse exits 2 on bad arguments, 0 on --help
        return int(exc.code or 0)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return _run(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (ModelLoadError, ReferenceAudioError, TTSAppError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    from tts_app.engine import Engine
    from tts_app.engine.memory import format_bytes
    from tts_app.request import SynthesisParams, SynthesisRequest

    # Output paths first: a folder given as --out must not cost a model load and a whole synthesis.
    check_output_file(args.out, "--out")
    if args.srt:
        check_output_file(args.srt, "--srt", "out.srt")
    text = sys.stdin.read() if args.text == "-" else args.text
    budget = args.memory_budget
    params = SynthesisParams(seed=args.seed, greedy=args.greedy, use_cache=not args.no_kv_cache,
                             max_new_tokens=args.max_new_tokens, max_segment_chars=args.max_segment_chars)
    if args.ref is not None and not Path(args.ref).is_file():  # fail fast, before loading the model
        raise ReferenceAudioError(f"reference audio {args.ref!r} does not exist; give --ref an audio file")

    from tts_app.adapters import load_adapter
    from tts_app.audio.post import to_srt, write_atomic, write_wav_atomic

    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise InputError("--device cuda was given but no CUDA device is available; use --device cpu or auto")

    adapter = load_adapter(args.model, device=args.device, dtype=args.dtype)
    warnings: list[str] = []
    reference = None
    if args.ref is not None:
        reference, warnings = _load_reference(args.ref, adapter.facts.sampling_rate, args.ref_text)

    defaults = EngineConfig()
    config = EngineConfig(
        max_batch_size=args.batch_size if args.batch_size is not None else defaults.max_batch_size,
        memory_budget_bytes=budget,
        simulate_oom_above_batch=args.simulate_oom_above_batch,
        wait_window_ms=0.0,  # one request: nothing to wait for
    )
    engine = Engine(adapter, config).start()
    try:
        request = SynthesisRequest(text=text, reference_audio=reference, reference_text=args.ref_text,
                                   params=params)
        result = engine.submit(request).result()
        stats = engine.stats()
    finally:
        engine.shutdown()
    for warning in warnings + list(result.warnings):
        print(f"warning: {warning}", file=sys.stderr)
    if not result.ok:
        print(f"error: {result.error}", file=sys.stderr)
        return 1
    write_wav_atomic(args.out, result.audio, result.sampling_rate)
    if args.srt:
        spans = [(s.start_s, s.end_s) for s in result.segments]
        write_atomic(args.srt, to_srt([s.text for s in result.segments], spans).encode("utf-8"))
    print(f"wrote {args.out}: {result.duration_s:.2f} s at {result.sampling_rate} Hz, {len(result.segments)} "
          f"segments in {stats.num_batches} batches (largest {max(s.batch_size for s in result.segments)}), "
          f"{stats.num_oom} out-of-memory retries, memory budget {format_bytes(stats.memory_budget_bytes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
