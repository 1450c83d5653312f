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
            "pause_ms", "use_cache", "speed", "duration_s", "loudness_lufs", "audio_format", "segment_durations_s")


def _lang(ctx: AppContext, request: gr.Request | None) -> str:
    from tts_app.ui.handlers import _lang as pick

    return pick(ctx, request)


def _owner(ctx: AppContext, request: gr.Request | None) -> str:
    from tts_app.ui.handlers import _headers

    return ctx.owner(_headers(request))


def _entry_view(entry: HistoryEntry) -> dict:
    """What the page shows of one entry (plain JSON for a ``gr.State``)."""
    return {"entry_id": entry.entry_id, "created_utc": entry.created_utc, "text": entry.text, "voice": entry.voice,
            "reference_name": entry.reference_name, "settings": entry.settings, "audio": str(entry.audio)}


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
             request: gr.Request = None):
    """A generation finished -> this browser's entries with it first. Stores the files just written (found from
    their sidecar ``metadata``) with the text, voice / uploaded clip and the Settings values (``SETTINGS``; the
    seed stored is the one used, so a random seed re-runs the same). History off: nothing is stored.

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
                  segment_durations_s=segment_durations_s or None)
    try:
        store.add(owner, audio=audio, metadata=sidecar, subtitles=subtitles, text=text, voice=voice or None,
                  reference_file=None if voice else reference_audio, reference_text=reference_text,
                  settings=values)
    except (OSError, TTSAppError) as exc:  # the generation itself succeeded: say so, keep going
        gr.Warning(server_text(_lang(ctx, request), "history_not_saved", error=str(exc)))
    return [_entry_view(e) for e in store.list(owner)]


def rerun_values(ctx: AppContext, entry_id: str, request: gr.Request = None) -> list:
    """An entry's "Re-run" -> the Single tab's inputs as they were: [reference audio, text, reference text, seed,
    randomize (off), voice, then the other ``SETTINGS``]."""
    from tts_app.ui.voices import UPLOAD

    try:
        entry = ctx.history_store.get(_owner(ctx, request), entry_id)
    except TTSAppError as exc:
        raise gr.Error(str(exc)) from exc
    s = entry.settings
    reference = str(entry.reference_audio) if entry.reference_audio is not None else None
    return [reference, entry.text, entry.reference_text or "", s.get("seed", 0), False, entry.voice or UPLOAD,
            *(s.get(name) for name in SETTINGS if name != "seed")]


def page_defaults(ctx: AppContext) -> dict:
    """The Single tab's starting value of each ``SETTINGS`` input except the seed (the model's defaults,
    ``generation_controls``; speed 1, duration 0, loudness 0 = "as generated"): an entry lists only what differs."""
    from tts_app.ui.controls import generation_controls

    controls = generation_controls(ctx.engine.facts if ctx.engine is not None else None)
    knobs = {name: controls[name].default for name in ("greedy", "temperature", "top_p", "top_k", "cfg_scale",
                                                      "max_new_tokens", "max_segment_chars")}
    return {**knobs, "pause_ms": controls["pause_between_segments_ms"].default, "use_cache": True, "speed": 1.0,
            "duration_s": 0, "loudness_lufs": 0, "audio_format": "wav", "segment_durations_s": None}


def _same(value, default) -> bool:
    if isinstance(value, (int, float)) and isinstance(default, (int, float)) and not isinstance(value, bool):
        return abs(float(value) - float(default)) < 1e-9
    return value == default


def entry_summary(entry: dict, lang: str, defaults: dict | None = None) -> str:
    """Markdown of one entry: time, voice, text (shortened), the seed and the settings that differ from
    ``defaults`` (``page_defaults``; None: every setting given)."""
    s = entry["settings"]
    voice = entry["voice"] or entry["reference_name"] or server_text(lang, "voice_upload")
    defaults = defaults or {}
    shown = {k: v for k, v in s.items() if v is not None and v != "" and
             (k == "seed" or k not in defaults or not _same(v, defaults[k]))}
    settings = " · ".join(f"{k} {v}" for k, v in shown.items())
    text = entry["text"] if len(entry["text"]) <= 160 else entry["text"][:157] + "…"
    when = entry["created_utc"][:19].replace("T", " ")
    return (f"**{when} UTC** · {server_text(lang, 'history_voice')}: **{voice}**\n\n{text}\n\n"
            f"<sub>{settings}</sub>")
