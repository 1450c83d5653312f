"""History handlers of the Single tab: each browser's last generations (``tts_app.history.HistoryStore``,
``AppContext.history_store``), listed with text, voice, settings and a player, and re-run with the same settings.

Per owner: every handler finds "this browser" from the request (``AppContext.owner``: its ``tts_app_browser``
cookie, or its API key; the identity that also names its output folder and owns its files and jobs), so one browser
never sees another's history and a reload, a browser restart or a server restart finds the same entries. The generation's files are
found on the server (its sidecar, which must lie in this browser's own folder), never taken from the page. Thin:
the store does the work; bad input becomes ``gr.Error``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import gradio as gr

from tts_app.errors import TTSAppError
from tts_app.history import HistoryEntry
from tts_app.ui.context import AppContext
from tts_app.ui.texts import server_text

#: Settings inputs of the Single tab a history entry keeps, in the order ``remember`` receives them after the
#: text / reference inputs (the same names as ``handlers.synthesize``'s parameters).
SETTINGS = ("seed", "greedy", "temperature", "top_p", "top_k", "cfg_scale", "max_new_tokens", "max_segment_chars",
            "pause_ms", "use_cache", "speed", "duration_s", "loudness_lufs", "audio_format", "segment_durations_s",
            "num_beams", "length_penalty", "num_diffusion_steps", "segment_context", "prompt_cache")


def _lang(ctx: AppContext, request: gr.Request | None) -> str:
    from tts_app.ui.handlers import _lang as pick

    return pick(ctx, request)


def _owner(ctx: AppContext, request: gr.Request | None) -> str:
    from tts_app.ui.handlers import _headers

    return ctx.owner(_headers(request))


#: Emotion inputs of the Single tab an entry keeps (``HistoryEntry.emotion``), in the order ``remember`` receives
#: them after ``SETTINGS`` and ``rerun_values`` returns them: ``handlers.synthesize``'s emotion parameters.
EMOTION_INPUTS = ("emotion_mode", "emotion_audio", "happy", "angry", "sad", "afraid", "disgusted", "melancholic",
                  "surprised", "calm", "emotion_weight", "emotion_text")


def _entry_view(entry: HistoryEntry) -> dict:
    """What the page shows of one entry (plain JSON for a ``gr.State``)."""
    return {"entry_id": entry.entry_id, "created_utc": entry.created_utc, "text": entry.text, "voice": entry.voice,
            "reference_name": entry.reference_name, "settings": entry.settings, "emotion": entry.emotion,
            "audio": str(entry.audio)}


def list_history(ctx: AppContext, request: gr.Request = None) -> list[dict]:
    """Page loaded -> this browser's entries, newest first (none when history is off)."""
    store = ctx.history_store
    return [_entry_view(e) for e in store.list(_owner(ctx, request))] if store.enabled else []


def _own_outputs(ctx: AppContext, metadata: str | None, request: gr.Request | None
                 ) -> tuple[Path, Path, Path | None] | None:
    """(audio, sidecar, subtitles) of the generation whose sidecar is ``metadata``, when that file lies in this
    browser's own folder (a path sent by a page is never trusted further); None otherwise."""
    from tts_app.ui.handlers import _headers

    if not metadata:
        return None
    mine = Path(os.path.realpath(ctx.browser_dir(_headers(request))))
    sidecar = Path(os.path.realpath(metadata))
    if mine not in sidecar.parents or not sidecar.is_file():
        return None
    try:
        record = json.loads(sidecar.read_text(encoding="utf-8"))
        audio = sidecar.with_name(Path(record["audio"]["file"]).name)
        subtitles = (record.get("subtitles") or {}).get("file")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return audio, sidecar, sidecar.with_name(Path(subtitles).name) if subtitles else None


