"""The Batch (JSONL) tab: a creator uploads a job file (and the ZIP of voices it names), checks it, runs it as a
durable job and follows it: lines done / total, ETA and batch size while it runs, a results table with a player per
line, a ZIP. The job runs on the server (``tts_app.jobs.manager``), so closing or reloading the page, or
restarting the server, loses nothing: the browser remembers the job on screen (``gr.BrowserState``) and reopens it.

A job belongs to whoever started it (``AppContext.owner``: the browser's cookie, or the API key of a script that
sends one): its status, results, cancel and resume answer that owner only, its folder's files are served to it
only (``tts_app.server.sessions``), and "Recent jobs" lists that owner's jobs. Anyone else gets "belongs to
another browser".

API (``gradio_client``): ``/validate_job``, ``/submit_job`` (-> the job id and its state, at once), ``/job_status``
(job id -> state dict), ``/job_results`` (job id -> table and ZIP), ``/run_job`` (submits and waits; summary, table,
ZIP), ``/cancel_job`` and ``/resume_job`` (job id -> state dict). The API endpoints take and return only values a
script can use (ids, files, dicts); the page's own events, which also carry the browser's stored state and redraw
the tab, are not part of the API.
"""

from __future__ import annotations

import html
import json
import logging
from pathlib import Path
from typing import Any

import gradio as gr

from tts_app.config import DEFAULT_REFERENCE_CLEANUP, REFERENCE_CLEANUPS
from tts_app.quality.policy import DEFAULT_TAKE_CHECK, TAKE_CHECKS
from tts_app.errors import TTSAppError
from tts_app.frontend.messages import localize, localize_record
from tts_app.jobs.store import JobState
from tts_app.ui.context import AppContext
from tts_app.ui.texts import error_text, server_text

log = logging.getLogger(__name__)

# Key of the (non-secret) job on screen in localStorage; encryption there only keeps other pages' scripts out, and a
# fixed key lets a restarted server read it (who may open a job is decided by its owner, not by knowing its id).
BROWSER_SECRET = "tts_app-batch-jobs-v1"
# Rows shown in the results table at once (each has an audio player); the ZIP always has every line.
MAX_SHOWN_ROWS = 200
FILTERS = ("all", "ok", "failed", "cancelled", "needs_listening")
# Written next to the outputs at start-up and offered for download: one line per common case.
TEMPLATE_LINES = [
    {"input_text": "你好，欢迎收听今天的节目。", "prompt_audio": "voices/mei.wav", "prompt_text": "大家好，我是小美。",
     "output_name": "intro_zh"},
    {"input_text": "Welcome back to the show.", "prompt_audio": "voices/anna.wav", "output_name": "intro_en"},
    {"input_text": "银行(yin2 hang2)九点开门。", "prompt_audio": "voices/mei.wav", "output_name": "bank", "seed": 7},
]

# Names of what the API-only endpoints return (gradio would call them "1st", "2nd").
_VIEW_NAMES = ["progress", "results", "zip", "run_button", "cancel_button", "resume_button", "recent_jobs"]
API_RETURNS = {"/job_status": ["job"], "/job_results": ["records", "zip"], "/submit_job": ["job_id", "job"],
               "/cancel_job": ["job"], "/resume_job": ["job"]}

# The results table scrolls inside a box of its own (``.job-rows``, a div inside the HTML): gradio's block around
# an ``gr.HTML`` keeps ``overflow: visible``, so a height limit on the block itself lets the rows spill over the ZIP
# box and the footer below it (issue 23). Its header stays in view while the rows scroll. On a narrow screen (a
# phone) each line becomes a small card (line, name, status, duration; then the player; then the notes), so no row
# is wider than the screen.
CSS = """
#job-progress { min-height: 3.5em; }
#job-progress .job-bar { height: 0.9em; background: var(--neutral-200); border-radius: 0.45em; overflow: hidden; }
#job-progress .job-bar > div { height: 100%; background: var(--color-accent); transition: width 0.5s; }
#job-progress p { margin: 0.4em 0 0 0; }
#job-results .job-rows { max-height: min(640px, 75vh); overflow: auto; overscroll-behavior: contain; }
#job-results table { table-layout: fixed; width: 100%; border-collapse: collapse; font-size: 0.9em; margin: 0; }
#job-results thead th { position: sticky; top: 0; z-index: 1; background: var(--block-background-fill); }
#job-results th, #job-results td { padding: 0.25em 0.4em; border-bottom: 1px solid var(--neutral-200);
                                   overflow-wrap: anywhere; vertical-align: middle; text-align: left; }
#job-results col.c-line { width: 4em; } #job-results col.c-status { width: 6em; }
#job-results col.c-dur { width: 6em; } #job-results col.c-quality { width: 12em; } #job-results col.c-audio { width: 16em; }
#job-results audio { width: 100%; height: 2em; }
@media (max-width: 640px) {
  #job-results thead, #job-results colgroup { display: none; }
  #job-results table, #job-results tbody { display: block; }
  #job-results tr { display: grid; grid-template-columns: 3em minmax(0, 1fr) auto auto; column-gap: 0.4em;
                    border-bottom: 1px solid var(--neutral-200); padding: 0.3em 0; }
  #job-results td { border: none; padding: 0.1em 0.2em; }
  #job-results td:nth-child(5), #job-results td:nth-child(6) { grid-column: 1 / -1; }
  #job-results td:nth-child(6):empty { display: none; }
}
"""


