"""Voice-library handlers of the Single tab (save / select / rename / delete, and the list for API clients). Thin:
the library (``tts_app.voices.VoiceLibrary``, ``AppContext.voices``) does the work; a refusal becomes one
``gr.Error`` in the user's language (``tts_app.ui.texts.error_text``), shown where they acted, with no traceback in
the server log."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from tts_app.errors import TTSAppError
from tts_app.ui.context import AppContext
from tts_app.ui.texts import error_text, server_text

#: dropdown value meaning "use the uploaded / recorded clip"
UPLOAD = ""


def voice_choices(ctx: AppContext, lang: str) -> list[tuple[str, str]]:
    """Dropdown choices: (label, value); the first is the uploaded clip, then every voice (bundled ones marked)."""
    choices = [(server_text(lang, "voice_upload"), UPLOAD)]
    for voice in ctx.voices.list():
        label = f"{voice.name} ({server_text(lang, 'voice_example')})" if voice.bundled else voice.name
        choices.append((label, voice.name))
    return choices


def _lang(ctx: AppContext, request: gr.Request | None) -> str:
    from tts_app.ui.handlers import _lang as pick

    return pick(ctx, request)


def _say(message: str) -> gr.Error:
    """A refusal the user can act on: stays until closed, no traceback in the server log."""
    from tts_app.ui.handlers import user_error

    return user_error(message)


def _refused(exc: BaseException, lang: str) -> gr.Error:
    """``exc`` as the user's refusal message, in ``lang`` (``tts_app.ui.texts.error_text``)."""
    return _say(error_text(exc, lang))


def _cleaned_file(ctx: AppContext, prepared, request: gr.Request | None) -> str:
    """The cleaned clip as a 16-bit WAV file for the player, in the browser's own folder (``AppContext.reference_clip``)."""
    from tts_app.ui.handlers import _headers

    return str(ctx.reference_clip(prepared, _headers(request)))


def select_voice(ctx: AppContext, voice: str | None, reference_text: str | None = None,
                 request: gr.Request = None):
    """A voice picked -> (its transcript for the reference-text box, its cleaned clip, a short report). The upload
    choice leaves the boxes as they are."""
    lang = _lang(ctx, request)
    if not voice:
        return gr.update(), gr.update(), gr.update()
    try:
        found = ctx.voices.get(voice)
        prepared = ctx.voices.prepare(found.name, ctx.references)
    except TTSAppError as exc:
        raise _refused(exc, lang) from exc
    note = server_text(lang, "voice_selected", name=found.name, seconds=f"{prepared.audio.duration_s:.1f}",
                       created=found.created_utc[:10])
    return found.reference_text or "", _cleaned_file(ctx, prepared, request), note


def save_voice(ctx: AppContext, reference_audio: str | None, reference_text: str | None, name: str | None,
               reference_cleanup: str | None = None, request: gr.Request = None):
    """Save the uploaded / recorded clip (and its transcript) as voice ``name`` -> (dropdown with it selected,
    status line). An empty transcript is filled by automatic transcription when an ASR model is available. The
    page's ``reference_cleanup`` ("auto", "full", "off"; None = the default) is stored with the voice and used
    whenever the voice is used."""
    lang = _lang(ctx, request)
    if not reference_audio:
        raise _say(server_text(lang, "need_reference"))
    text = (reference_text or "").strip() or None
    if text is None:
        text = _auto_transcript(ctx, reference_audio, lang)
    try:
        voice = ctx.voices.save(name or "", Path(reference_audio), ctx.references, reference_text=text,
                                source_name=Path(reference_audio).name, cleanup=reference_cleanup or None)
    except TTSAppError as exc:
        raise _refused(exc, lang) from exc
    gr.Info(server_text(lang, "voice_saved", name=voice.name))
    return gr.update(choices=voice_choices(ctx, lang), value=voice.name), server_text(lang, "voice_saved",
                                                                                       name=voice.name)


