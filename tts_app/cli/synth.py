"""``python -m tts_app synth``: synthesise one text (segmented, segments batched) in a cloned voice to a WAV file,
with a metadata sidecar next to it (``out.wav`` -> ``out.json``: model, settings, seeds, reference, segments; see
``tts_app.outputs``).

    python -m tts_app synth --ref voice.wav [--ref-text T] --text "..." --out out.wav [--srt out.srt]
    python -m tts_app synth --voice NAME [--voices-dir DIR] --text "..." --out out.mp3   # a saved voice
    python -m tts_app synth --script dialogue.txt --voice 1=a.wav --voice 2=mei --out talk.opus
        [model and engine flags: --model --device --dtype --max-batch-size --memory-budget ...]
        [generation flags: --seed --greedy --no-kv-cache --temperature --top-p --top-k --cfg-scale
         --max-new-tokens --max-segment-chars --pause-ms --speed --duration-s --loudness --chapter-pause-ms]
        [emotion (IndexTTS 2): --emo-ref clip.wav | --emo-vector 0.8,0,0,0,0,0,0,0 | --emo-from-text [--emo-text T]
         [--emo-weight W]]

The output format follows ``--out``'s ending: .wav, .flac, .mp3 or .opus. A text with chapters (``# Title`` lines)
also writes one file per chapter next to it (``out.ch01_Title.wav``). ``--script FILE`` reads a dialogue
(``Speaker 1: ...``, ``[S1] ...`` or ``Name: ...`` lines; ``tts_app.dialogue``) and ``--voice SPEAKER=VOICE`` gives
each speaker a voice (an audio file or a saved voice's name).

Generation flags not given take the checkpoint's own defaults. Exit status: 0 written; 1 the model, the reference
audio (or its transcript) or the synthesis failed, a text too large for the memory budget or out of memory
included, or the model produced no audio at all (it ended speech at once; nothing is written, as on the page:
``tts_app.outputs.no_audio_error``); 2 bad command-line values, also when the engine refuses the text or a setting
(e.g. a --duration the speech cannot meet). Errors print one line (no traceback). ``--text -`` reads the text from
standard input.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from tts_app.cli.args import (CliParser, add_engine_args, add_generation_args, add_lang_arg, add_voice_args,
                              check_output_file, engine_args_from, lang_of, params_from_args, parse_cli,
                              voice_library_from)
from tts_app.cli.messages import say
from tts_app.frontend.messages import Notice, message_of
from tts_app.errors import InputError, ModelLoadError, ReferenceAudioError, TTSAppError

PROG = "python -m tts_app synth"


def build_parser() -> argparse.ArgumentParser:
    p = CliParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ref", help="reference audio file (the voice to clone); cleaned before use")
    p.add_argument("--ref-text", help="transcript of the reference audio, if known (default for --voice: its own)")
    p.add_argument("--voice", action="append", default=[], metavar="NAME|SPEAKER=VOICE",
                   help="a saved voice of the library (--voices-dir) or a bundled example voice, instead of --ref; "
                        "with --script, SPEAKER=VOICE per speaker (VOICE: an audio file or a voice name; repeat)")
    p.add_argument("--text", help="text to speak ('-' reads standard input)")
    p.add_argument("--script", metavar="FILE", help="a dialogue script file (UTF-8) instead of --text; give each "
                                                   "speaker a voice with --voice N=VOICE")
    p.add_argument("--out", required=True, help="output audio path, .wav/.flac/.mp3/.opus (written atomically; the "
                                                "sidecar goes next to it)")
    p.add_argument("--srt", help="also write SubRip subtitles, one cue per segment")
    add_engine_args(p)
    add_generation_args(p)
    emotion = p.add_argument_group("emotion (models with emotion control: IndexTTS 2; one source)")
    emotion.add_argument("--emo-ref", help="emotion clip: speak with the emotion of this audio file")
    emotion.add_argument("--emo-vector", help="8 comma-separated weights in [0, 1]: happy, angry, sad, afraid, "
                         "disgusted, melancholic, surprised, calm")
    emotion.add_argument("--emo-from-text", action="store_true",
                         help="read the emotion from the text (or --emo-text) with the checkpoint's emotion model")
    emotion.add_argument("--emo-text", help="the text to read the emotion from (with --emo-from-text)")
    emotion.add_argument("--emo-weight", type=float, default=None, help="emotion strength in [0, 1] (default 1)")
    add_voice_args(p)
    add_lang_arg(p)
    return p


_EMOTION_FLAGS = ("emo_ref", "emo_vector", "emo_text", "emo_weight")


def _emotion_vector(args: argparse.Namespace) -> tuple[float, ...] | None:
    if args.emo_vector is None:
        return None
    try:
        return tuple(float(v) for v in args.emo_vector.split(","))
    except ValueError:
        raise InputError(Notice("cli_emo_vector", value=args.emo_vector)) from None


def _check_emotion_args(args: argparse.Namespace) -> bool:
    """The --emo-* flags' rules, checked before the model loads (``tts_app.request.check_emotion``). Returns whether
    any was given.

    Raises:
        InputError: a vector that is not 8 numbers, values out of range, no source or two (exit status 2).
        ReferenceAudioError: --emo-ref is not a file.
    """
    from tts_app.request import check_emotion

    if not args.emo_from_text and all(getattr(args, name) is None for name in _EMOTION_FLAGS):
        return False
    if args.emo_ref is not None and not Path(args.emo_ref).is_file():
        raise ReferenceAudioError(Notice("cli_emo_ref_missing", path=args.emo_ref))
    check_emotion(has_reference_audio=args.emo_ref is not None, vector=_emotion_vector(args),
                  weight=1.0 if args.emo_weight is None else args.emo_weight, from_text=args.emo_from_text,
                  text=args.emo_text)
    return True


def _emotion_from_args(args: argparse.Namespace, runtime):
    """The request's ``EmotionControl`` from the --emo-* flags (the clip cleaned by the runtime's reference
    preparer, like --ref), or None without them.

    Raises:
        ReferenceAudioError: an unusable emotion clip.
    """
    from tts_app.request import EmotionControl

    if not _check_emotion_args(args):
        return None
    clip = runtime.references.prepare(args.emo_ref).audio if args.emo_ref else None
    return EmotionControl(reference_audio=clip, vector=_emotion_vector(args), from_text=args.emo_from_text,
                          text=args.emo_text, weight=1.0 if args.emo_weight is None else args.emo_weight)


def exit_status(finish) -> int:
    """The exit status of a request that ended without audio, from its ``tts_app.finish.Finish`` (module docstring):
    2 for the user's text or settings (REFUSED), 1 for its reference clip or transcript and for every failure
    (TOO_LARGE for the memory budget, OUT_OF_MEMORY, ERROR, UNAVAILABLE)."""
    from tts_app.finish import FinishReason

    if finish.reason is FinishReason.REFUSED and finish.field not in ("reference_audio", "reference_text"):
        return 2
    return 1


def main(argv: list[str]) -> int:
    args = parse_cli(build_parser(), argv)
    if isinstance(args, int):
        return args
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return _run(args)
    except InputError as exc:
        print(say(lang_of(args), "cli_error", message=message_of(exc)), file=sys.stderr)
        return 2
    except (ModelLoadError, ReferenceAudioError, TTSAppError) as exc:
        print(say(lang_of(args), "cli_error", message=message_of(exc)), file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    from tts_app.audio.formats import format_for_path
    from tts_app.audio.transcribe import fill_transcript, transcriber_from
    from tts_app.dialogue import check_voices, dialogue_request, parse_script, parse_voice_assignments
    from tts_app.engine.memory import format_bytes
    from tts_app.outputs import metadata_path, no_audio_error, output_metadata, save_outputs
    from tts_app.request import SynthesisRequest
    from tts_app.runtime import Runtime

    # Everything checkable without the model first: a typo must not cost a model load and a whole synthesis.
    engine_args = engine_args_from(args, wait_window_ms=0.0)  # one request: nothing to wait for
    params = params_from_args(args)
    check_output_file(args.out, "--out")
    format_for_path(args.out)
    if args.srt:
        check_output_file(args.srt, "--srt", "out.srt")
    if args.srt and Path(args.srt).absolute() in (Path(args.out).absolute(), metadata_path(args.out).absolute()):
        raise InputError(Notice("cli_srt_clash", path=args.srt))
    if (args.text is None) == (args.script is None):
        raise InputError(Notice("cli_text_or_script"))
    library = voice_library_from(args)
    script = assignments = None
    if args.script is not None:
        if args.ref is not None:
            raise InputError(Notice("cli_ref_with_script"))
        try:
            script_text = Path(args.script).read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(Notice("cli_script_unreadable", path=args.script, reason=str(exc))) from None
        script = parse_script(script_text)
        assignments = check_voices(script, parse_voice_assignments(args.voice))
        for value in assignments:
            library.check_voice_or_file(value)
        text = script_text
    else:
        text = sys.stdin.read() if args.text == "-" else args.text
    if script is None and args.ref is not None and not Path(args.ref).is_file():
        raise ReferenceAudioError(Notice("cli_ref_missing", path=args.ref))
    _check_emotion_args(args)
    if script is None and len(args.voice) > 1:
        raise InputError(Notice("cli_voice_twice"))
    if script is None and args.voice and args.ref is not None:
        raise InputError(Notice("cli_voice_and_ref"))
    voice_name = args.voice[0] if args.voice and script is None else None
    reference_text = args.ref_text
    if voice_name is not None:
        voice = library.get(voice_name)  # VoiceNotFoundError (an InputError) lists the voices there are
        reference_text = reference_text if reference_text is not None else voice.reference_text

    runtime = Runtime.load(engine_args.model, engine_args.engine)
    try:
        transcriber = transcriber_from(args.asr_model, runtime.engine.device)
        needs_text = runtime.engine.facts.needs_reference_text
        notes: list[str] = []  # automatic transcripts (or why there is none)

        def transcript(ref, known: str | None) -> str | None:
            filled, said = fill_transcript(transcriber, ref, known, needs_reference_text=needs_text)
            notes.extend(said)
            return filled

        reference, speaker_refs = None, None
        if script is not None:
            # files with --reference-cleanup (or the default); saved voices as saved unless it is given
            voices = [library.resolve(value, runtime.references, args.reference_cleanup)
                      for value in assignments]
            voices = [(ref, transcript(ref, known)) for ref, known in voices]
            speaker_refs = [ref for ref, _ in voices]
            request = dialogue_request(script, voices, text=text, params=params,
                                       emotion=_emotion_from_args(args, runtime))
        else:
            if voice_name is not None:
                reference = library.prepare(voice_name, runtime.references, args.reference_cleanup)
            elif args.ref:
                reference = runtime.references.prepare(args.ref, reference_text=args.ref_text,
                                                       cleanup=params.reference_cleanup)
                reference_text = reference.text
            reference_text = transcript(reference, reference_text)
            request = SynthesisRequest(text=text, reference_audio=reference.audio if reference else None,
                                       reference_text=reference_text, params=params,
                                       emotion=_emotion_from_args(args, runtime))
        result = runtime.engine.submit(request).result()
        stats = runtime.engine.stats()
        reference_warnings = [w for ref in ([reference] + (speaker_refs or [])) if ref is not None
                              for w in ref.warnings] + notes
        lang = lang_of(args)
        for warning in reference_warnings + list(result.warnings):
            print(say(lang, "cli_warning", message=warning), file=sys.stderr)
        if not result.ok:
            print(say(lang, "cli_error", message=result.finish.message), file=sys.stderr)
            return exit_status(result.finish)
        no_audio = no_audio_error(request, result)  # the page's words for it; no file of 0 samples is written
        if no_audio is not None:
            print(say(lang, "cli_error", message=no_audio), file=sys.stderr)
            return 1
        metadata = output_metadata(runtime, request, result, entry_point="synth", reference=reference,
                                   speaker_references=speaker_refs, warnings=notes)
        files = save_outputs(args.out, result, metadata, subtitles_path=args.srt)
    finally:
        runtime.close()
    chapters = say(lang, "cli_chapters", count=len(files.chapters)) if files.chapters else ""
    # a continuous engine counts a batch per decode step (EngineStats.num_batches): say which it is
    runs = Notice("cli_runs_decode_steps" if stats.continuous else "cli_runs_batches", count=stats.num_batches)
    print(say(lang, "cli_synth_wrote", path=str(files.audio), duration_s=result.duration_s,
              sampling_rate=result.sampling_rate, num_segments=len(result.segments), runs=runs,
              largest=max(s.batch_size for s in result.segments), num_oom=stats.num_oom,
              budget=format_bytes(stats.memory_budget_bytes), metadata=str(files.metadata), chapters=chapters))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
