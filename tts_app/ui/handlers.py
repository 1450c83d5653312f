"""Thin Gradio handlers: turn widget values into engine / front-end / job calls and results back into widget values.

Every handler returns the same outputs on every path. A mistake the user can fix becomes one ``gr.Error`` shown
where they acted (the event's ``show_progress_on`` box), with no traceback in the server log (``user_error``); an
unexpected exception is logged once, with its traceback, by gradio. Notices are grouped into one ``gr.Warning`` and
never repeated: a reference's warnings live in its report box, not in pop-ups. Messages name files, never server
paths, and are shown as written. Heavy work happens in the engine's worker thread; a handler only waits on a
future, so many users' requests are batched together.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from pathlib import Path
from typing import Callable

import gradio as gr
import numpy as np

from tts_app import output_layout
from tts_app.errors import TTSAppError
from tts_app.monitor import GIB, read_memory
from tts_app.request import Priority, SynthesisParams, SynthesisRequest, check_text
from tts_app.ui.context import AppContext
from tts_app.ui.texts import error_text, pick_language, preview_label, server_text

log = logging.getLogger(__name__)

MAX_SEED = 2**31 - 1
# Notices shown in one pop-up at most; the rest are counted ("and 10 more"); all are in the metadata sidecar.
MAX_NOTICES_SHOWN = 3


def user_error(message: str) -> gr.Error:
    """A mistake the user can fix: stays until closed, no traceback in the server log."""
    return gr.Error(message, duration=None, print_exception=False)


def warn_grouped(messages: list[str], lang: str) -> None:
    """One ``gr.Warning`` for many notices (in ``lang``): duplicates dropped, the first ``MAX_NOTICES_SHOWN``
    shown."""
    from tts_app.frontend.messages import localize

    unique = list(dict.fromkeys(localize(m, lang) for m in messages if m))
    if not unique:
        return
    shown = unique[:MAX_NOTICES_SHOWN]
    more = len(unique) - len(shown)
    text = "\n".join(f"• {m}" for m in shown)
    if more:
        text += "\n" + server_text(lang, "notes_more", count=more)
    gr.Warning(text)


class RunningRequests:
    """The engine requests each page session is generating, by tab (``"single"``: Generate and the history's
    Re-run; ``"dialogue"``), so that a tab's Stop button cancels its own request and nobody else's; and a request
    whose client went away (its gradio event marked dead: ``client_liveness``) is cancelled within
    ``WATCH_EVERY_S``, as the HTTP API cancels one whose connection closed, so its engine rows are freed.

    Keyed by gradio's session hash (one per page load; a ``gradio_client.Client`` has its own). Per-user state in a
    dict keyed by session, as the gradio guides advise for module-level state; entries leave when their request
    ends. Thread-safe: handlers run in gradio's worker threads; one daemon thread watches the clients."""

    #: how often the watcher looks at the running requests' clients, in s
    WATCH_EVERY_S = 0.25

    def __init__(self) -> None:
        import threading

        self._lock = threading.Lock()
        self._handles: dict[tuple[str, str], set] = {}
        self._watched: dict[object, Callable[[], bool]] = {}  # handle -> is its client still there?
        self._watcher: threading.Thread | None = None

    def add(self, session: str | None, kind: str, handle, client_alive: Callable[[], bool] | None = None) -> None:
        """Remember ``handle`` (``engine.RequestHandle``) as session ``session``'s running ``kind`` request (a
        caller with no session is not tracked: nothing could stop it but itself); with ``client_alive``, it is
        cancelled once that says the client left."""
        import threading

        with self._lock:
            if session:
                self._handles.setdefault((session, kind), set()).add(handle)
            if client_alive is not None:
                self._watched[handle] = client_alive
                if self._watcher is None or not self._watcher.is_alive():
                    self._watcher = threading.Thread(target=self._watch, name="page-client-watcher", daemon=True)
                    self._watcher.start()

    def discard(self, session: str | None, kind: str, handle) -> None:
        """``handle`` has ended."""
        with self._lock:
            self._watched.pop(handle, None)
            handles = self._handles.get((session or "", kind))
            if handles is not None:
                handles.discard(handle)
                if not handles:
                    del self._handles[(session or "", kind)]

    def is_running(self, session: str | None, kind: str) -> bool:
        """Whether session ``session`` has a ``kind`` request running now."""
        with self._lock:
            return bool(self._handles.get((session or "", kind)))

    def cancel(self, session: str | None, kind: str) -> int:
        """Cancel session ``session``'s running ``kind`` requests (their queued segments are dropped and their rows
        leave the running batch: ``RequestHandle.cancel``); returns how many were still running."""
        if not session:
            return 0
        with self._lock:
            handles = list(self._handles.pop((session, kind), ()))
        return sum(1 for handle in handles if handle.cancel())

    def _watch(self) -> None:
        while True:
            time.sleep(self.WATCH_EVERY_S)
            with self._lock:
                watched = list(self._watched.items())
                if not watched:
                    self._watcher = None
                    return
            for handle, client_alive in watched:
                if handle.done():
                    gone = True
                elif not client_alive():
                    gone = handle.cancel()
                    log.info("request %s cancelled: its page client went away", handle.request_id)
                else:
                    gone = False
                if gone:
                    with self._lock:
                        self._watched.pop(handle, None)


def client_liveness() -> Callable[[], bool] | None:
    """Inside a gradio event handler: a check "is this event's client still there?", or None outside one.

    gradio marks a queued event dead (``Event.alive = False``, ``Queue.clean_events``) when the event stream of
    its client closes (a closed tab, a ``gradio_client`` that stopped listening), but a running handler is not told
    (a generator is simply not resumed again); gradio has no public hook for it, so this finds the handler's event
    among the queue's active jobs (``gradio.context.LocalContext`` names the event) and reads its flag."""
    from gradio.context import LocalContext

    blocks = LocalContext.blocks.get(None)
    event_id = LocalContext.event_id.get(None)
    queue = getattr(blocks, "_queue", None)
    if queue is None or event_id is None:
        return None
    for job_set in list(getattr(queue, "active_jobs", ()) or ()):
        for event in list(job_set or ()):
            if getattr(event, "_id", None) == event_id:
                return lambda: bool(event.alive)
    return None