def _lang(ctx: AppContext, request: gr.Request | None) -> str:
    from tts_app.ui.texts import pick_language

    headers = getattr(request, "headers", None) or {}
    return pick_language(ctx.lang, headers.get("accept-language"))


def _empty_validation(ctx: AppContext, request: gr.Request = None):
    """The validation table before any Validate: no rows, headers in the page's language."""
    from tts_app.ui.texts import empty_table

    return empty_table(_lang(ctx, request), "col_validation")


def _user_error(message: str) -> gr.Error:
    """A mistake the user can fix: shown where they acted, no traceback in the server log."""
    return gr.Error(message, duration=None, print_exception=False)


def _check_uploads(ctx: AppContext, jsonl, audio_zip, default_voice, lang: str) -> None:
    """Hold each uploaded file to its kind's size limit (``UploadConfig``)."""
    from tts_app.ui.uploads import check_upload

    message = server_text(lang, "upload_too_large", name="{name}", size="{size}", limit="{limit}")
    try:
        check_upload(jsonl, ctx.upload_config.max_upload_bytes, message)
        check_upload(default_voice, ctx.upload_config.max_upload_bytes, message)
        check_upload(audio_zip, ctx.upload_config.max_zip_upload_bytes, message)
    except TTSAppError as exc:
        raise _user_error(error_text(exc, lang)) from exc


def _check_quota(ctx: AppContext, owner: str | None, uploads, lang: str) -> None:
    """Refuse a job whose copies of ``uploads`` would take ``owner`` past ``UploadConfig.max_owner_bytes`` (their
    jobs and uploads together: ``tts_app.server.uploads.DiskQuota``), in words naming the use and the limit."""
    from gradio.utils import get_upload_folder

    from tts_app.server.uploads import DiskQuota

    more_bytes = 0
    for path in uploads:
        try:
            more_bytes += Path(path).stat().st_size if path else 0
        except OSError:
            continue  # a missing upload is refused by the job's own checks
    quota = DiskQuota(ctx.output_root, Path(get_upload_folder()), ctx.upload_config.max_owner_bytes)
    refusal = quota.refusal(owner or "anonymous", more_bytes, lang)
    if refusal is not None:
        raise _user_error(refusal)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 else \
        f"{seconds // 60}:{seconds % 60:02d}"


def _lines_finished(state: JobState) -> int:
    """Lines with an outcome a user keeps (ok, failed, kept from an earlier run): the job's records minus the lines
    recorded "cancelled" (a stopped server or a Cancel records every unfinished line so; Resume runs them)."""
    return max(0, state.num_done - state.num_cancelled)


def _num_ok(state: JobState) -> int:
    """The job's ok lines: made by this run, plus those a resume kept from an earlier run (only ok lines are
    kept: ``tts_app.jobs.runner``), so a resumed 15-line job that made 6 reads "ok 15", not "ok 6"."""
    return state.num_ok + state.num_skipped


def progress_html(state: JobState | None, lang: str) -> str:
    """The progress box: a bar and one line (status, lines finished / total, outcome counts, ETA, batch size, id).
    Cancelled lines are not counted as finished, so an interrupted job never shows a full bar."""
    if state is None:
        return f"<p>{html.escape(server_text(lang, 'no_job_yet'))}</p>"
    total = max(state.num_lines, 1)
    finished = _lines_finished(state)
    share = 100.0 * finished / total if state.num_lines else 0.0
    parts = [f"<b>{html.escape(server_text(lang, 'status_' + state.status))}</b>",
             html.escape(server_text(lang, "lines_done", done=finished, total=state.num_lines or "?")),
             html.escape(server_text(lang, "outcomes", ok=_num_ok(state), failed=state.num_failed,
                                     cancelled=state.num_cancelled))]
    if state.num_skipped:  # of the ok lines, those a resumed job kept
        parts.append(html.escape(server_text(lang, "kept_lines", kept=state.num_skipped)))
    if state.active:
        parts.append(html.escape(server_text(lang, "eta", eta=_duration(state.eta_s))))
        if state.batch_size:
            parts.append(html.escape(server_text(lang, "batch_now", size=state.batch_size)))
    parts.append(f"<code>{html.escape(state.job_id)}</code>")
    lines = [f'<div class="job-bar" role="progressbar" aria-valuenow="{finished}" aria-valuemin="0" '
             f'aria-valuemax="{state.num_lines}"><div style="width: {share:.1f}%"></div></div>',
             f"<p>{' · '.join(parts)}</p>"]
    record = state.to_dict()
    if state.error:
        lines.append(f"<p>✖ {html.escape(localize_record(record, 'error', lang))}</p>")
    for warning in localize_record(record, "warnings", lang):
        lines.append(f"<p>⚠ {html.escape(warning)}</p>")
    return f'<div data-status="{state.status}" data-done="{finished}">{"".join(lines)}</div>'


