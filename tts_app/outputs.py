"""What ran, written down: every synthesis output (web UI and API, ``synth``, each JSONL job line) is written by
``save_outputs`` as a 16-bit WAV, optional SubRip subtitles and a metadata sidecar JSON next to the audio
(``name.wav`` -> ``name.json``), each file atomically (temporary file, fsync, rename), the sidecar last.

Sidecar fields (``schema_version`` 2; version 1 had no ``speakers``, ``post_processing``, ``chapters``,
``reference.voice``, ``segments[].speaker`` / ``chapter`` / ``turns``, and its audio was always WAV):

- ``app``: ``name``, ``version``; ``entry_point``: "web" (UI and its API), "synth" or "job"; ``created_utc``;
  ``request_id``.
- ``model``: ``id``, ``revision`` (hub commit or null), ``checkpoint_sha256``, ``family``, ``dtype``, ``device``,
  ``num_parameters`` (``tts_app.runtime.ModelInfo``), ``languages`` it was trained on.
- ``generation``: every effective generation setting after resolving defaults (``seed`` is the base seed; a knob
  the family lacks is null); ``generation_sources``: where each value came from ("request", or the default's
  source, e.g. "checkpoint generation_config (temperature=1.8)", or why the family has no such knob).
- ``requested``: the request's ``SynthesisParams`` as given (null = not given).
- ``engine``: ``max_batch_size``, ``memory_budget_bytes`` at the time.
- ``reference``: ``name``, ``voice`` (the saved voice's name, or null), ``sha256`` of the file as given,
  ``cleaned_duration_s``, ``sampling_rate``, ``cropped``,
  ``warnings``, ``text`` (the transcript given, or null); null when no reference audio was used.
- ``emotion``: the request's emotion control (IndexTTS 2), or null: ``source`` ("clip", "vector" or "text"),
  ``weight``, ``vector`` (8 values in ``tts_app.request.EMOTION_NAMES`` order) or ``text`` (null = the input text),
  ``clip_duration_s`` / ``clip_sampling_rate``.
- ``text``: ``input`` (as typed) and ``normalized`` (after the front end).
- ``segments``: per segment ``index``, ``text`` (normalised source), ``model_text`` (as the model got it),
  ``seed``, ``start_s``, ``end_s``, ``batch_size``, ``generate_s``, ``max_new_tokens`` (its cap),
  ``stop_reason`` ("end_of_speech", or "max_new_tokens" when it was cut at the cap), ``speaker`` (dialogue: the
  speaker's name, else null), ``chapter`` (0-based) and ``turns``: for a segment a family spoke from its own
  multi-speaker prompt, per turn ``speaker`` and ``text`` (``text`` is then their texts, one per line; ``speaker`` is
  null when several speak), else an empty list.
- ``speakers``: for a dialogue, per speaker its ``name`` and ``reference`` block (as ``reference``); else null.
- ``post_processing``: what was done after generation: ``speed`` (tempo factor applied, 1.0 = none),
  ``speed_source`` ("speed", "duration_s" or "none"), ``method``, ``duration_before_s``, ``duration_s``, and
  ``loudness`` (standard, ``target_lufs``, ``measured_lufs``, ``output_lufs``, ``gain_db``) or null.
- ``chapters``: per chapter ``index``, ``title``, ``start_s``, ``end_s``, ``segments`` and ``file`` (its own audio
  file next to the main one); empty for a text without chapters.
- ``audio``: ``file`` (name, next to the sidecar), ``sha256`` of its bytes, ``sampling_rate``, ``num_samples``,
  ``duration_s``, ``format`` (by the file's ending: WAV / FLAC 16-bit, MP3, Ogg Opus; ``tts_app.audio.formats``).
- ``warnings``: everything the user was told (reference, front end, engine, caller's own).
- ``departures``: how this family is run differently from its upstream tool, one sentence each with its reason
  (``tts_app.adapters.base.ModelFacts.departures``; the README's "How each model is run" table says the same).
- plus the caller's ``extra`` block (a job line adds ``job``: file, line, output name).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tts_app.audio.formats import encode_audio, format_for_path, format_label
from tts_app.audio.post import to_srt, write_atomic
from tts_app.frontend.messages import Notice, register
from tts_app.output_layout import chapter_path, metadata_path
from tts_app.request import SynthesisParams, SynthesisRequest, SynthesisResult

if TYPE_CHECKING:
    from tts_app.adapters.base import ModelFacts
    from tts_app.audio.preparer import PreparedReference
    from tts_app.runtime import Runtime

SCHEMA_VERSION = 2

#: a finished request with no audio at all (``no_audio_error``), in the user's language at every door
EN: dict[str, str] = {
    "no_audio_sampling": "The model produced no audio for this text (seed {seed}): it ended speech at once. Try "
                         "another seed",
    "no_audio_greedy": "The model produced no audio for this text: it ended speech at once. Try sampling instead "
                       "of greedy decoding",
}
ZH: dict[str, str] = {
    "no_audio_sampling": "模型没有为这段文本生成音频（种子 {seed}）：它立即结束了。请换一个种子",
    "no_audio_greedy": "模型没有为这段文本生成音频：它立即结束了。请改用采样解码",
}
register(__name__, EN, ZH)


def no_audio_error(request: SynthesisRequest, result: SynthesisResult) -> Notice | None:
    """Why a finished (DONE) request gives no clip, or None when its audio has samples.

    Every door treats a request whose every segment ended at once (the model chose its end of speech as the first
    code) as failed with this message, naming the seed to change: the page and its API raise it, ``synth`` exits 1
    without writing a file, a JSONL line is recorded as failed with it. No file of 0 samples is written anywhere.
    A trained model hardly ever does this; a checkpoint with random weights (the tiny test models) often does:
    IndexTTS 2's default beam search (3 beams, ``length_penalty`` 0) keeps the empty hypothesis whenever the stop
    code is among the first step's candidates, exactly as the package's own ``IndexTTS2.infer`` does (which then
    fails inside s2mel on the empty code sequence).
    """
    if result.audio is not None and result.audio.size:
        return None
    effective = result.effective_params
    if effective is not None and effective.greedy is not False:  # no draw to change: the seed would not help
        return Notice("no_audio_greedy")
    return Notice("no_audio_sampling", seed=request.params.seed)


@dataclass(frozen=True)
class OutputFiles:
    """Paths ``save_outputs`` wrote."""

    audio: Path
    metadata: Path
    subtitles: Path | None = None
    chapters: tuple[Path, ...] = ()


#: ``generation_sources`` value of a setting the request gave itself
SOURCE_REQUEST = "request"


def generation_settings(facts: ModelFacts, requested: SynthesisParams, effective: SynthesisParams | None
                        ) -> tuple[dict[str, Any], dict[str, str]]:
    """(every effective generation setting, where each came from) for one request on a model.

    Args:
        facts: the model's ``ModelFacts`` (``generation_defaults`` and its ``sources``).
        requested: the request's params as given (None = not given).
        effective: what ran (``SynthesisResult.effective_params``: ``requested`` resolved against the checkpoint's
            defaults); None falls back to resolving ``requested`` here.

    A knob the family does not have is null, its source says why. ``max_segment_chars`` not given is the model's
    segment length (``ModelFacts.max_segment_chars``).
    """
    defaults = facts.generation_defaults
    if effective is None:
        effective = defaults.resolve(requested)
    settings: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in ("seed", "greedy", "temperature", "top_p", "top_k", "cfg_scale", "max_new_tokens", "num_beams",
                 "length_penalty", "num_diffusion_steps", "ras_win_len", "ras_win_max_num_repeat", "use_cache", "prompt_cache",
                 "max_segment_chars",
                 "pause_between_segments_ms", "speed", "duration_s", "loudness_lufs", "chapter_pause_ms",
                 "reference_cleanup", "segment_context"):
        if name in ("ras_win_len", "ras_win_max_num_repeat"):  # not request knobs: the checkpoint's, if any
            settings[name] = getattr(defaults, name)
            sources[name] = defaults.sources.get(name, "not used by this model")
            continue
        given = getattr(requested, name)
        value = getattr(effective, name)
        if name == "max_segment_chars" and not value:  # None or 0: the model's own segment unit and limit
            value, source = facts.max_segment_chars, (
                "model default: sentences packed into one segment up to this (fits its max_new_tokens cap)"
                + (f" and {facts.max_segment_tokens} text tokens (upstream max_text_tokens_per_segment)"
                   if facts.max_segment_tokens else ""))
        elif name in ("seed", "use_cache", "pause_between_segments_ms", "chapter_pause_ms", "reference_cleanup"):
            source = SOURCE_REQUEST  # always set by the caller (dataclass defaults: seed 0, cache on, 200 ms)
        elif name in ("speed", "duration_s", "loudness_lufs"):
            source = SOURCE_REQUEST if value is not None else "not given (audio as generated)"
        elif name == "segment_context":  # what ran: False when the model or a dialogue ignored it
            source = (SOURCE_REQUEST if value else "ignored: this model has no segment context, or a dialogue"
                      if given else "off (each segment generated on its own)")
        elif value is None:
            source = defaults.sources.get(name, "not used by this model")
        elif given is not None:
            source = SOURCE_REQUEST
        else:
            source = defaults.sources.get(name, "model default")
        settings[name], sources[name] = value, source
    return settings, sources


def emotion_metadata(request: SynthesisRequest) -> dict[str, Any] | None:
    """The sidecar's ``emotion`` block (module docstring) of a request, or None without emotion control."""
    emotion = request.emotion
    if emotion is None:
        return None
    source = "clip" if emotion.reference_audio is not None else "vector" if emotion.vector is not None else "text"
    out: dict[str, Any] = {"source": source, "weight": emotion.weight}
    if source == "vector":
        out["vector"] = list(emotion.vector)
    elif source == "text":
        out["text"] = emotion.text
    else:
        out["clip_duration_s"] = round(emotion.reference_audio.duration_s, 4)
        out["clip_sampling_rate"] = emotion.reference_audio.sampling_rate
    return out