#: the page's running generations (``RunningRequests``), for the Stop buttons
RUNNING = RunningRequests()


def stop_generation(ctx: AppContext, kind: str, request: gr.Request = None) -> None:
    """Stop clicked on tab ``kind`` ("single" or "dialogue") -> this page session's request of that tab is cancelled
    (others' requests, and this session's other tab, go on); an info line says so."""
    lang = _lang(ctx, request)
    if RUNNING.cancel(getattr(request, "session_hash", None), kind):
        gr.Info(server_text(lang, "generation_stopped"))


def _check_reference_upload(ctx: AppContext, path: str | None, lang: str) -> None:
    from tts_app.ui.uploads import check_upload

    try:
        check_upload(path, ctx.upload_config.max_upload_bytes,
                     server_text(lang, "upload_too_large", name="{name}", size="{size}", limit="{limit}"))
    except TTSAppError as exc:
        raise user_error(error_text(exc, lang)) from exc


def _lang(ctx: AppContext, request: gr.Request | None) -> str:
    """The language for server-composed text: --lang, else the browser's Accept-Language."""
    headers = getattr(request, "headers", None) or {}
    return pick_language(ctx.lang, headers.get("accept-language"))


def _table(rows: list[list], lang: str, key: str):
    """A table value with localised column headers (``key`` names a "|"-separated header list). A plain
    DataFrame (not a component update), so API clients get ``{"headers": [...], "data": [...]}``."""
    import pandas as pd

    return pd.DataFrame(rows, columns=server_text(lang, key).split("|"))


def _headers(request: gr.Request | None):
    """The request's headers (its browser cookie, or API key, names its owner: ``AppContext.owner``)."""
    return getattr(request, "headers", None) or {}


def _engine(ctx: AppContext):
    if ctx.engine is None:
        raise user_error(ctx.load_error or "no model is loaded; start the app with --model DIR")
    return ctx.engine


def _prepare_reference(ctx: AppContext, audio_path: str, reference_text: str | None, cleanup: str | None = None):
    """``PreparedReference`` for an uploaded/recorded file, through the runtime's reference preparer (the one the
    CLI and jobs use: the model's rate, one config, one cache), with the page's ``reference_cleanup`` (None = the
    default). Raises ``ReferenceAudioError`` for an unusable clip, ``InputError`` for an unknown cleanup."""
    return ctx.references.prepare(audio_path, reference_text=reference_text or None, name=Path(audio_path).name,
                                  cleanup=cleanup or None)


def _need_reference_text(ctx: AppContext, lang: str) -> str:
    """"Upload a clip", and when the library has bundled example voices, "... or pick one of them: NAMES"."""
    library = getattr(ctx, "voices", None)
    examples = [v.name for v in library.list() if v.bundled] if library is not None else []
    if not examples:
        return server_text(lang, "need_reference")
    return server_text(lang, "need_reference_or_example", examples=", ".join(examples))


def _reference(ctx: AppContext, audio_path: str | None, reference_text: str | None, lang: str = "en",
               cleanup: str | None = None):
    """``_prepare_reference`` for synthesis: a missing or unusable clip stops the event with ``gr.Error``."""
    if not audio_path:
        raise user_error(_need_reference_text(ctx, lang))
    _check_reference_upload(ctx, audio_path, lang)
    try:
        return _prepare_reference(ctx, audio_path, reference_text, cleanup)
    except TTSAppError as exc:
        raise user_error(error_text(exc, lang)) from exc


REPORT_FIELDS = (  # (report key, unit) shown in the UI; the CLI's --json has everything
    ("format", ""), ("sampling_rate", "Hz"), ("channels", ""), ("duration_s", "s"), ("speech_start_s", "s"),
    ("speech_end_s", "s"), ("speech_s", "s"), ("speech_kept_s", "s"), ("snr_db", "dB"), ("clipping_share", "%"),
    ("speech_level_dbfs", "dBFS"), ("bandwidth_hz", "Hz"), ("cropped", ""),
)


def _report_markdown(report: dict, lang: str) -> str:
    cells = []
    for key, unit in REPORT_FIELDS:
        value = report.get(key)
        if value is None:
            continue
        if isinstance(value, bool):
            value = server_text(lang, "yes" if value else "no")
        elif unit == "%":  # a share, rounded as the warning about it rounds it ("clipped (0.1% of samples ...)")
            value, unit = f"{value:.1%}", ""
        elif isinstance(value, float):
            value = f"{value:.0f}" if unit == "Hz" else f"{value:.2f}"
        cells.append(f"{server_text(lang, key)}: **{value}**{' ' + unit if unit else ''}")
    lines = [" · ".join(cells)]
    if report.get("cleanup"):
        changes = report.get("changes") or []
        key = "reference_changes" if changes else "reference_unchanged"
        lines.append(f"- {server_text(lang, key, cleanup=report['cleanup'])}"
                     + (": " + "; ".join(changes) if changes else ""))
    lines += [f"- ⚠ {w}" for w in report.get("warnings", [])]
    lines += [f"- ✖ {e}" for e in report.get("errors", [])]
    if not report.get("warnings") and not report.get("errors"):
        lines.append(f"- {server_text(lang, 'no_problems')}")
    return "\n".join(lines)