def quality_text(record: dict, lang: str) -> str:
    """A results record's quality cell (``tts_app.jobs.results.take_fields``): "needs listening: ..." with the
    thresholds its segments still miss, else its worst error rate and speaker similarity and its re-rolls; "" for a
    line run without a take policy."""
    scores = [s for s in record.get("scores") or [] if s]
    if not scores:
        return ""
    problems = sorted({p for s in scores for p in s.get("problems") or []})
    if problems:
        return server_text(lang, "quality_needs_listening", problems=", ".join(problems))
    rates = [s["error_rate"] for s in scores if s.get("error_rate") is not None]
    similarities = [s["similarity"] for s in scores if s.get("similarity") is not None]
    return server_text(lang, "quality_scores", metric=(scores[0].get("metric") or "").upper() or "—",
                       error_rate=f"{max(rates):.2f}" if rates else "—",
                       similarity=f"{min(similarities):.2f}" if similarities else "—",
                       rerolled=record.get("rerolled", 0))


def results_html(ctx: AppContext, job_id: str | None, status_filter: str, lang: str) -> str:
    """The results table: line, output name, status, duration, a player for ok lines, error / warnings."""
    if not job_id:
        return ""
    records = ctx.jobs.results(job_id)
    if status_filter == "needs_listening":  # a take policy left a segment below a threshold (``take_fields``)
        records = [r for r in records if r.get("needs_listening")]
    elif status_filter in FILTERS[1:]:
        records = [r for r in records if r.get("status") == status_filter]
    out_dir = ctx.jobs.store.out_dir(job_id)
    head = server_text(lang, "col_job_results").split("|")
    rows = []
    for record in records[:MAX_SHOWN_ROWS]:
        audio = record.get("audio_path")
        player = ""
        if record.get("status") == "ok" and audio:
            src = f"/gradio_api/file={html.escape(str((out_dir / audio).resolve()), quote=True)}"
            player = f'<audio controls preload="none" src="{src}"></audio>'
        notes = [localize_record(record, "error", lang) or ""] + localize_record(record, "warnings", lang)
        duration = record.get("duration_s")
        rows.append("<tr>" + "".join([
            f"<td>{record['line']}</td>", f"<td>{html.escape(str(record.get('output_name') or '—'))}</td>",
            f"<td>{html.escape(server_text(lang, 'line_' + str(record.get('status'))))}</td>",
            f"<td>{'' if duration is None else f'{duration:.2f}'}</td>",
            f"<td>{html.escape(quality_text(record, lang))}</td>", f"<td>{player}</td>",
            f"<td>{'<br>'.join(html.escape(n) for n in notes if n)}</td>"]) + "</tr>")
    cols = "".join(f'<col class="{c}">' for c in ("c-line", "c-name", "c-status", "c-dur", "c-quality", "c-audio",
                                                    "c-notes"))
    table = (f'<div class="job-rows"><table><colgroup>{cols}</colgroup><thead><tr>'
             f"{''.join(f'<th>{html.escape(h)}</th>' for h in head)}</tr></thead><tbody>{''.join(rows)}</tbody>"
             f"</table></div>")
    if len(records) > MAX_SHOWN_ROWS:
        table += f"<p>{html.escape(server_text(lang, 'rows_shown', shown=MAX_SHOWN_ROWS, total=len(records)))}</p>"
    if not records:
        table = f"<p>{html.escape(server_text(lang, 'no_rows'))}</p>"
    return table


def _owner(ctx: AppContext, request: gr.Request | None) -> str:
    """The caller's owner id (``AppContext.owner``)."""
    return ctx.owner(getattr(request, "headers", None))


def _owned(ctx: AppContext, job_id: str, owner: str, lang: str) -> JobState:
    """The state of job ``job_id`` if it is ``owner``'s.

    Raises:
        gr.Error: malformed id, no such job, or another owner's job (its owner is never named).
    """
    if not isinstance(job_id, str):  # e.g. a whole output passed on by an API script
        raise _user_error(server_text(lang, "bad_job_id", value=_shown(job_id)))
    try:
        state = ctx.jobs.get(job_id)
    except TTSAppError as exc:
        raise _user_error(server_text(lang, "bad_job_id", value=_shown(job_id))) from exc
    if state is None:
        raise _user_error(server_text(lang, "no_such_job", job_id=job_id))
    if state.owner != owner:
        raise _user_error(server_text(lang, "not_your_job", job_id=job_id))
    return state


def _shown(value: Any, limit: int = 60) -> str:
    """``value`` as a short quoted text for a message (a long one cut with "…")."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _mine(ctx: AppContext, job_id: str | None, owner: str) -> JobState | None:
    """The state of job ``job_id`` when it exists and is ``owner``'s, else None (never raises)."""
    if not job_id:
        return None
    try:
        state = ctx.jobs.get(job_id)
    except TTSAppError:
        return None
    return state if state is not None and state.owner == owner else None


def _choices(ctx: AppContext, owner: str, lang: str) -> list[tuple[str, str]]:
    from datetime import datetime

    out = []
    for state in ctx.jobs.list(owner=owner, limit=20):
        when = datetime.fromtimestamp(state.created_s).strftime("%m-%d %H:%M")
        label = (f"{when} · {state.input_name} · {server_text(lang, 'status_' + state.status)} · "
                 f"{_lines_finished(state)}/{state.num_lines or '?'}")
        out.append((label, state.job_id))
    return out


