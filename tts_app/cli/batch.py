"""``python -m tts_app batch TASKS.jsonl --out-dir DIR [--audio-dir DIR|ZIP] [--resume] [engine flags]
[--ray [ADDRESS|auto|local] [--num-workers N] [--gpus-per-worker G]]``

Checks the arguments and validates the whole file first (no model), loads the model only when some line needs it,
runs every line through one engine (or, with --ray, through N Ray workers with one engine each) and writes
``DIR/<output_name>.wav`` (or ``--format``) per line plus ``DIR/results.jsonl`` (always here, on this machine).
A progress bar goes to stderr.

Exit status: 0 every line ok; 1 some lines failed (listed on stderr); 2 usage error (bad arguments, unreadable
or undecodable job file, unusable audio folder/default voice, model load failure, a Ray cluster that cannot be
used); 130 cancelled with Ctrl-C (every line still has its record; --resume finishes the job).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from tts_app.cli.args import (CliParser, add_cluster_args, add_engine_args, add_generation_args, add_lang_arg,
                              add_voice_args, check_output_dir, cluster_config_from, engine_args_from, lang_of,
                              params_from_args, parse_cli)
from tts_app.audio.formats import AUDIO_FORMATS
from tts_app.cli.messages import say
from tts_app.errors import TTSAppError
from tts_app.frontend.messages import CATALOGUE, localize, message_of
from tts_app.jobs.messages import Notice

logger = logging.getLogger(__name__)

JSONL_HELP = """\
job file (JSONL): one JSON object per line, UTF-8; blank lines are skipped.
  field           alias          meaning
  input_text      syn_text       text to speak (required)
  prompt_audio    prompt_speech  reference audio file, relative to --audio-dir, then to the JSONL's folder
                                 (required unless --default-voice is given)
  prompt_text                    transcript of the reference audio (optional; Dia needs it to clone a voice)
  voice                          a saved voice (--voices-dir) or bundled example voice, instead of prompt_audio
  output_name     uttid          output file name without .wav (default: the zero-padded line number and the
                                 text's first words, e.g. 00003_今天天气很好)
  format                         this line's audio format: wav, flac, mp3 or opus (default: --format)
  seed, greedy, temperature, top_p, top_k, cfg_scale, max_new_tokens, num_beams, length_penalty, num_diffusion_steps,
  max_segment_chars, pause_between_segments_ms, speed, duration_s, loudness_lufs, chapter_pause_ms,
  segment_durations_s, segment_context, prompt_cache, take_check, take_max_rerolls, take_max_error_rate,
  take_min_similarity
                                 per-line generation settings (optional; override --seed etc.;
                                 segment_durations_s: a list, seconds per line of the text;
                                 segment_context: true = each segment hears the earlier ones;
                                 prompt_cache: GLM-TTS's long-text prompt cache, not the KV cache;
                                 take_check: off / score / reroll, with its thresholds)
  GLM-TTS's own files (uttid, prompt_text, prompt_speech, syn_text) run unchanged; a prompt_speech path written
  from the folder above the JSONL (examples/prompt/a.wav) is also found as prompt/a.wav next to it. One line, one
  format: a line mixing GLM-TTS's names and ours fails.

example line:
  {"input_text": "你好，欢迎收听。", "prompt_audio": "voices/mei.wav", "prompt_text": "大家好。", "output_name": "intro"}

outputs: DIR/<output_name>.wav and its metadata sidecar DIR/<output_name>.json (model, effective settings,
seeds, reference hash, segments) per ok line, and DIR/results.jsonl with exactly one record per non-blank line,
in line order (line, output_name, status ok|failed|cancelled, error, audio_path, metadata_path, duration_s,
num_segments, elapsed_s, warnings). A bad line is recorded as failed and the job goes on. Ctrl-C cancels: lines
running finish, the others are recorded as cancelled (a second Ctrl-C stops at once). --resume keeps lines
already ok whose audio still decodes and runs the rest.
"""


def build_parser() -> argparse.ArgumentParser:
    p = CliParser(prog="python -m tts_app batch", description=__doc__, epilog=JSONL_HELP,
                  formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tasks", metavar="TASKS.jsonl", help="job file: one JSON object per line")
    p.add_argument("--out-dir", required=True, help="output folder (created); nothing is written outside it")
    p.add_argument("--audio-dir", default=None,
                   help="folder or ZIP with the reference audio; prompt_audio paths are relative to it (then to "
                        "the JSONL's folder)")
    p.add_argument("--resume", action="store_true",
                   help="skip lines already ok in DIR/results.jsonl whose audio still decodes")
    p.add_argument("--validate-only", action="store_true", help="check the file and exit (no model is loaded)")
    p.add_argument("--default-voice", default=None, help="reference audio for lines without prompt_audio")
    p.add_argument("--default-voice-text", default=None, help="transcript of --default-voice")
    p.add_argument("--allowed-root", action="append", default=[], metavar="DIR",
                   help="extra folder prompt_audio may point into (repeatable)")
    p.add_argument("--format", dest="audio_format", choices=list(AUDIO_FORMATS), default="wav",
                   help="audio format of the lines' outputs (default wav; a line's own \"format\" field overrides "
                        "it)")
    add_engine_args(p)
    add_generation_args(p, "generation defaults (a line's own fields override them; not given = the model's)")
    add_voice_args(p)
    add_cluster_args(p)
    add_lang_arg(p)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the ``batch`` command; returns the exit status (0 all ok, 1 some lines failed, 2 usage error)."""
    args = parse_cli(build_parser(), list(sys.argv[1:] if argv is None else argv))
    if isinstance(args, int):
        return args
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    lang = lang_of(args)

    from tts_app.audio.transcribe import transcriber_from
    from tts_app.jobs.runner import count_lines_to_run, run_job, validate_job
    from tts_app.jobs.schema import JobConfig

    # Everything that can be checked without the model is checked before it loads (a model load takes minutes).
    config = JobConfig(extra_allowed_roots=tuple(args.allowed_root), voices_dir=args.voices_dir,
                       audio_format=args.audio_format)
    try:
        check_output_dir(args.out_dir, "--out-dir")
        if args.voices_dir is not None:
            check_output_dir(args.voices_dir, "--voices-dir")
        params = params_from_args(args)
        engine_args = engine_args_from(args)
        cluster = cluster_config_from(args)
        report = validate_job(args.tasks, audio_dir=args.audio_dir, default_voice=args.default_voice,
                              config=config)
    except TTSAppError as exc:
        print(say(lang, "cli_error", message=message_of(exc)), file=sys.stderr)
        return 2
    if report.rows:
        print(report.format_text(lang), file=sys.stderr)
    if report.num_lines == 0:
        return 2
    if args.validate_only:
        print(say(lang, "cli_valid_count", num_valid=report.num_valid, num_lines=report.num_lines))
        return 0 if report.ok else 1
    try:
        num_to_run = count_lines_to_run(args.tasks, args.out_dir, audio_dir=args.audio_dir,
                                        default_voice=args.default_voice, resume=args.resume, config=config)
    except TTSAppError as exc:
        print(say(lang, "cli_error", message=message_of(exc)), file=sys.stderr)
        return 2

    runtime = pool = executor = None
    if num_to_run > 0 and cluster is not None:
        from tts_app.jobs.cluster import RayExecutor, WorkerPool

        try:
            pool = WorkerPool.start(engine_args, config=cluster,
                                    on_status=lambda line: print(localize(line, lang), file=sys.stderr))
        except TTSAppError as exc:
            print(say(lang, "cli_error", message=message_of(exc)), file=sys.stderr)
            return 2
        executor = RayExecutor(pool)
    elif num_to_run > 0:
        from tts_app.runtime import Runtime

        try:
            runtime = Runtime.load(engine_args.model, engine_args.engine)
        except TTSAppError as exc:
            print(say(lang, "cli_error", message=message_of(exc)), file=sys.stderr)
            return 2
    else:
        print(Notice("job_no_model_needed").render(lang), file=sys.stderr)

    # automatic reference transcripts: the local engine's device; with --ray only the setting is used here (each
    # worker builds its own Transcriber on its device from it, JobContext.asr), nothing loads on this machine
    transcriber = None
    if num_to_run > 0:
        transcriber = transcriber_from(args.asr_model, runtime.engine.device if runtime is not None else "cpu")

    from tqdm import tqdm

    bar = tqdm(total=report.num_lines, unit=Notice("job_progress_unit").render(lang), file=sys.stderr,
               dynamic_ncols=True)
    counts = {"ok": 0, "failed": 0, "cancelled": 0, "skipped": 0}

    def progress(done: int, total: int, info: dict) -> None:
        counts[info["status"]] = counts.get(info["status"], 0) + 1
        bar.set_postfix({Notice(f"job_count_{status}").render(lang) if f"job_count_{status}" in CATALOGUE["en"]
                         else status: count for status, count in counts.items()}, refresh=False)
        bar.update(done - bar.n)

    cancel = threading.Event()

    def on_interrupt(signum, frame) -> None:  # first Ctrl-C: cancel (every line gets its record); second: stop now
        if cancel.is_set():
            raise KeyboardInterrupt
        cancel.set()
        print("\n" + Notice("job_cancelling").render(lang), file=sys.stderr)

    in_main_thread = threading.current_thread() is threading.main_thread()  # signal handlers live only there
    previous_handler = signal.signal(signal.SIGINT, on_interrupt) if in_main_thread else None
    try:
        summary = run_job(args.tasks, args.out_dir, runtime, audio_dir=args.audio_dir, resume=args.resume,
                          progress=progress, params=params, default_voice=args.default_voice,
                          default_voice_text=args.default_voice_text, config=config, cancel_event=cancel,
                          executor=executor, transcriber=transcriber)
    except TTSAppError as exc:
        bar.close()
        print(say(lang, "cli_error", message=message_of(exc)), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        bar.close()
        print(Notice("job_interrupted").render(lang), file=sys.stderr)
        return 130
    finally:
        if in_main_thread:
            signal.signal(signal.SIGINT, previous_handler)
        if runtime is not None:
            runtime.close()  # joins the worker thread: a live one can abort the interpreter's exit (status 134)
        if pool is not None:
            pool.close()  # the workers' engines, then the actors (and a cluster started for this run)
    bar.close()
    print(summary.format_text(lang).splitlines()[0])
    if pool is not None:
        print(Notice("job_ray_ran_on", count=pool.num_workers).render(lang)
              + (Notice("job_ray_retried", count=executor.num_retried).render(lang) if executor.num_retried else ""),
              file=sys.stderr)
        for event in pool.events:
            print(f"  {localize(event, lang)}", file=sys.stderr)
    if summary.failed:
        print(say(lang, "cli_failed_lines"), file=sys.stderr)
        for line, error in sorted(summary.failed):
            print(Notice("job_failed_line", line=line, message=error).render(lang), file=sys.stderr)
    if cancel.is_set():
        print(Notice("job_cancelled_resume").render(lang), file=sys.stderr)
        return 130
    return 0 if summary.all_ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