def reference_report(ctx: AppContext, reference_audio: str | None, reference_text: str | None = None,
                     reference_cleanup: str | None = None, request: gr.Request = None):
    """Reference uploaded -> (cleaned clip for listening, quality report markdown).

    A refused clip does not raise, and warnings make no pop-ups: the report box, right under the upload, shows the
    reason or the warnings once (a pop-up would vanish, and Generate would repeat it)."""
    from tts_app.errors import ReferenceAudioError

    lang = _lang(ctx, request)
    if not reference_audio:
        return None, ""
    try:
        _check_reference_upload(ctx, reference_audio, lang)
        prepared = _prepare_reference(ctx, reference_audio, reference_text, reference_cleanup)
    except gr.Error as exc:
        return None, f"**✖ {server_text(lang, 'reference_refused')}:** {exc.message}"
    except TTSAppError as exc:
        partial = exc.report if isinstance(exc, ReferenceAudioError) else None
        if partial is not None and partial.errors:  # the report lists the reason itself
            return None, f"**✖ {server_text(lang, 'reference_refused')}**\n\n" + _report_markdown(
                partial.to_dict(lang), lang)
        return None, f"**✖ {server_text(lang, 'reference_refused')}:** {error_text(exc, lang)}"
    # The cleaned clip as a 16-bit WAV file in this browser's own folder (one per distinct clip and model rate): the
    # player gets exactly these samples (a numpy array would be peak-normalised and converted by gradio on every
    # upload), and no other browser can fetch it.
    clean_path = ctx.reference_clip(prepared, _headers(request))
    return str(clean_path), _report_markdown(prepared.report.to_dict(lang), lang)


def pronunciation_preview(ctx: AppContext, text: str, request: gr.Request = None):
    """Text typed -> (highlighted spans: overrides / polyphones labelled with their reading, warnings markdown).

    Highlighted: overrides, and polyphones whose reading is a guess in this context (``CharReading.ambiguous``: read
    by a grammar rule or on its own, not by a dictionary word). Readings are shown in the notation the user typed
    (tone marks stay tone marks). Plain characters are grouped into runs, so English words are never broken apart.
    On a model that reads phoneme-in text (GLM-TTS) a text with overrides also gets, in the notes, what the model
    receives (``model_input_preview``)."""
    from tts_app.frontend import preview_pronunciation
    from tts_app.frontend.g2p import display_reading
    from tts_app.frontend.messages import localize

    lang = _lang(ctx, request)
    if not text or not text.strip():
        return [], ""
    try:
        check_text(text)  # before the front end reads it
    except TTSAppError as exc:
        return [], error_text(exc, lang)
    preview = preview_pronunciation(text)
    by_pos = {r.position: r for r in preview.readings}
    spans: list[tuple[str, str | None]] = []
    plain = ""
    for i, ch in enumerate(preview.text):
        r = by_pos.get(i)
        label = None
        if r is not None and r.source == "override":
            label = preview_label(lang, "override")
        elif r is not None and r.ambiguous:
            label = preview_label(lang, "polyphone")
        if label is None:
            plain += ch
            continue
        if plain:
            spans.append((plain, None))
            plain = ""
        spans.append((f"{ch}({r.written or display_reading(r.pinyin, preview.notation)})", label))
    if plain:
        spans.append((plain, None))
    warnings = "\n".join(f"- ⚠ {localize(w, lang)}" for w in preview.warnings)
    model_input = model_input_preview(ctx, text) if any(r.source == "override" for r in preview.readings) else []
    if model_input:  # after the warnings, in the same notes box
        lines = "\n".join(f"- `{line}`" for line in model_input)
        name = ctx.engine.adapter.display_name
        warnings = "\n\n".join(filter(None, [warnings, server_text(lang, "preview_model_input", name=name)
                                               + "\n" + lines]))
    return spans, warnings


def model_input_preview(ctx: AppContext, text: str) -> list[str]:
    """For a model that reads phoneme-in text (``ModelFacts.supports_phoneme_in``: GLM-TTS), each segment's text as
    its language model receives it: the front end's rendering (``prepare_text`` with the model's own settings, as
    the engine's input stage runs it) through the adapter's own ``model_text`` (``重(zhòng)要`` ->
    ``<|ZH|><|ONG4|>要``), the same call that builds its prompt. Empty for any other model, no model, or a text
    the front end refuses (the preview's warnings say why)."""
    from tts_app.frontend import prepare_text

    engine = ctx.engine
    if engine is None or not engine.facts.supports_phoneme_in:
        return []
    facts = engine.facts
    try:
        prepared = prepare_text(text, supports_pinyin=facts.supports_pinyin, max_segment_chars=facts.max_segment_chars,
                                control_tags=facts.control_tags,
                                unencodable_characters=engine.adapter.unencodable_characters)
    except TTSAppError:
        return []
    return [engine.adapter.model_text(segment.text) for segment in prepared.segments]


# Streamed playback: the first audio goes out as soon as it is decoded; later pieces are grouped to at least this
# many seconds, so the browser's player gets a few segments per second instead of one per decode step (a VibeVoice
# frame is 0.13 s).
STREAM_GROUP_S = 0.5
STREAM_POLL_S = 0.25


def segment_quality(segment, lang: str) -> str:
    """A segment's quality cell (the take policy's kept scores, ``SegmentTiming.scores``): "" without a take policy
    (the same words as the Batch tab's column, ``tts_app.ui.batch.quality_text``)."""
    if segment.scores is None:
        return ""
    from tts_app.ui.batch import quality_text

    return quality_text({"scores": [segment.scores], "rerolled": segment.rerolled}, lang)


