"""``python -m tts_app synth``: synthesise one text (segmented, segments batched) in a cloned voice to a WAV file,
with a metadata sidecar next to it (``out.wav`` -> ``out.json``: model, settings, seeds, reference, segments; see
``tts_app.outputs``).

    python -m tts_app synth --ref voice.wav [--ref-text T] --text "..." --out out.wav [--srt out.srt]
        [model and engine flags: --model --device --dtype --max-batch-size --memory-budget ...]
        [generation flags: --seed --greedy --no-kv-cache --temperature --top-p --top-k --cfg-scale
         --max-new-tokens --max-segment-chars --pause-ms]

Generation flags not given take the checkpoint's own defaults. Exit status: 0 written; 1 the model, the reference
audio or the synthesis failed; 2 bad command-line values. Errors print one line (no traceback). ``--text -`` reads
the text from standard input.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from tts_app.cli.args import (CliParser, add_engine_args, add_generation_args, check_output_file, engine_args_from,
                              params_from_args, parse_cli)
from tts_app.errors import InputError, ModelLoadError, ReferenceAudioError, TTSAppError

PROG = "python -m tts_app synth"


def build_parser() -> argparse.ArgumentParser:
    p = CliParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", help="reference audio file (the voice to clone); cleaned before use")
    p.add_argument("--ref-text", help="transcript of the reference audio, if known")
    p.add_argument("--text", required=True, help="text to speak ('-' reads standard input)")
    p.add_argument("--out", required=True, help="output WAV path (written atomically; the sidecar goes next to it)")
    p.add_argument("--srt", help="also write SubRip subtitles, one cue per segment")
    add_engine_args(p)
    add_generation_args(p)
    return p


def main(argv: list[str]) -> int:
    args = parse_cli(build_parser(), argv)
    if isinstance(args, int):
        return args
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
    from tts_app.engine.memory import format_bytes
    from tts_app.outputs import metadata_path, output_metadata, save_outputs
    from tts_app.request import SynthesisRequest
    from tts_app.runtime import Runtime

    # Everything checkable without the model first: a typo must not cost a model load and a whole synthesis.
    engine_args = engine_args_from(args, wait_window_ms=0.0)  # one request: nothing to wait for
    params = params_from_args(args)
    check_output_file(args.out, "--out")
    if args.srt:
        check_output_file(args.srt, "--srt", "out.srt")
    if args.srt and Path(args.srt).absolute() in (Path(args.out).absolute(), metadata_path(args.out).absolute()):
        raise InputError(f"--srt {args.srt!r} would overwrite the audio or its metadata sidecar; give another name")
    text = sys.stdin.read() if args.text == "-" else args.text
    if args.ref is not None and not Path(args.ref).is_file():
        raise ReferenceAudioError(f"reference audio {args.ref!r} does not exist; give --ref an audio file")

    runtime = Runtime.load(engine_args.model, engine_args.engine)
    try:
        reference = runtime.references.prepare(args.ref, reference_text=args.ref_text) if args.ref else None
        request = SynthesisRequest(text=text, reference_audio=reference.audio if reference else None,
                                   reference_text=reference.text if reference else args.ref_text, params=params)
        result = runtime.engine.submit(request).result()
        stats = runtime.engine.stats()
        for warning in (reference.warnings if reference else []) + list(result.warnings):
            print(f"warning: {warning}", file=sys.stderr)
        if not result.ok:
            print(f"error: {result.error}", file=sys.stderr)
            return 1
        metadata = output_metadata(runtime, request, result, entry_point="synth", reference=reference)
        files = save_outputs(args.out, result, metadata, subtitles_path=args.srt)
    finally:
        runtime.close()
    print(f"wrote {files.audio}: {result.duration_s:.2f} s at {result.sampling_rate} Hz, {len(result.segments)} "
          f"segments in {stats.num_batches} batches (largest {max(s.batch_size for s in result.segments)}), "
          f"{stats.num_oom} out-of-memory retries, memory budget {format_bytes(stats.memory_budget_bytes)}; "
          f"metadata in {files.metadata}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