def output_metadata(runtime: Runtime, request: SynthesisRequest, result: SynthesisResult, *, entry_point: str,
                    reference: PreparedReference | None = None, warnings: list[str] | tuple[str, ...] = (),
                    extra: dict[str, Any] | None = None,
                    speaker_references: list[PreparedReference | None] | None = None) -> dict[str, Any]:
    """The sidecar dict (module docstring) for one finished request, without its ``audio`` block.

    Args:
        runtime: the ``tts_app.runtime.Runtime`` that ran it.
        request, result: the request and its DONE result.
        entry_point: "web", "synth" or "job".
        reference: the ``PreparedReference`` used, or None.
        warnings: the caller's own notices (e.g. a job line's ignored knobs), listed before the result's.
        extra: blocks added as they are (e.g. ``{"job": {...}}``).
        speaker_references: for a dialogue, each speaker's ``PreparedReference`` (``request.speakers`` order).
    """
    from tts_app import __version__

    engine = runtime.engine
    settings, sources = generation_settings(engine.facts, request.params, result.effective_params)
    stats = engine.stats()
    reference_block = None
    if reference is not None:
        reference_block = {**reference.metadata(), "text": request.reference_text}
    speakers_block = None
    if request.speakers:
        refs = list(speaker_references or [None] * len(request.speakers))
        speakers_block = [{"name": s.name, "reference": None if ref is None else {**ref.metadata(),
                                                                                    "text": s.reference_text}}
                          for s, ref in zip(request.speakers, refs)]
    all_warnings = (list(reference.warnings if reference is not None else [])
                    + [w for ref in (speaker_references or []) if ref is not None for w in ref.warnings]
                    + list(warnings) + list(result.warnings))
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "app": {"name": "tts_app", "version": __version__},
        "entry_point": entry_point,
        "created_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "request_id": result.request_id,
        "model": {**runtime.model.to_dict(), "languages": list(engine.facts.languages)},
        "generation": settings,
        "generation_sources": sources,
        "requested": dataclasses.asdict(request.params),
        "engine": {"max_batch_size": stats.max_batch_size, "memory_budget_bytes": stats.memory_budget_bytes},
        "reference": reference_block,
        "emotion": emotion_metadata(request),
        "text": {"input": request.text, "normalized": result.normalized_text},
        "segments": [{"index": s.index, "text": s.text, "model_text": s.model_text, "seed": s.seed,
                      "start_s": round(s.start_s, 4), "end_s": round(s.end_s, 4), "batch_size": s.batch_size,
                      "generate_s": round(s.generate_s, 4), "max_new_tokens": s.max_new_tokens,
                      "stop_reason": s.stop_reason.value, "speaker": s.speaker, "chapter": s.chapter,
                      "turns": [{"speaker": name, "text": text} for name, text in s.turns],
                      "retaken_seeds": list(s.retaken_seeds),
                      **({"takes": list(s.takes), "scores": s.scores, "rerolled": s.rerolled} if s.takes else {})}
                     for s in result.segments],
        "speakers": speakers_block,
        "post_processing": result.post_processing,
        "chapters": [{"index": c.index, "title": c.title, "start_s": round(c.start_s, 4), "end_s": round(c.end_s, 4),
                      "segments": list(c.segments)} for c in result.chapters],
        "warnings": list(dict.fromkeys(all_warnings)),  # in order, each once
        "departures": list(engine.facts.departures),
    }
    if extra:
        out.update(extra)
    return out