def _start_synthesis(ctx: AppContext, lang: str, reference_audio, text, reference_text, seed, randomize_seed,
                     greedy, temperature, top_p, top_k, cfg_scale, max_new_tokens, max_segment_chars, pause_ms,
                     use_cache, emotion_mode, emotion_audio, emotion_vector, emotion_weight, emotion_text, voice,
                     speed, duration_s, loudness_lufs, segment_durations_s=None, reference_cleanup=None,
                     num_beams=None, length_penalty=None, segment_context=None, take_check=None,
                     num_diffusion_steps=None, prompt_cache=None):
    """Validate the widgets' values -> (prepared reference, ``SynthesisRequest``). Raises ``gr.Error`` for a missing
    model, text or usable reference (uploaded or a saved ``voice``), or a bad setting or emotion."""
    from tts_app.ui.controls import params_from_controls

    engine = _engine(ctx)
    if not text or not text.strip():
        raise user_error(server_text(lang, "need_text"))
    try:
        check_text(text)  # before any work (reference clean-up included)
    except TTSAppError as exc:
        raise user_error(error_text(exc, lang)) from exc
    seed = random.randint(0, MAX_SEED) if randomize_seed else int(seed or 0)
    if voice:
        try:
            reference, voice_text = ctx.voices.prepare_source(voice, ctx.references)
        except TTSAppError as exc:
            raise user_error(error_text(exc, lang)) from exc
        reference_text = reference_text or voice_text
        warn_grouped(list(reference.warnings), lang)  # a saved voice has no report box of its own
    else:
        reference = _reference(ctx, reference_audio, reference_text, lang,  # its warnings are in the report box
                               reference_cleanup)
        reference_text = reference.text  # shortened to the kept sentences, or None, when the clip was cropped
    try:
        params = params_from_controls(engine.facts, seed=seed, use_cache=bool(use_cache),
                                      values={"greedy": greedy, "temperature": temperature, "top_p": top_p,
                                              "top_k": top_k,
                                              "cfg_scale": cfg_scale, "max_new_tokens": max_new_tokens,
                                              "max_segment_chars": max_segment_chars,
                                              "pause_between_segments_ms": pause_ms, "num_beams": num_beams,
                                              "length_penalty": length_penalty,
                                              "num_diffusion_steps": num_diffusion_steps,
                                              "prompt_cache": prompt_cache})
    except TTSAppError as exc:
        raise user_error(error_text(exc, lang)) from exc
    params = tempo_params(params, speed, duration_s, loudness_lufs, segment_durations_s, lang)
    if voice:  # the sidecar's reference_cleanup says what ran: the saved voice's own
        params = dataclasses.replace(params, reference_cleanup=reference.report.cleanup)
    elif reference_cleanup:
        params = dataclasses.replace(params, reference_cleanup=reference_cleanup)
    params = dataclasses.replace(params, segment_context=bool(segment_context))
    if take_check:
        try:
            params = dataclasses.replace(params, take_check=take_check)
        except TTSAppError as exc:
            raise user_error(error_text(exc, lang)) from exc
    reference_text = _fill_transcript(ctx, reference, reference_text, lang)
    emotion = _emotion(ctx, lang, emotion_mode, emotion_audio, emotion_vector, emotion_weight, emotion_text)
    synthesis_request = SynthesisRequest(text=text, reference_audio=reference.audio,
                                         reference_text=reference_text, params=params,
                                         priority=Priority.INTERACTIVE, emotion=emotion)
    return reference, synthesis_request


def synthesize(ctx: AppContext, reference_audio: str | None, text: str, reference_text: str | None = None,
               seed: int | None = 0, randomize_seed: bool = False, greedy: bool | None = None,
               temperature: float | None = None, top_p: float | None = None, top_k: int | None = None,
               cfg_scale: float | None = None, max_new_tokens: int | None = None,
               max_segment_chars: int | None = None, pause_ms: int | None = None, use_cache: bool = True,
               emotion_mode: str | None = "none",
               emotion_audio: str | None = None, happy: float | None = 0.0, angry: float | None = 0.0,
               sad: float | None = 0.0, afraid: float | None = 0.0, disgusted: float | None = 0.0,
               melancholic: float | None = 0.0, surprised: float | None = 0.0, calm: float | None = 0.0,
               emotion_weight: float | None = 1.0, emotion_text: str | None = None, voice: str | None = None,
               speed: float | None = None, duration_s: float | None = None, loudness_lufs: float | None = None,
               audio_format: str | None = "wav", segment_durations_s: str | None = None,
               reference_cleanup: str | None = None, num_beams: int | None = None,
               length_penalty: float | None = None, segment_context: bool | None = None,
               take_check: str | None = None, num_diffusion_steps: int | None = None,
               prompt_cache: bool | None = None, request: gr.Request = None, progress=gr.Progress()):
    """Generate speech in the reference voice -> (audio, subtitles, metadata, segments, seed used).

    ``speed`` (1 = as generated), ``duration_s`` (0 = as generated), ``loudness_lufs`` (0 = not normalised) and
    ``audio_format`` ("wav", "flac", "mp3", "opus") shape the output; ``segment_durations_s`` ("2.5, 1.8, 3": a
    target length in seconds per line of the text, for dubbing; empty = off; not with speed / duration) gives each
    line its own length. ``voice`` names a saved voice of the library
    (then ``reference_audio`` is ignored and, when ``reference_text`` is empty, the voice's own transcript is used).
    Only ``reference_audio`` (or ``voice``) and ``text`` are needed; every other input left out (or equal to the
    model's default) means "the model's default", as in ``synth`` and JSONL jobs. The batch ceiling is the server's
    (``--max-batch-size``), never a per-request input. Emotion (models with emotion control, IndexTTS 2;
    ``tts_app.ui.emotion``): ``emotion_mode`` "none" (the voice reference's own), "clip" (``emotion_audio``),
    "vector" (the eight weights ``happy`` ... ``calm``, each in [0, 1]) or "text" (``emotion_text``, empty = the
    text to speak), with ``emotion_weight`` in [0, 1]. ``reference_cleanup`` ("auto", "full", "off"; None = the
    default "auto") is what is done to the uploaded reference clip (``tts_app.config.REFERENCE_CLEANUPS``; a saved
    ``voice`` is cleaned as it was saved). ``num_beams`` (1..8) and ``length_penalty``: beam search, for a model
    that has it (IndexTTS 2: 3 beams sampled, penalty 0; refused with a message when out of range, ignored by
    other models). ``segment_context``: each segment hears the earlier ones as context (CSM, Higgs Audio v2; GLM-TTS: its prompt cache; other
    models ignore it with a warning; ``SynthesisParams.segment_context``). ``take_check`` ("off", "score",
    "reroll"; None = off): the take policy (``tts_app.quality.policy``); each segment's scores show in the segments
    table.
    ``num_diffusion_steps`` (1..100): Euler steps of a flow-matching stage (IndexTTS 2's s2mel: 25; 12 = the fast
    preset; ignored by other models). ``prompt_cache``: the long-text prompt cache, for a model that has one
    (GLM-TTS: upstream's ``--use_cache``, on by default; earlier segments join the next segment's prompt;
    ``SynthesisParams.prompt_cache``); None = the model's default; ignored by other models. Not the KV cache
    (``use_cache``).

    Returns:
        audio: the audio file (WAV: 16-bit PCM; the player plays these samples as they are); subtitles: SubRip
        file; metadata: the sidecar JSON (``tts_app.outputs``); segments: per-segment table; seed: the seed used.

    Errors stay on screen until closed and name the request id (the engine logged the failure's traceback once
    under it) and the seed used, so a failure can be reported and a failed random seed avoided."""
    lang = _lang(ctx, request)
    reference, synthesis_request = _start_synthesis(
        ctx, lang, reference_audio, text, reference_text, seed, randomize_seed, greedy, temperature, top_p, top_k,
        cfg_scale, max_new_tokens, max_segment_chars, pause_ms, use_cache, emotion_mode, emotion_audio,
        [happy, angry, sad, afraid, disgusted, melancholic, surprised, calm], emotion_weight, emotion_text, voice,
        speed, duration_s, loudness_lufs, segment_durations_s, reference_cleanup, num_beams, length_penalty,
        segment_context, take_check, num_diffusion_steps, prompt_cache)
    return run_web_request(ctx, synthesis_request, lang, progress, reference=reference, audio_format=audio_format,
                           request=request)