def _view(ctx: AppContext, browser: dict, status_filter: str, lang: str, owner: str) -> tuple:
    """(progress html, results html, zip path, run button, cancel button, resume button, recent jobs) for the
    browser's current job (nothing when it is not ``owner``'s)."""
    job_id = browser.get("job_id") or None
    state = _mine(ctx, job_id, owner)
    running = state is not None and state.active
    zip_path = None
    if state is not None and not running:
        found = ctx.jobs.results_zip(job_id)
        zip_path = None if found is None else str(found)
    can_run = ctx.engine is not None and not running
    return (progress_html(state, lang), results_html(ctx, job_id if state else None, status_filter, lang), zip_path,
            gr.update(interactive=can_run), gr.update(interactive=running),
            gr.update(interactive=ctx.engine is not None and state is not None and state.status in (
                "interrupted", "cancelled", "failed")),
            gr.update(choices=_choices(ctx, owner, lang), value=job_id if state else None))


def _browser(browser: Any) -> dict:
    """The page's stored state: ``job_id``, the job on screen ("" for none)."""
    browser = dict(browser or {})
    browser.setdefault("job_id", "")
    return browser


# ----------------------------------------------------------------------------------------------------- handlers


def validate_job(ctx: AppContext, jsonl_file, audio_zip=None, default_voice=None, request: gr.Request = None):
    """JSONL (+ZIP) uploaded -> (problem table [line, status, message], summary). Runs no model; with one loaded,
    also flags the lines it would refuse when they run (``tts_app.jobs.runner.model_line_checks``: emotion fields
    on a model without emotion control...)."""
    from tts_app.jobs.runner import model_line_checks
    from tts_app.jobs.runner import validate_job as _validate
    from tts_app.ui.handlers import _table

    lang = _lang(ctx, request)
    if not jsonl_file:
        raise _user_error(server_text(lang, "need_jsonl"))
    _check_uploads(ctx, jsonl_file, audio_zip, default_voice, lang)
    engine = ctx.engine
    check_line = None if engine is None else model_line_checks(engine.facts, engine.adapter.display_name)
    try:
        report = _validate(Path(jsonl_file), audio_dir=audio_zip or None, default_voice=default_voice or None,
                           check_line=check_line)
    except TTSAppError as exc:
        raise _user_error(error_text(exc, lang)) from exc
    rows = [[line if line else server_text(lang, "job_file"), server_text(lang, "row_" + status),
             localize(message, lang)] for line, status, message in report.as_table()]
    counts = dict(num_lines=report.num_lines, num_valid=report.num_valid, num_invalid=report.num_invalid,
                  num_warnings=report.num_warnings)
    summary = server_text(lang, "validation_ok" if report.ok else "validation_bad", **counts)
    return _table(rows, lang, "col_validation"), summary


def _settings(ctx: AppContext, max_batch_size, use_cache, greedy, seed, audio_format=None, lang: str = "en", *,
              num_beams=None, length_penalty=None, reference_cleanup=None, segment_context=None,
              take_check=None, prompt_cache=None) -> dict:
    """The job's own settings; ``greedy``, ``num_beams`` and ``length_penalty`` equal to the model's default (or
    not given, or a knob the family lacks) are stored as None = "the model's choice", as the Single tab and the
    command line send them. ``audio_format`` ("wav", "flac", "mp3", "opus"; None / "" = wav) is every line's format
    unless a line has its own ``format``. ``reference_cleanup`` ("auto", "full", "off"; None = the default) is what
    is done to the job's default voice and to the lines' reference files (a line's own field overrides it).
    ``segment_context``: every line's segments hear the earlier ones (``SynthesisParams.segment_context``; a line's
    own field overrides it).
    ``take_check`` ("off", "score", "reroll"; None = off): the lines' take policy (a line's own field overrides it).
    ``prompt_cache``: the long-text prompt cache, for a model that has one (GLM-TTS; ``SynthesisParams.prompt_cache``;
    not the KV cache); equal to the model's default, not given, or on a model without one: stored as None = the
    model's choice (a line's own field overrides it).

    Raises:
        gr.Error: an unknown ``audio_format``, naming the allowed ones; a beam setting or cleanup that
            ``SynthesisParams`` refuses (its message in ``lang``)."""
    from tts_app.audio.formats import AUDIO_FORMATS
    from tts_app.request import SynthesisParams
    from tts_app.ui.controls import generation_controls, params_from_controls

    control = generation_controls(ctx.engine.facts if ctx.engine is not None else None)["greedy"]
    greedy = None if greedy is None or not control.visible or bool(greedy) == bool(control.default) else bool(greedy)
    if audio_format and audio_format not in AUDIO_FORMATS:
        raise _user_error(server_text(lang, "bad_audio_format", value=audio_format, allowed=", ".join(AUDIO_FORMATS)))
    beams = {}
    try:
        facts = ctx.engine.facts if ctx.engine is not None else None
        if facts is not None:
            beams = params_from_controls(facts, seed=0, use_cache=True, values={
                "num_beams": num_beams, "length_penalty": length_penalty, "prompt_cache": prompt_cache})
            beams = {name: getattr(beams, name) for name in ("num_beams", "length_penalty", "prompt_cache")}
        if reference_cleanup:
            SynthesisParams(reference_cleanup=reference_cleanup)
        if take_check:
            SynthesisParams(take_check=take_check)
    except TTSAppError as exc:
        raise _user_error(error_text(exc, lang)) from exc
    return {"max_batch_size": int(max_batch_size) if max_batch_size else None, "use_cache": bool(use_cache),
            "greedy": greedy, "seed": int(seed or 0), "audio_format": audio_format or "wav",
            "num_beams": beams.get("num_beams"), "length_penalty": beams.get("length_penalty"),
            "reference_cleanup": reference_cleanup or None, "segment_context": bool(segment_context),
            "take_check": take_check or None, "prompt_cache": beams.get("prompt_cache")}