def _auto_transcript(ctx: AppContext, reference_audio: str, lang: str) -> str | None:
    """The ASR transcript of a clip, or None with a warning when no ASR model can be loaded."""
    from tts_app.audio.transcribe import AsrUnavailableError

    try:
        prepared = ctx.references.prepare(reference_audio, name=Path(reference_audio).name)
        return ctx.transcriber.transcribe(prepared.audio.samples, prepared.audio.sampling_rate) or None
    except AsrUnavailableError as exc:
        gr.Warning(str(exc))
        return None
    except TTSAppError as exc:
        raise _refused(exc, lang) from exc


def transcribe_reference(ctx: AppContext, reference_audio: str | None, voice: str | None = None,
                         request: gr.Request = None) -> str:
    """Transcribe the uploaded clip (or the selected voice) -> the text for the (editable) reference-text box."""
    from tts_app.audio.transcribe import AsrUnavailableError

    lang = _lang(ctx, request)
    try:
        if voice:
            prepared = ctx.voices.prepare(voice, ctx.references)
        elif reference_audio:
            prepared = ctx.references.prepare(reference_audio, name=Path(reference_audio).name)
        else:
            raise _say(server_text(lang, "need_reference"))
        return ctx.transcriber.transcribe(prepared.audio.samples, prepared.audio.sampling_rate)
    except AsrUnavailableError as exc:
        raise _refused(exc, lang) from exc
    except TTSAppError as exc:
        raise _refused(exc, lang) from exc


def rename_voice(ctx: AppContext, voice: str | None, new_name: str | None, request: gr.Request = None):
    """Rename the selected voice -> (dropdown with the new name selected, status line)."""
    lang = _lang(ctx, request)
    if not voice:
        raise _say(server_text(lang, "need_voice"))
    try:
        renamed = ctx.voices.rename(voice, new_name or "")
    except TTSAppError as exc:
        raise _refused(exc, lang) from exc
    message = server_text(lang, "voice_renamed", old=voice, name=renamed.name)
    return gr.update(choices=voice_choices(ctx, lang), value=renamed.name), message


def delete_voice(ctx: AppContext, voice: str | None, confirmed: bool = True, request: gr.Request = None):
    """Delete the selected voice -> (dropdown back on the uploaded clip, status line). On the page the browser asks
    first (``confirm_delete_js``); ``confirmed`` False (the user said no) changes nothing."""
    lang = _lang(ctx, request)
    if confirmed is False:
        return gr.skip(), gr.skip()
    if not voice:
        raise _say(server_text(lang, "need_voice"))
    try:
        ctx.voices.delete(voice)
    except TTSAppError as exc:
        raise _refused(exc, lang) from exc
    return gr.update(choices=voice_choices(ctx, lang), value=UPLOAD), server_text(lang, "voice_deleted", name=voice)


def confirm_delete_js(lang: str | None) -> str:
    """The Delete button's page script: asks "Delete the voice NAME?" in the page's language (``lang`` = --lang, None:
    the browser's) and passes the answer on as ``delete_voice``'s ``confirmed``; with no voice selected it asks
    nothing (the server says to select one)."""
    import json

    texts = {code: server_text(code, "voice_delete_confirm", name="{name}") for code in ("en", "zh")}
    forced = "null" if lang is None else json.dumps(lang)
    return ("(voice, confirmed) => { const lang = " + forced + " || (navigator.language || 'en').toLowerCase(); "
            "const texts = " + json.dumps(texts, ensure_ascii=False) + "; "
            "if (!voice) return [voice, true]; "
            "return [voice, window.confirm((lang.startsWith('zh') ? texts.zh : texts.en).replace('{name}', voice))]; }")


def list_voices(ctx: AppContext, request: gr.Request = None) -> list[dict]:
    """Every voice (name, transcript, source hash, duration, bundled, warnings) for API clients."""
    return [voice.to_dict() for voice in ctx.voices.list()]


def refresh_voices(ctx: AppContext, request: gr.Request = None):
    """Page load -> the dropdown's choices as they are now (another user may have saved a voice)."""
    return gr.update(choices=voice_choices(ctx, _lang(ctx, request)))