def check_text_given(ctx: AppContext, text: str | None, request: gr.Request = None) -> None:
    """Generate's first step, before ``synthesize_stream`` (the page only; it has no outputs): an empty text (or
    only spaces) is refused here, as a pop-up in the page's language. Raised by the generation itself, the refusal
    would also mark the Output player with gradio's red "Error" badge next to the previous result's files; this
    step has no output to mark. API calls get the same refusal from ``synthesize`` / ``synthesize_stream``."""
    if not (text or "").strip():
        raise user_error(server_text(_lang(ctx, request), "need_text"))  # the generation's own words for it


def synthesize_stream(ctx: AppContext, reference_audio: str | None, text: str, reference_text: str | None = None,
                      seed: int | None = 0, randomize_seed: bool = False, greedy: bool | None = None,
                      temperature: float | None = None, top_p: float | None = None, top_k: int | None = None,
                      cfg_scale: float | None = None, max_new_tokens: int | None = None,
                      max_segment_chars: int | None = None, pause_ms: int | None = None, use_cache: bool = True,
                      emotion_mode: str | None = "none",
                      emotion_audio: str | None = None, happy: float | None = 0.0, angry: float | None = 0.0,
                      sad: float | None = 0.0, afraid: float | None = 0.0, disgusted: float | None = 0.0,
                      melancholic: float | None = 0.0, surprised: float | None = 0.0, calm: float | None = 0.0,
                      emotion_weight: float | None = 1.0, emotion_text: str | None = None, voice: str | None = None,
                      speed: float | None = None, duration_s: float | None = None,
                      loudness_lufs: float | None = None, audio_format: str | None = "wav",
                      segment_durations_s: str | None = None, reference_cleanup: str | None = None,
                      num_beams: int | None = None, length_penalty: float | None = None,
                      segment_context: bool | None = None, take_check: str | None = None,
                      num_diffusion_steps: int | None = None, prompt_cache: bool | None = None,
                      request: gr.Request = None, progress=gr.Progress()):
    """``synthesize`` that plays while it generates: yields (live audio piece, then skip) while the engine decodes
    (16-bit WAV bytes of the next samples, in order; the first as soon as any audio exists), then (skip, audio,
    subtitles, metadata, segments, seed used) as ``synthesize`` returns them. The pieces together are the same
    samples as the final WAV (``Engine.submit(stream=True)``). A request whose settings need the whole clip (speed,
    a target duration, loudness: ``SynthesisParams.needs_whole_clip``) does not stream: an info line says so and
    its one piece is the final audio, once done."""
    import queue

    from tts_app.audio.post import encode_wav

    lang = _lang(ctx, request)
    reference, synthesis_request = _start_synthesis(
        ctx, lang, reference_audio, text, reference_text, seed, randomize_seed, greedy, temperature, top_p, top_k,
        cfg_scale, max_new_tokens, max_segment_chars, pause_ms, use_cache, emotion_mode, emotion_audio,
        [happy, angry, sad, afraid, disgusted, melancholic, surprised, calm], emotion_weight, emotion_text, voice,
        speed, duration_s, loudness_lufs, segment_durations_s, reference_cleanup, num_beams, length_penalty,
        segment_context, take_check, num_diffusion_steps, prompt_cache)
    if synthesis_request.params.needs_whole_clip:
        gr.Info(server_text(lang, "stream_off_whole_clip"))
    engine = _engine(ctx)
    state = {"done": 0, "total": 1}

    def on_progress(event):  # engine worker thread: only store numbers
        state["done"], state["total"] = event.segments_done, event.segments_total

    started = time.perf_counter()
    first_audio_s = None
    handle = engine.submit(synthesis_request, on_progress=on_progress, stream=True)
    session = getattr(request, "session_hash", None)
    # the tab's Stop button cancels it (``stop_generation``), and so does its client leaving (gradio then never
    # resumes this generator, so its ``finally`` cannot)
    RUNNING.add(session, "single", handle, client_liveness())
    rate = engine.sampling_rate
    skip = [gr.skip()] * 5
    pieces: list = []
    held = 0
    sent_any = False
    progress(0.0, desc=server_text(lang, "queued"))
    try:
        while True:
            try:
                for chunk in handle.stream(timeout=STREAM_POLL_S):
                    pieces.append(chunk.samples)
                    held += chunk.samples.size
                    if first_audio_s is None:
                        first_audio_s = time.perf_counter() - started
                    if not sent_any or held >= STREAM_GROUP_S * rate:
                        yield (encode_wav(np.concatenate(pieces), rate), *skip)
                        pieces, held, sent_any = [], 0, True
                break  # the request ended
            except queue.Empty:
                if pieces:
                    yield (encode_wav(np.concatenate(pieces), rate), *skip)
                    pieces, held, sent_any = [], 0, True
                progress(state["done"] / max(state["total"], 1),
                         desc=server_text(lang, "segment_progress", done=state["done"], total=state["total"]))
        if pieces:
            yield (encode_wav(np.concatenate(pieces), rate), *skip)
    finally:
        RUNNING.discard(session, "single", handle)
        if not handle.done():  # the browser went away (generator closed): free the engine's rows
            handle.cancel()
    result = handle.result()
    _observe(result, wall_s=time.perf_counter() - started, first_audio_s=first_audio_s)
    yield (gr.skip(), *_finish_synthesis(ctx, lang, synthesis_request, result, reference=reference,
                                         audio_format=audio_format, request=request))