def remember(ctx: AppContext, metadata: str | None, used_seed: float | None, reference_audio: str | None,
             text: str, reference_text: str | None, voice: str | None, seed: float | None = None,
             greedy: bool | None = None, temperature: float | None = None, top_p: float | None = None,
             top_k: float | None = None, cfg_scale: float | None = None, max_new_tokens: float | None = None,
             max_segment_chars: float | None = None, pause_ms: float | None = None, use_cache: bool = True,
             speed: float | None = None, duration_s: float | None = None, loudness_lufs: float | None = None,
             audio_format: str | None = None, segment_durations_s: str | None = None,
             num_beams: float | None = None, length_penalty: float | None = None,
             num_diffusion_steps: float | None = None, segment_context: bool | None = None,
             prompt_cache: bool | None = None, emotion_mode: str | None = None, emotion_audio: str | None = None, happy: float | None = None,
             angry: float | None = None, sad: float | None = None, afraid: float | None = None,
             disgusted: float | None = None, melancholic: float | None = None, surprised: float | None = None,
             calm: float | None = None, emotion_weight: float | None = None, emotion_text: str | None = None,
             request: gr.Request = None):
    """A generation finished -> this browser's entries with it first. Stores the files just written (found from
    their sidecar ``metadata``) with the text, voice / uploaded clip, the Settings values (``SETTINGS``; the
    seed stored is the one used, so a random seed re-runs the same) and the emotion controls (``EMOTION_INPUTS``,
    with a copy of the emotion clip; none when the source is the voice reference's own). History off: nothing is
    stored.

    Every input is a named parameter: gradio fills a ``gr.Request`` parameter only when no ``*args`` comes before
    it (``gradio.helpers.special_args``), and without the request there is no cookie, so no "this browser"."""
    store = ctx.history_store
    if not store.enabled:
        return []
    owner = _owner(ctx, request)
    found = _own_outputs(ctx, metadata, request)
    if found is None:
        return [_entry_view(e) for e in store.list(owner)]
    audio, sidecar, subtitles = found
    values = dict(seed=int(used_seed) if used_seed is not None else seed, greedy=greedy, temperature=temperature,
                  top_p=top_p, top_k=top_k, cfg_scale=cfg_scale, max_new_tokens=max_new_tokens,
                  max_segment_chars=max_segment_chars, pause_ms=pause_ms, use_cache=use_cache, speed=speed,
                  duration_s=duration_s, loudness_lufs=loudness_lufs, audio_format=audio_format,
                  segment_durations_s=segment_durations_s or None, num_beams=num_beams,
                  length_penalty=length_penalty, num_diffusion_steps=num_diffusion_steps,
                  segment_context=bool(segment_context),
                  prompt_cache=None if prompt_cache is None else bool(prompt_cache))
    emotion = None
    if emotion_mode and emotion_mode != "none":
        emotion = dict(emotion_mode=emotion_mode, happy=happy, angry=angry, sad=sad, afraid=afraid,
                       disgusted=disgusted, melancholic=melancholic, surprised=surprised, calm=calm,
                       emotion_weight=emotion_weight, emotion_text=emotion_text or None)
    try:
        store.add(owner, audio=audio, metadata=sidecar, subtitles=subtitles, text=text, voice=voice or None,
                  reference_file=None if voice else reference_audio, reference_text=reference_text,
                  settings=values, emotion=emotion,
                  emotion_file=emotion_audio if emotion is not None and emotion_mode == "clip" else None)
    except (OSError, TTSAppError) as exc:  # the generation itself succeeded: say so, keep going
        gr.Warning(server_text(_lang(ctx, request), "history_not_saved", error=str(exc)))
    return [_entry_view(e) for e in store.list(owner)]


def rerun_values(ctx: AppContext, entry_id: str, request: gr.Request = None) -> list:
    """An entry's "Re-run" -> the Single tab's inputs as they were: [reference audio, text, reference text, seed,
    randomize (off), voice, then the other ``SETTINGS``, then ``EMOTION_INPUTS`` (source "none", the sliders at 0
    and the weight at its default for an entry without emotion)]. ``segment_context`` is put back only on a model
    that offers it (elsewhere its box is hidden and must not stay ticked; an older entry has none: off);
    ``prompt_cache`` as it was, or the model's default for an entry without one."""
    from tts_app.ui.controls import generation_controls
    from tts_app.ui.emotion import DEFAULT_EMOTION_WEIGHT
    from tts_app.ui.voices import UPLOAD

    try:
        entry = ctx.history_store.get(_owner(ctx, request), entry_id)
    except TTSAppError as exc:
        raise gr.Error(str(exc)) from exc
    s = entry.settings
    reference = str(entry.reference_audio) if entry.reference_audio is not None else None
    emotion = {"emotion_mode": "none", "emotion_weight": DEFAULT_EMOTION_WEIGHT, "emotion_text": "",
               **{name: 0.0 for name in EMOTION_INPUTS[2:10]}, **(entry.emotion or {})}
    emotion["emotion_audio"] = str(entry.emotion_audio) if entry.emotion_audio is not None else None
    facts = ctx.engine.facts if ctx.engine is not None else None
    s = {**s, "segment_context": bool(s.get("segment_context")) and bool(
        facts is not None and facts.supports_segment_context)}
    if s.get("prompt_cache") is None:  # an older entry, or one made on a model without a prompt cache
        s["prompt_cache"] = bool(generation_controls(facts)["prompt_cache"].default)
    return [reference, entry.text, entry.reference_text or "", s.get("seed", 0), False, entry.voice or UPLOAD,
            *(s.get(name) for name in SETTINGS if name != "seed"), *(emotion[name] for name in EMOTION_INPUTS)]