def subtitle_texts(result: SynthesisResult) -> list[str]:
    """One subtitle cue text per segment: its text, prefixed with its speaker's name in a dialogue ("Mei: 你好。");
    a segment holding several turns (``SegmentTiming.turns``) gives one line per turn, each with its speaker."""
    out = []
    for s in result.segments:
        if s.turns:
            out.append("\n".join(f"{name}: {text}" for name, text in s.turns))
        else:
            out.append(f"{s.speaker}: {s.text}" if s.speaker else s.text)
    return out


def save_outputs(audio_path: str | Path, result: SynthesisResult, metadata: dict[str, Any], *,
                 subtitles_path: str | Path | None = None) -> OutputFiles:
    """Write the result's audio (format by the file's ending: ``.wav``/``.flac`` 16-bit PCM, ``.mp3``, ``.opus``;
    see ``tts_app.audio.formats``), one file per chapter when the text has chapters, subtitles when asked, and the
    sidecar (``metadata`` plus its ``audio`` block), each atomically; the sidecar goes last, so a sidecar's audio is
    always complete.

    Args:
        audio_path: where the audio goes; the sidecar goes to ``metadata_path(audio_path)``, chapter files to
            ``chapter_path``.
        result: a DONE ``SynthesisResult``.
        metadata: from ``output_metadata``.
        subtitles_path: where SubRip subtitles (one cue per segment, dialogue lines prefixed with the speaker) go,
            or None.

    Raises:
        InputError: an unknown file ending.
        OSError: a file cannot be written (nothing half-written is left behind).
    """
    audio_path = Path(audio_path)
    fmt = format_for_path(audio_path)
    encoded = encode_audio(result.audio, result.sampling_rate, fmt)
    write_atomic(audio_path, encoded)
    chapters = []
    for chapter, block in zip(result.chapters, metadata.get("chapters") or []):
        path = chapter_path(audio_path, chapter.index, chapter.title)
        start, end = (int(round(t * result.sampling_rate)) for t in (chapter.start_s, chapter.end_s))
        write_atomic(path, encode_audio(result.audio[start:end], result.sampling_rate, fmt))
        chapters.append({**block, "file": path.name})
    subtitles = None
    if subtitles_path is not None:
        srt = to_srt(subtitle_texts(result), [(s.start_s, s.end_s) for s in result.segments])
        subtitles = write_atomic(subtitles_path, srt.encode("utf-8"))
    sidecar = {**metadata, "audio": {
        "file": audio_path.name, "sha256": hashlib.sha256(encoded).hexdigest(), "sampling_rate": result.sampling_rate,
        "num_samples": int(result.audio.size), "duration_s": round(result.duration_s, 4), "format": format_label(fmt)}}
    if chapters:
        sidecar["chapters"] = chapters
    if subtitles is not None:
        sidecar["subtitles"] = {"file": subtitles.name}
    path = write_atomic(metadata_path(audio_path),
                        (json.dumps(sidecar, ensure_ascii=False, indent=1) + "\n").encode("utf-8"))
    return OutputFiles(audio=audio_path, metadata=path, subtitles=subtitles,
                       chapters=tuple(audio_path.with_name(c["file"]) for c in chapters))