def chapter_files(ctx: AppContext, metadata: str | None, request: gr.Request = None):
    """A generation finished -> its per-chapter audio files (a text with ``#`` headings: ``# 第一章``; the sidecar's
    ``chapters[].file``) for the page's chapter box, shown only when there are some. The sidecar must lie in this
    browser's own folder (a path sent by a page is never trusted further)."""
    import json
    import os

    shown = []
    if metadata:
        mine = Path(os.path.realpath(ctx.browser_dir(_headers(request))))
        sidecar = Path(os.path.realpath(metadata))
        if mine in sidecar.parents and sidecar.is_file():
            try:
                chapters = json.loads(sidecar.read_text(encoding="utf-8")).get("chapters") or []
            except (OSError, ValueError):
                chapters = []
            names = [Path(str(c.get("file"))).name for c in chapters if isinstance(c, dict) and c.get("file")]
            shown = [str(sidecar.with_name(n)) for n in names if sidecar.with_name(n).is_file()]
    return gr.update(value=shown or None, visible=bool(shown))


def _fill_transcript(ctx: AppContext, prepared, reference_text: str | None, lang: str = "en") -> str | None:
    """``reference_text``, or the ASR transcript of the cleaned clip when there is none and the family needs one
    (``tts_app.audio.transcribe.fill_transcript``); what happened is shown as a warning, in ``lang``."""
    from tts_app.audio.transcribe import fill_transcript
    from tts_app.frontend.messages import localize

    text, notes = fill_transcript(ctx.transcriber, prepared, reference_text,
                                  needs_reference_text=_engine(ctx).facts.needs_reference_text)
    for note in notes:
        gr.Warning(localize(note, lang))
    return text


#: output formats the page offers
from tts_app.audio.formats import AUDIO_FORMATS  # noqa: E402 - re-exported for the layout


def segment_durations_from_text(text: str | None, lang: str) -> tuple[float, ...] | None:
    """The page's per-line durations box -> seconds per line of the text (None when empty). Commas (``,`` or the
    Chinese ``，``), semicolons or spaces separate the numbers.

    Raises:
        gr.Error: something that is not a list of numbers above 0 (``bad_segment_durations``, in ``lang``).
    """
    import math
    import re

    if not text or not text.strip():
        return None
    parts = [p for p in re.split(r"[,，;；\s]+", text.strip()) if p]
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        values = ()
    if not values or not all(math.isfinite(v) and v > 0 for v in values):
        raise user_error(server_text(lang, "bad_segment_durations", value=text.strip()))
    return values


def tempo_params(params, speed: float | None, duration_s: float | None, loudness_lufs: float | None,
                 segment_durations_s: str | None = None, lang: str = "en"):
    """``params`` with the page's speed / duration / loudness / per-line durations: speed 1, duration 0, loudness 0
    and an empty per-line box mean "off"; per-line durations with a speed or duration is refused in ``lang``."""
    import dataclasses

    from tts_app.config import ConfigError

    values = {"speed": None if not speed or float(speed) == 1.0 else float(speed),
              "duration_s": float(duration_s) if duration_s else None,
              "loudness_lufs": float(loudness_lufs) if loudness_lufs else None}
    if values["duration_s"] is not None:
        values["speed"] = None  # a target duration sets the tempo itself
    per_line = segment_durations_from_text(segment_durations_s, lang)
    if per_line is not None:
        if values["speed"] is not None or values["duration_s"] is not None:
            raise user_error(server_text(lang, "segment_durations_and_tempo"))
        values["segment_durations_s"] = per_line
    try:
        return dataclasses.replace(params, **values)
    except ConfigError as exc:
        raise user_error(error_text(exc, lang)) from exc


def run_web_request(ctx: AppContext, synthesis_request: SynthesisRequest, lang: str, progress, *, reference=None,
                    speaker_references=None, audio_format: str | None = "wav", request: gr.Request | None = None,
                    kind: str = "single"):
    """Submit, wait with progress, save audio (in ``audio_format``) + SRT + sidecar named after the text's first
    words -> (audio, subtitles, metadata, segments table, seed used), in the browser session's folder inside the
    browser's own one (``request``'s session and cookie; served to that browser only, removed when the session
    ends). Shared by the single and dialogue handlers; while it runs, tab ``kind``'s Stop button of the same page
    session cancels it (``stop_generation``; then ``gr.Error`` "stopped")."""
    engine = _engine(ctx)
    state = {"done": 0, "total": 1}

    def on_progress(event):  # engine worker thread: only store numbers
        state["done"], state["total"] = event.segments_done, event.segments_total

    started = time.perf_counter()
    handle = engine.submit(synthesis_request, on_progress=on_progress)
    session = getattr(request, "session_hash", None)
    RUNNING.add(session, kind, handle, client_liveness())  # its tab's Stop button cancels it, so does leaving
    try:
        progress(0.0, desc=server_text(lang, "queued"))
        while True:
            try:
                result = handle.result(timeout=0.25)
                break
            except TimeoutError:
                progress(state["done"] / max(state["total"], 1),
                         desc=server_text(lang, "segment_progress", done=state["done"], total=state["total"]))
    finally:
        RUNNING.discard(session, kind, handle)
    wall_s = time.perf_counter() - started
    _observe(result, wall_s=wall_s, first_audio_s=wall_s)  # the whole clip is the first audio the page gets
    return _finish_synthesis(ctx, lang, synthesis_request, result, reference=reference,
                             speaker_references=speaker_references, audio_format=audio_format, request=request)