def _submit(ctx: AppContext, jsonl_file, audio_zip, default_voice, settings: dict, owner: str | None, lang: str
            ) -> JobState:
    if not jsonl_file:
        raise _user_error(server_text(lang, "need_jsonl"))
    _check_uploads(ctx, jsonl_file, audio_zip, default_voice, lang)
    _check_quota(ctx, owner, (jsonl_file, audio_zip, default_voice), lang)
    try:
        return ctx.jobs.submit(jsonl_file, audio_zip=audio_zip or None, default_voice=default_voice or None,
                               settings=settings, owner=owner,
                               names={"input": Path(jsonl_file).name,
                                      "audio": Path(audio_zip).name if audio_zip else None,
                                      "voice": Path(default_voice).name if default_voice else None})
    except TTSAppError as exc:
        raise _user_error(error_text(exc, lang)) from exc


def submit_job(ctx: AppContext, jsonl_file, audio_zip=None, default_voice=None, max_batch_size=None, use_cache=True,
               greedy=None, seed=0, browser=None, status_filter="all", audio_format="wav", num_beams=None,
               length_penalty=None, reference_cleanup=None, segment_context=None, take_check=None, prompt_cache=None, request: gr.Request = None):
    """Run clicked -> the job starts on the server; the page follows it by id (also after a reload) -> (browser
    state, job id, the tab's view). ``audio_format``: the lines' format ("wav", "flac", "mp3", "opus"; a line's
    ``format`` field overrides it). Scripts use ``submit_job_api``."""
    lang = _lang(ctx, request)
    browser = _browser(browser)
    owner = _owner(ctx, request)
    state = _submit(ctx, jsonl_file, audio_zip, default_voice,
                    _settings(ctx, max_batch_size, use_cache, greedy, seed, audio_format, lang, num_beams=num_beams,
                              length_penalty=length_penalty, reference_cleanup=reference_cleanup,
                              segment_context=segment_context, take_check=take_check, prompt_cache=prompt_cache), owner, lang)
    browser["job_id"] = state.job_id
    return (browser, state.job_id, *_view(ctx, browser, status_filter, lang, owner))


def poll(ctx: AppContext, browser, status_filter, shown, request: gr.Request = None):
    """Timer tick -> refresh the progress box (and the results once something changed) of the current job."""
    lang = _lang(ctx, request)
    browser = _browser(browser)
    owner = _owner(ctx, request)
    state = _mine(ctx, browser.get("job_id"), owner)
    key = None if state is None else f"{state.job_id}|{state.status}|{state.num_done}|{status_filter}"
    if key == shown:
        return (gr.skip(),) * 8
    return (key, *_view(ctx, browser, status_filter, lang, owner))


def open_job(ctx: AppContext, job_id, browser, status_filter="all", request: gr.Request = None):
    """A job picked from the list or pasted by id -> show it."""
    lang = _lang(ctx, request)
    browser = _browser(browser)
    owner = _owner(ctx, request)
    job_id = (job_id or "").strip()
    if job_id:
        _owned(ctx, job_id, owner, lang)
        browser["job_id"] = job_id
    return (browser, browser.get("job_id") or "", *_view(ctx, browser, status_filter, lang, owner))


def restore(ctx: AppContext, browser, status_filter="all", request: gr.Request = None):
    """Page (re)loaded -> reopen the browser's current job, with its live progress."""
    lang = _lang(ctx, request)
    browser = _browser(browser)
    owner = _owner(ctx, request)
    if _mine(ctx, browser.get("job_id"), owner) is None:
        browser["job_id"] = ""
    return (browser, browser.get("job_id") or "", *_view(ctx, browser, status_filter, lang, owner))


def cancel_job(ctx: AppContext, browser=None, request: gr.Request = None):
    """Cancel clicked -> cancel this browser's running job (other users' jobs are untouched)."""
    lang = _lang(ctx, request)
    job_id = (browser or {}).get("job_id")
    if _mine(ctx, job_id, _owner(ctx, request)) is None or not ctx.jobs.cancel(job_id):
        return server_text(lang, "no_job")
    gr.Info(server_text(lang, "cancel_info"))
    return server_text(lang, "cancelling")


def resume_job(ctx: AppContext, browser, status_filter="all", request: gr.Request = None):
    """Resume clicked -> run the lines the job has not finished (ok lines are kept)."""
    lang = _lang(ctx, request)
    browser = _browser(browser)
    owner = _owner(ctx, request)
    if not browser.get("job_id"):
        raise _user_error(server_text(lang, "no_job"))
    _owned(ctx, browser["job_id"], owner, lang)
    try:
        ctx.jobs.resume(browser["job_id"])
    except TTSAppError as exc:
        raise _user_error(error_text(exc, lang)) from exc
    return (browser, *_view(ctx, browser, status_filter, lang, owner))