#: a ``page_defaults`` value: the loaded model has no such knob (its widget is hidden), so an entry never lists it
NOT_A_KNOB = "not a knob of this model"


def page_defaults(ctx: AppContext) -> dict:
    """The Single tab's starting value of each ``SETTINGS`` input except the seed (the model's defaults,
    ``generation_controls``; speed 1, duration 0, loudness 0 = "as generated"): an entry lists only what differs.
    A knob the model does not have (VibeVoice's temperature and top-p: hidden, their widgets still send a value) is
    ``NOT_A_KNOB``."""
    from tts_app.ui.controls import generation_controls

    facts = ctx.engine.facts if ctx.engine is not None else None
    controls = generation_controls(facts)
    knobs = {name: controls[name].default if controls[name].visible else NOT_A_KNOB
             for name in ("greedy", "temperature", "top_p", "top_k", "cfg_scale", "max_new_tokens",
                          "max_segment_chars", "num_beams", "length_penalty", "num_diffusion_steps")}
    return {**knobs, "pause_ms": controls["pause_between_segments_ms"].default, "use_cache": True, "speed": 1.0,
            "duration_s": 0, "loudness_lufs": 0, "audio_format": "wav", "segment_durations_s": None,
            "segment_context": False if facts is not None and facts.supports_segment_context else NOT_A_KNOB,
            "prompt_cache": controls["prompt_cache"].default if controls["prompt_cache"].visible else NOT_A_KNOB}


def _same(value, default) -> bool:
    if isinstance(value, (int, float)) and isinstance(default, (int, float)) and not isinstance(value, bool):
        return abs(float(value) - float(default)) < 1e-9
    return value == default


def _local_time(created_utc: str, time_zone: str | None) -> str:
    """An entry's ISO 8601 UTC time as "YYYY-MM-DD HH:MM:SS" in ``time_zone`` (an IANA name, the browser's:
    "Asia/Shanghai") followed by that zone's name; in UTC, said so, when the zone is missing or unknown."""
    import datetime
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    when = datetime.datetime.fromisoformat(created_utc)
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    try:
        zone = ZoneInfo(time_zone) if time_zone else None
    except (ZoneInfoNotFoundError, ValueError):
        zone = None
    if zone is None:
        return when.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S") + " UTC"
    return f"{when.astimezone(zone).strftime('%Y-%m-%d %H:%M:%S')} ({time_zone})"


def entry_summary(entry: dict, lang: str, defaults: dict | None = None, time_zone: str | None = None) -> str:
    """Markdown of one entry: time (in the browser's ``time_zone``, else UTC), voice (the saved voice, or the
    uploaded clip's own file name), text (shortened), the seed, the settings that differ from ``defaults``
    (``page_defaults``; None: every setting given; a knob the model lacks never) and the emotion, when one was
    set."""
    s = entry["settings"]
    voice = entry["voice"] or entry["reference_name"] or server_text(lang, "voice_upload")
    defaults = defaults or {}
    shown = {k: v for k, v in s.items() if v is not None and v != "" and defaults.get(k) != NOT_A_KNOB and
             (k == "seed" or k not in defaults or not _same(v, defaults[k]))}
    settings = " · ".join(f"{k} {v}" for k, v in shown.items())
    emotion = entry.get("emotion") or {}
    if emotion.get("emotion_mode") not in (None, "none"):
        mode = emotion["emotion_mode"]
        parts = [server_text(lang, f"emo_mode_{mode}")]
        if mode == "vector":
            parts += [f"{name} {emotion[name]}" for name in EMOTION_INPUTS[2:10] if emotion.get(name)]
        if mode == "text" and emotion.get("emotion_text"):
            parts.append(f"“{emotion['emotion_text']}”")
        parts.append(f"emotion_weight {emotion.get('emotion_weight')}")
        settings += (" · " if settings else "") + f"{server_text(lang, 'emotion_word')}: " + ", ".join(parts)
    text = entry["text"] if len(entry["text"]) <= 160 else entry["text"][:157] + "…"
    when = _local_time(entry["created_utc"], time_zone)
    return (f"**{when}** · {server_text(lang, 'history_voice')}: **{voice}**\n\n{text}\n\n"
            f"<sub>{settings}</sub>")