def _observe(result, *, wall_s: float, first_audio_s: float | None) -> None:
    """A page request's real-time factor and time to first audio, for ``/metrics`` (``entry_point="web"``); a
    failed, stopped or silent request records nothing."""
    from tts_app import metrics

    if result.ok and result.audio.size:
        metrics.observe_synthesis("web", wall_s=wall_s, audio_s=result.duration_s, first_audio_s=first_audio_s)


def _finish_synthesis(ctx: AppContext, lang: str, synthesis_request: SynthesisRequest, result, *, reference=None,
                      speaker_references=None, audio_format: str | None = "wav", request: gr.Request | None = None):
    """A finished request -> (audio path, SRT path, metadata path, segment table, seed), written atomically; a
    failed request raises ``gr.Error`` with its ``finish`` in the page's language (a bug: naming the request id and
    seed), a silent one naming the seed."""
    from tts_app.longform import name_from_text
    from tts_app.outputs import no_audio_error, output_metadata, save_outputs

    seed = synthesis_request.params.seed
    fmt = audio_format if audio_format in AUDIO_FORMATS else "wav"
    from tts_app.finish import FinishReason

    finish = result.finish  # the reason decides the pop-up; its message renders in the page's language
    if finish.reason is FinishReason.CANCELLED:
        raise gr.Error(server_text(lang, "generation_stopped"), print_exception=False)
    if finish.reason is FinishReason.ERROR:  # a bug: the request id finds its traceback in the server log
        from tts_app.frontend.messages import localize

        raise user_error(server_text(lang, "synthesis_failed", request_id=result.request_id, seed=seed,
                                     error=localize(finish.message, lang)))
    if not result.ok:  # the user's input, too large, out of memory, shut down: what happened and the fix
        raise user_error(finish.render(lang))
    no_audio = no_audio_error(synthesis_request, result)
    if no_audio is not None:
        raise user_error(no_audio.render(lang))
    from tts_app.frontend.messages import localize

    # notices already shown with the references (report box, or one grouped warning for a saved voice) are not
    # repeated; front-end notices in the user's language, grouped into one pop-up
    references = [r for r in [reference, *(speaker_references or [])] if r is not None]
    reference_notes = {w for r in references for w in r.warnings}
    warn_grouped([localize(w, lang) for w in result.warnings if w not in reference_notes], lang)
    out_dir = ctx.session_dir(getattr(request, "session_hash", None), _headers(request))
    words = name_from_text(synthesis_request.turns[0].text if synthesis_request.turns else synthesis_request.text)
    stem = f"{time.strftime('%Y%m%d-%H%M%S')}_{words}_{result.request_id[:6]}"
    metadata = output_metadata(ctx.runtime, synthesis_request, result, entry_point="web", reference=reference,
                               speaker_references=speaker_references)
    audio_path = out_dir / f"{stem}.{fmt}"
    files = save_outputs(audio_path, result, metadata, subtitles_path=output_layout.subtitles_path(audio_path))
    # a segment holding several turns (a family's own dialogue prompt) shows each turn with its speaker
    rows = [[s.index + 1, s.speaker or " / ".join(dict.fromkeys(name for name, _ in s.turns)),
             "\n".join(f"{name}: {t}" for name, t in s.turns) if s.turns else s.text,
             round(s.start_s, 2), round(s.end_s, 2), s.batch_size, round(s.generate_s, 2),
             segment_quality(s, lang)] for s in result.segments]
    return str(files.audio), str(files.subtitles), str(files.metadata), _table(rows, lang, "col_timings"), seed



def _emotion(ctx: AppContext, lang: str, mode, clip_path, vector, weight, text):
    """The request's ``EmotionControl`` from the emotion widgets (None: the voice reference's own); a bad value or
    clip (unusable, or over the upload limit) stops the event with one ``user_error`` naming it."""
    from tts_app.ui.emotion import emotion_from_controls

    def prepare_clip(path: str):
        _check_reference_upload(ctx, path, lang)
        return _prepare_reference(ctx, path, None).audio

    try:
        return emotion_from_controls(ctx.engine.facts, mode=mode, clip_path=clip_path, vector=vector, weight=weight,
                                     text=text, prepare_clip=prepare_clip)
    except TTSAppError as exc:
        raise user_error(error_text(exc, lang)) from exc


def worker_lines(pool, lang: str) -> list[str]:
    """Markdown lines for the Memory tab about the Ray workers of ``app.py --ray`` (``WorkerPool``): each one's
    state, node, device, lines done / in flight, engine batch cap and OOM count, and its device memory."""
    from tts_app.frontend.messages import localize

    workers = pool.stats(timeout_s=1.0, max_age_s=2.0)
    up = sum(1 for w in workers if w.state == "up")
    lines = ["", server_text(lang, "workers_title", up=up, total=len(workers))]
    for w in workers:
        where = f"{w.info.device or '?'} · {w.info.node_ip} · pid {w.info.pid}"
        text = server_text(lang, "worker_row", n=w.info.index + 1, state=server_text(lang, f"worker_{w.state}"),
                           where=where, done=w.lines_done, flight=w.lines_in_flight)
        if w.memory is not None:
            text += " · " + server_text(lang, "worker_memory", used=f"{w.memory.used_bytes / GIB:.2f}",
                                        total=f"{w.memory.total_bytes / GIB:.2f}",
                                        own=f"{w.memory.torch_allocated_bytes / GIB:.3f}")
        if w.engine is not None:
            text += " · " + server_text(lang, "worker_engine", cap=w.engine.batch_cap, max=w.engine.max_batch_size,
                                        oom=w.engine.num_oom)
        if w.error:
            text += f" · {localize(w.error, lang)}"
        lines.append("- " + text)
    return lines