def run_job_blocking(ctx: AppContext, jsonl_file, audio_zip=None, default_voice=None, max_batch_size=None,
                     use_cache=True, greedy=None, seed=0, audio_format="wav", num_beams=None, length_penalty=None,
                     reference_cleanup=None, segment_context=None, take_check=None, prompt_cache=None, request: gr.Request = None):
    """API: submit a job and wait for it -> (summary text, results table, ZIP path). The job keeps running if
    the caller disconnects; ``/job_status`` with the id in the summary follows it. ``audio_format``,
    ``num_beams``, ``length_penalty`` and ``reference_cleanup`` as in ``submit_job_api``."""
    from tts_app.ui.handlers import _table

    lang = _lang(ctx, request)
    state = _submit(ctx, jsonl_file, audio_zip, default_voice,
                    _settings(ctx, max_batch_size, use_cache, greedy, seed, audio_format, lang, num_beams=num_beams,
                              length_penalty=length_penalty, reference_cleanup=reference_cleanup,
                              segment_context=segment_context, take_check=take_check, prompt_cache=prompt_cache),
                    _owner(ctx, request), lang)
    state = ctx.jobs.wait(state.job_id)
    records = ctx.jobs.results(state.job_id)
    rows = [[r["line"], r.get("output_name"), r.get("status"), localize_record(r, "error", lang) or "",
             r.get("duration_s")] for r in records]
    if state.status == "failed":
        raise _user_error(state.error or "the job failed")
    key = "job_cancelled" if state.num_cancelled else "job_summary"
    text = server_text(lang, key, ok=_num_ok(state), failed=state.num_failed, skipped=state.num_skipped,
                       cancelled=state.num_cancelled) + f" ({state.job_id})"
    found = ctx.jobs.results_zip(state.job_id)
    return text, _table(rows, lang, "col_results"), None if found is None else str(found)


def _public(state: JobState) -> dict:
    """What an API caller sees of a job: its state without the owner and server ids."""
    out = state.to_dict()
    out.pop("owner", None)
    out.pop("server_id", None)
    return out


def job_status(ctx: AppContext, job_id: str, request: gr.Request = None) -> dict:
    """API: a job's state (status, num_lines, num_done, num_ok, num_failed, num_cancelled, eta_s, batch_size,
    error, ...) as a dict; only for the job's owner (the browser, or API key, that submitted it).

    Raises:
        gr.Error: ``job_id`` is not a job id (a dict, an empty or malformed text: the message shows what came and
            what a job id looks like), no such job, or another owner's job."""
    return _public(_owned(ctx, job_id, _owner(ctx, request), _lang(ctx, request)))


def submit_job_api(ctx: AppContext, jsonl_file, audio_zip=None, default_voice=None, max_batch_size=None,
                   use_cache=True, greedy=None, seed=0, audio_format="wav", num_beams=None, length_penalty=None,
                   reference_cleanup=None, segment_context=None, take_check=None, prompt_cache=None, request: gr.Request = None) -> tuple[str, dict]:
    """API ``/submit_job``: start a job on the server -> (its id, its state as ``/job_status`` gives it), at once.
    Only ``jsonl_file`` is needed; the other inputs are the Batch tab's job settings (``audio_format``: the lines'
    format, "wav", "flac", "mp3" or "opus"; a line's ``format`` field overrides it; ``num_beams`` /
    ``length_penalty``: beam search, for a model that has it (IndexTTS 2); ``reference_cleanup``: "auto", "full"
    or "off" for the default voice and the lines' files; ``segment_context``; ``take_check``; ``prompt_cache``: the
    long-text prompt cache, for a model that has one, GLM-TTS, None = the model's default, not the KV cache). Follow the job with ``/job_status`` and fetch it with
    ``/job_results``."""
    lang = _lang(ctx, request)
    state = _submit(ctx, jsonl_file, audio_zip, default_voice,
                    _settings(ctx, max_batch_size, use_cache, greedy, seed, audio_format, lang, num_beams=num_beams,
                              length_penalty=length_penalty, reference_cleanup=reference_cleanup,
                              segment_context=segment_context, take_check=take_check, prompt_cache=prompt_cache),
                    _owner(ctx, request), lang)
    return state.job_id, _public(state)


def cancel_job_api(ctx: AppContext, job_id: str, request: gr.Request = None) -> dict:
    """API ``/cancel_job``: cancel the caller's job ``job_id`` -> its state (lines already running finish, the rest
    are recorded "cancelled"; a job that has ended is left as it is). Owner only."""
    state = _owned(ctx, job_id, _owner(ctx, request), _lang(ctx, request))
    ctx.jobs.cancel(state.job_id)
    return job_status(ctx, state.job_id, request)


def resume_job_api(ctx: AppContext, job_id: str, request: gr.Request = None) -> dict:
    """API ``/resume_job``: run again the lines job ``job_id`` has not finished (its ok lines are kept) -> its
    state. Owner only; a job that is running or done is refused in words."""
    lang = _lang(ctx, request)
    state = _owned(ctx, job_id, _owner(ctx, request), lang)
    try:
        ctx.jobs.resume(state.job_id)
    except TTSAppError as exc:
        raise _user_error(error_text(exc, lang)) from exc
    return job_status(ctx, state.job_id, request)