def gauge(ctx: AppContext, request: gr.Request = None):
    """Timer tick -> (summary markdown, plot rows). Only reads: the app's one memory sampler
    (``AppContext.memory_sampler``) records the readings and OOM events, however many pages poll."""
    import pandas as pd

    lang = _lang(ctx, request)
    stats = ctx.engine.stats() if ctx.engine is not None else None
    sampler = ctx.memory_sampler()
    reading = sampler.latest
    if reading is None:  # the sampler's first reading is still being taken: show one, record nothing
        reading = read_memory(stats.device if stats is not None else "cpu")
    gib = lambda n: f"{n / GIB:.3f}"  # noqa: E731 - MiB resolution, so the gauge visibly moves
    what = server_text(lang, "cpu_memory" if reading.is_cpu else "gpu_memory")
    lines = [f"**{reading.device_name}** ({reading.device}) — {what}",
             "- " + server_text(lang, "mem_totals", total=f"{reading.total_bytes / GIB:.2f}",
                                used=gib(reading.used_bytes), free=gib(reading.free_bytes))]
    if reading.is_cpu:
        lines.append("- " + server_text(lang, "mem_cpu_process", rss=gib(reading.torch_allocated_bytes),
                                        peak=gib(reading.torch_peak_bytes)))
    else:
        lines.append("- " + server_text(lang, "mem_torch", alloc=gib(reading.torch_allocated_bytes),
                                        reserved=gib(reading.torch_reserved_bytes),
                                        peak=gib(reading.torch_peak_bytes)))
    if reading.utilization_percent is not None:
        lines.append("- " + server_text(lang, "mem_util", util=f"{reading.utilization_percent:.0f}"))
    if stats is not None:
        budget = (server_text(lang, "unlimited") if stats.memory_budget_bytes is None
                  else f"{stats.memory_budget_bytes / GIB:.2f} GiB")
        lines.append("- " + server_text(lang, "mem_engine", budget=budget, cap=stats.batch_cap,
                                        max=stats.max_batch_size, oom=stats.num_oom, queue=stats.queue_depth))
        lines.append("- " + server_text(lang, "mem_row", mib=f"{stats.default_row_bytes / 1024**2:.1f}"))
        ooms = ctx.history.oom_times()
        if ooms:
            lines.append("- " + server_text(lang, "mem_oom", count=len(ooms),
                                            ago=f"{reading.time_s - ooms[-1]:.0f}"))
    else:
        lines.append("- " + server_text(lang, "no_model", error=ctx.load_error))
    if ctx.pool is not None:
        lines += worker_lines(ctx.pool, lang)
    frame = pd.DataFrame(ctx.history.rows() or [{"seconds_ago": 0.0, "used_gib": 0.0, "torch_gib": 0.0,
                                                  "event": "ok"}])
    # the columns keep their names (the plot is built on them); the axes, the legend's title and its "ok" are in the
    # page's language ("OOM" is the term in both)
    frame["event"] = frame["event"].replace({"ok": server_text(lang, "legend_ok")})
    return "\n".join(lines), gr.update(value=frame, x_title=server_text(lang, "axis_seconds_ago"),
                                        y_title=server_text(lang, "axis_used_gib"),
                                        color_title=server_text(lang, "legend_event"))


def synthesize_dialogue(ctx: AppContext, script: str, voice_1: str | None = None, voice_2: str | None = None,
                        voice_3: str | None = None, voice_4: str | None = None, audio_1: str | None = None,
                        audio_2: str | None = None, audio_3: str | None = None, audio_4: str | None = None,
                        seed: int | None = 0, speed: float | None = None, duration_s: float | None = None,
                        loudness_lufs: float | None = None, audio_format: str | None = "wav",
                        reference_cleanup: str | None = None, request: gr.Request = None, progress=gr.Progress()):
    """A dialogue script (``Speaker 1:`` / ``[S1]`` / ``Name:`` lines, up to 4 speakers) -> (audio, subtitles,
    metadata, segments with their speaker, seed used). Speaker N speaks with ``voice_N`` (a saved voice, cleaned as
    it was saved) or, when that is empty, ``audio_N`` (an uploaded clip, cleaned with ``reference_cleanup``:
    "auto", "full" or "off"; None = the default)."""
    from tts_app.dialogue import dialogue_request, parse_script

    lang = _lang(ctx, request)
    engine = _engine(ctx)
    try:
        check_text(script, "script")
        parsed = parse_script(script or "")
    except TTSAppError as exc:
        raise user_error(error_text(exc, lang)) from exc
    voices_given = [voice_1, voice_2, voice_3, voice_4]
    audios = [audio_1, audio_2, audio_3, audio_4]
    voices, refs = [], []
    for speaker in parsed.speakers:
        slot = speaker.number - 1
        try:
            if voices_given[slot]:
                ref, text = ctx.voices.prepare_source(voices_given[slot], ctx.references)
            elif audios[slot]:
                _check_reference_upload(ctx, audios[slot], lang)
                ref, text = _prepare_reference(ctx, audios[slot], None, reference_cleanup), None
            else:
                raise user_error(server_text(lang, "need_speaker_voice", number=speaker.number, name=speaker.label))
        except TTSAppError as exc:
            raise user_error(error_text(exc, lang)) from exc
        voices.append((ref, _fill_transcript(ctx, ref, text, lang)))
        refs.append(ref)
    params = tempo_params(SynthesisParams(seed=int(seed or 0)), speed, duration_s, loudness_lufs)
    if reference_cleanup:
        params = dataclasses.replace(params, reference_cleanup=reference_cleanup)
    synthesis_request = dialogue_request(parsed, voices, text=script, params=params, priority=Priority.INTERACTIVE)
    return run_web_request(ctx, synthesis_request, lang, progress, speaker_references=refs,
                           audio_format=audio_format, request=request, kind="dialogue")