def job_results(ctx: AppContext, job_id: str, request: gr.Request = None) -> tuple[list[dict], str | None]:
    """API: a job's results.jsonl records (line order) and the path of its ZIP (None before the first record); only
    for the job's owner."""
    job_status(ctx, job_id, request)  # checks the id, that the job exists and is the caller's
    found = ctx.jobs.results_zip(job_id)
    return ctx.jobs.results(job_id), None if found is None else str(found)


# ----------------------------------------------------------------------------------------------------- layout


def write_template(folder: Path) -> Path:
    """The downloadable example job file (UTF-8 JSONL)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "template.jsonl"
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in TEMPLATE_LINES),
                    encoding="utf-8")
    return path


def build_batch_tab(ctx: AppContext, i18n, wrap, model_concurrency: dict, browser) -> dict:
    """The tab's components and events (call inside ``gr.Blocks`` / ``gr.Tab``). ``wrap`` binds ``ctx``;
    ``browser`` is the page's ``gr.BrowserState`` (created outside the tabs, so it is loaded with the page even
    before this tab is first drawn). Returns the keyword arguments of the event that reopens the browser's job
    (run it on page load and when the tab is selected)."""
    from tts_app.audio.formats import AUDIO_FORMATS
    from tts_app.ui.controls import generation_controls
    from tts_app.ui.texts import server_text as st

    lang = ctx.lang or "en"
    gr.Markdown(i18n("batch_intro"))
    with gr.Accordion(i18n("jsonl_help_title"), open=False):
        gr.Markdown(i18n("jsonl_help"), elem_id="jsonl-help")
        gr.DownloadButton(i18n("download_template"), value=str(write_template(ctx.output_root)),
                          elem_id="template", size="sm")
    with gr.Row():
        jsonl = gr.File(label=i18n("jsonl_file"), file_types=[".jsonl", ".json", ".txt"], type="filepath",
                        elem_id="jsonl")
        audio_zip = gr.File(label=i18n("audio_zip"), file_types=[".zip"], type="filepath", elem_id="audio-zip")
        default_voice = gr.Audio(label=i18n("default_voice"), sources=["upload"], type="filepath",
                                 elem_id="default-voice")
    with gr.Accordion(i18n("job_settings"), open=False):
        with gr.Row():
            job_batch = gr.Slider(1, 64, value=ctx.engine_config.max_batch_size, step=1,
                                  label=i18n("max_batch_size"), elem_id="job-batch")
            job_cache = gr.Checkbox(value=True, label=i18n("use_cache"), elem_id="job-cache")
            greedy_control = generation_controls(ctx.engine.facts if ctx.engine is not None else None)["greedy"]
            job_greedy = gr.Checkbox(value=bool(greedy_control.default), label=i18n("greedy"),
                                     visible=greedy_control.visible, elem_id="job-greedy")
            job_seed = gr.Number(value=0, precision=0, minimum=0, label=i18n("seed"), elem_id="job-seed")
            job_format = gr.Dropdown(choices=list(AUDIO_FORMATS), value="wav", label=i18n("audio_format"),
                                     elem_id="job-format")  # a line's own "format" field overrides it
        with gr.Row():  # a line's own fields override these; the beam knobs only for a model with beams
            job_controls = generation_controls(ctx.engine.facts if ctx.engine is not None else None)
            job_beams = [gr.Slider(c.minimum, c.maximum, value=c.default if c.default is not None else c.minimum,
                                   step=c.step, label=i18n(c.name), visible=c.visible,
                                   elem_id="job-" + c.name.replace("_", "-"))
                         for c in (job_controls["num_beams"], job_controls["length_penalty"])]
            job_cleanup = gr.Radio(choices=list(REFERENCE_CLEANUPS), value=DEFAULT_REFERENCE_CLEANUP,
                                   label=i18n("reference_cleanup"), elem_id="job-reference-cleanup")
            facts = ctx.engine.facts if ctx.engine is not None else None
            job_context = gr.Checkbox(value=False, label=i18n("segment_context"), elem_id="job-segment-context",
                                      visible=bool(facts is not None and facts.supports_segment_context))
            job_take_check = gr.Radio(choices=list(TAKE_CHECKS), value=DEFAULT_TAKE_CHECK, label=i18n("take_check"),
                                      elem_id="job-take-check")
            # the long-text prompt cache (GLM-TTS), not the KV cache: only for a model that has one
            job_prompt_cache = gr.Checkbox(value=bool(job_controls["prompt_cache"].default),
                                           label=i18n("prompt_cache"), visible=job_controls["prompt_cache"].visible,
                                           elem_id="job-prompt-cache")
    can_run = ctx.engine is not None
    with gr.Row():
        validate_btn = gr.Button(i18n("validate"), elem_id="validate")
        run_btn = gr.Button(i18n("run_job"), variant="primary", elem_id="run-job", interactive=can_run)
        cancel_btn = gr.Button(i18n("cancel_job"), variant="stop", elem_id="cancel-job", interactive=False)
        resume_btn = gr.Button(i18n("resume_job"), elem_id="resume-job", interactive=False)
    validation_summary = gr.Markdown(label=i18n("validation_summary"), elem_id="validation-summary")
    # headers in each browser's language: the value is made per page load (``empty_table``)
    validation = gr.Dataframe(value=wrap(_empty_validation), headers=st(lang, "col_validation").split("|"),
                              label=i18n("validation"), wrap=True, interactive=False, elem_id="validation")
    progress = gr.HTML(progress_html(None, lang), label=i18n("job_progress"), elem_id="job-progress")
    with gr.Row():
        recent = gr.Dropdown(label=i18n("recent_jobs"), choices=[], value=None, elem_id="recent-jobs", scale=3)
        job_id = gr.Textbox(label=i18n("job_id"), placeholder="20250101-120000-1a2b3c4d", elem_id="job-id", scale=2)
        open_btn = gr.Button(i18n("open_job"), elem_id="open-job", scale=1)
    status_filter = gr.Radio(choices=[(i18n("filter_" + f), f) for f in FILTERS], value="all",
                             label=i18n("show_lines"), elem_id="status-filter")
    results = gr.HTML(label=i18n("job_results"), elem_id="job-results")
    results_zip = gr.File(label=i18n("download_zip"), interactive=False, elem_id="results-zip", height=90,
                          elem_classes="download-box")
    shown = gr.State(None)
    timer = gr.Timer(1.0)
    # Hidden outputs of the blocking /run_job API (its callers read the summary and the table).
    api_summary = gr.Markdown(label=i18n("job_status"), visible=False)
    api_table = gr.Dataframe(headers=st(lang, "col_results").split("|"), label=i18n("job_results"), visible=False)
    api_run = gr.Button(visible=False)
    # The job API (scripts): ids in, ids and state dicts out (the page's events below are private: they carry the
    # browser's stored state and redraw the tab).
    api_job_id = gr.Textbox(label=i18n("job_id"), visible=False)
    api_job = gr.JSON(label=i18n("job_status"), visible=False)
    api_submit, api_cancel, api_resume = (gr.Button(visible=False) for _ in range(3))

    view = [progress, results, results_zip, run_btn, cancel_btn, resume_btn, recent]
    validate_btn.click(wrap(validate_job), [jsonl, audio_zip, default_voice], [validation, validation_summary],
                       api_name="validate_job", show_progress_on=[validation_summary])
    run_btn.click(wrap(submit_job), [jsonl, audio_zip, default_voice, job_batch, job_cache, job_greedy, job_seed,
                                     browser, status_filter, job_format, *job_beams, job_cleanup, job_context,
                                     job_take_check, job_prompt_cache],
                  [browser, job_id, *view],
                  api_name="page_submit_job", api_visibility="private", show_progress_on=[progress])
    cancel_btn.click(wrap(cancel_job), [browser], [validation_summary], api_name="page_cancel_job",
                     api_visibility="private", queue=False)
    resume_btn.click(wrap(resume_job), [browser, status_filter], [browser, *view], api_name="page_resume_job",
                     api_visibility="private", show_progress_on=[progress])
    api_submit.click(wrap(submit_job_api), [jsonl, audio_zip, default_voice, job_batch, job_cache, job_greedy,
                                            job_seed, job_format, *job_beams, job_cleanup, job_context,
                                            job_take_check, job_prompt_cache], [api_job_id, api_job],
                     api_name="submit_job")
    api_cancel.click(wrap(cancel_job_api), [api_job_id], [api_job], api_name="cancel_job", queue=False)
    api_resume.click(wrap(resume_job_api), [api_job_id], [api_job], api_name="resume_job")
    open_btn.click(wrap(open_job), [job_id, browser, status_filter], [browser, job_id, *view],
                   show_progress_on=[progress], api_visibility="private")
    recent.input(wrap(open_job), [recent, browser, status_filter], [browser, job_id, *view],
                 show_progress_on=[progress], api_visibility="private")
    status_filter.change(wrap(open_job), [job_id, browser, status_filter], [browser, job_id, *view],
                         show_progress="hidden", api_visibility="private")
    timer.tick(wrap(poll), [browser, status_filter, shown], [shown, *view], show_progress="hidden",
               api_visibility="private", queue=False)
    api_run.click(wrap(run_job_blocking), [jsonl, audio_zip, default_voice, job_batch, job_cache, job_greedy,
                                           job_seed, job_format, *job_beams, job_cleanup, job_context, job_take_check,
                                           job_prompt_cache],
                  [api_summary, api_table, results_zip],
                  api_name="run_job",
                  **model_concurrency)
    gr.api(wrap(job_status), api_name="job_status")
    gr.api(wrap(job_results), api_name="job_results")
    restore_event = dict(fn=wrap(restore), inputs=[browser, status_filter], outputs=[browser, job_id, *view],
                         show_progress="hidden", api_visibility="private")
    return restore_event


def browser_state():
    """The page's memory of the job on screen, in the browser's localStorage (whose jobs they are is the cookie's
    business, ``AppContext.owner``). Its secret is fixed so a restarted server can still read what the browser
    kept."""
    return gr.BrowserState({"job_id": ""}, storage_key="tts_app_batch", secret=BROWSER_SECRET)
