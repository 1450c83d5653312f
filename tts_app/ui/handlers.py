"""Thin Gradio handlers: turn widget values into engine / front-end / job calls and results back into widget values.

Every handler returns the same outputs on every path; user errors become ``gr.Error`` (stops the event, shows a
modal) and notices become ``gr.Warning`` / ``gr.Info``. Heavy work happens in the engine's worker thread; a handler
only waits on a future, so many users' requests are batched together.
"""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path

import gradio as gr
import numpy as np

from tts_app.errors import TTSAppError
from tts_app.monitor import GIB, read_memory
from tts_app.request import Priority, SynthesisParams, SynthesisRequest
from tts_app.ui.context import AppContext

log = logging.getLogger(__name__)

MAX_SEED = 2**31 - 1


def _engine(ctx: AppContext):
    if ctx.engine is None:
        raise gr.Error(ctx.load_error or "no model is loaded; start the app with --model DIR")
    return ctx.engine


# Rate used to check a reference when no model is loaded (the quality report does not depend on it).
REPORT_SAMPLING_RATE = 24000


def _reference(ctx: AppContext, audio_path: str | None, reference_text: str | None):
    """(ReferenceAudio, report) for an uploaded/recorded file, through the shared cache. Works without a model
    (the clip is then cleaned at ``REPORT_SAMPLING_RATE``)."""
    from tts_app.audio.reference import prepare_reference

    if not audio_path:
        raise gr.Error("Upload or record a reference audio clip first (a few seconds of the voice to clone).")
    rate = ctx.engine.sampling_rate if ctx.engine is not None else REPORT_SAMPLING_RATE
    try:
        return prepare_reference(audio_path, target_sampling_rate=rate,
                                 config=ctx.reference_config, reference_text=reference_text or None,
                                 cache=ctx.reference_cache, name=Path(audio_path).name)
    except TTSAppError as exc:
        raise gr.Error(_hide_paths(str(exc), ctx, audio_path)) from exc


REPORT_FIELDS = (  # (report key, label, unit) shown in the UI; the CLI's --json has everything
    ("format", "format", ""), ("sampling_rate", "sampling rate", "Hz"), ("channels", "channels", ""),
    ("duration_s", "duration", "s"), ("speech_start_s", "speech starts", "s"), ("speech_end_s", "speech ends", "s"),
    ("speech_kept_s", "speech kept", "s"), ("snr_db", "estimated SNR", "dB"), ("clipping_share", "clipped share", ""),
    ("speech_level_dbfs", "speech level", "dBFS"), ("cropped", "cropped", ""),
)


def _hide_paths(message: str, ctx: AppContext, *uploads: str | None) -> str:
    """Server folders mean nothing to a browser user (and reveal the server's layout): replace the upload and
    output folders in a message by short names."""
    import tempfile

    replacements = [(str(ctx.output_root), "<outputs>")]
    for upload in uploads:
        if upload:
            replacements.append((str(Path(upload).parent), "<your upload>"))
    replacements.append((tempfile.gettempdir(), "<server temp>"))
    for folder, name in replacements:
        message = message.replace(folder, name)
    return message


def _report_markdown(report) -> str:
    d = report.to_dict()
    cells = []
    for key, label, unit in REPORT_FIELDS:
        if key not in d or d[key] is None:
            continue
        value = d[key]
        value = f"{value:.2f}" if isinstance(value, float) else str(value)
        cells.append(f"{label}: **{value}**{' ' + unit if unit else ''}")
    lines = [" · ".join(cells)]
    lines += [f"- ⚠️ {w}" for w in d.get("warnings", [])]
    lines += [f"- ❌ {e}" for e in d.get("errors", [])]
    if not d.get("warnings") and not d.get("errors"):
        lines.append("- ✅ no problems found")
    return "\n".join(lines)


def reference_report(ctx: AppContext, audio_path: str | None, reference_text: str | None):
    """Reference uploaded -> (cleaned clip for listening, quality report markdown)."""
    if not audio_path:
        return None, ""
    ref, report = _reference(ctx, audio_path, reference_text)
    for w in report.warnings:
        gr.Warning(w)
    return (ref.sampling_rate, ref.samples), _report_markdown(report)


def pronunciation_preview(ctx: AppContext, text: str):
    """Text typed -> (highlighted characters: polyphones / overrides labelled, warnings markdown)."""
    from tts_app.frontend import preview_pronunciation

    if not text or not text.strip():
        return [], ""
    preview = preview_pronunciation(text)
    by_pos = {r.position: r for r in preview.readings}
    spans: list[tuple[str, str | None]] = []
    for i, ch in enumerate(preview.text):
        r = by_pos.get(i)
        if r is None:
            spans.append((ch, None))
        elif r.source == "override":
            spans.append((f"{ch}({r.pinyin})", "override"))
        elif r.polyphonic:
            spans.append((f"{ch}({r.pinyin})", "polyphone"))
        else:
            spans.append((ch, None))
    warnings = "\n".join(f"- ⚠️ {w}" for w in preview.warnings)
    return spans, warnings


def _params(engine, *, use_cache, max_new_tokens, greedy, temperature, top_p, top_k, cfg_scale, seed,
            segment_chars, pause_ms) -> SynthesisParams:
    facts = engine.facts
    try:
        return SynthesisParams(
            seed=int(seed), greedy=bool(greedy), temperature=float(temperature) if not greedy else None,
            top_p=float(top_p) if not greedy else None,
            top_k=int(top_k) if (not greedy and facts.has_top_k and top_k) else None,
            cfg_scale=float(cfg_scale) if facts.has_cfg else None,
            max_new_tokens=int(max_new_tokens) or None, use_cache=bool(use_cache),
            max_segment_chars=int(segment_chars) or None, pause_between_segments_ms=int(pause_ms))
    except TTSAppError as exc:
        raise gr.Error(str(exc)) from exc


def synthesize(ctx: AppContext, audio_path, reference_text, text, max_batch_size, use_cache, max_new_tokens, greedy,
               temperature, top_p, top_k, cfg_scale, seed, randomize_seed, segment_chars, pause_ms,
               progress=gr.Progress()):
    """Generate -> (audio, WAV path, SRT path, per-segment rows, used seed)."""
    from tts_app.audio.post import to_srt, write_atomic, write_wav_atomic

    engine = _engine(ctx)
    if not text or not text.strip():
        raise gr.Error("Type some text to speak.")
    seed = random.randint(0, MAX_SEED) if randomize_seed else int(seed)
    ref, report = _reference(ctx, audio_path, reference_text)
    for w in report.warnings:
        gr.Warning(w)
    if max_batch_size:
        engine.set_max_batch_size(int(max_batch_size))
    params = _params(engine, use_cache=use_cache, max_new_tokens=max_new_tokens, greedy=greedy,
                     temperature=temperature, top_p=top_p, top_k=top_k, cfg_scale=cfg_scale, seed=seed,
                     segment_chars=segment_chars, pause_ms=pause_ms)
    request = SynthesisRequest(text=text, reference_audio=ref, reference_text=reference_text or None, params=params,
                               priority=Priority.INTERACTIVE)
    state = {"done": 0, "total": 1}

    def on_progress(event):  # engine worker thread: only store numbers
        state["done"], state["total"] = event.segments_done, event.segments_total

    handle = engine.submit(request, on_progress=on_progress)
    progress(0.0, desc="queued")
    while True:
        try:
            result = handle.result(timeout=0.25)
            break
        except TimeoutError:
            progress(state["done"] / max(state["total"], 1),
                     desc=f"segment {state['done']}/{state['total']}")
    if not result.ok:
        raise gr.Error(f"Synthesis failed: {result.error}")
    if result.audio.size == 0:
        raise gr.Error("The model produced no audio for this text (it ended speech at once). Try another seed, "
                       "sampling instead of greedy decoding, or a larger max new tokens.")
    for w in result.warnings:
        gr.Warning(w)
    out_dir = ctx.output_root / "single"
    stem = f"{time.strftime('%Y%m%d-%H%M%S')}_{result.request_id}"
    wav_path = write_wav_atomic(out_dir / f"{stem}.wav", result.audio, result.sampling_rate)
    srt = to_srt([s.text for s in result.segments], [(s.start_s, s.end_s) for s in result.segments])
    srt_path = write_atomic(out_dir / f"{stem}.srt", srt.encode("utf-8"))
    rows = [[s.index + 1, s.text, round(s.start_s, 2), round(s.end_s, 2), s.batch_size, round(s.generate_s, 2)]
            for s in result.segments]
    return ((result.sampling_rate, result.audio.astype(np.float32)), str(wav_path), str(srt_path), rows, seed)


def _session(request: gr.Request | None) -> str:
    return getattr(request, "session_hash", None) or "anonymous"


def validate_job(ctx: AppContext, jsonl_file, audio_zip, default_voice=None):
    """JSONL (+ZIP) uploaded -> validation table rows [line, status, message]. Loads no model."""
    from tts_app.jobs.runner import validate_job as _validate

    if not jsonl_file:
        raise gr.Error("Upload a JSONL task file first.")
    try:
        report = _validate(Path(jsonl_file), audio_dir=audio_zip or None, default_voice=default_voice or None)
    except TTSAppError as exc:
        raise gr.Error(_hide_paths(str(exc), ctx, jsonl_file, audio_zip)) from exc
    # Line 0 is the job file as a whole (encoding, audio ZIP, default voice).
    return [[line if line else "job file", status, _hide_paths(str(message), ctx, jsonl_file, audio_zip)]
            for line, status, message in report.as_table()]


def run_job(ctx: AppContext, jsonl_file, audio_zip, default_voice, max_batch_size, use_cache, greedy, seed,
            request: gr.Request = None, progress=gr.Progress()):
    """Run a JSONL job -> (summary text, results rows [line, output_name, status, error, duration_s], ZIP path).

    Lines are streamed to the shared engine, so several users' jobs (and single requests) share batches."""
    from tts_app.jobs.runner import make_results_zip, read_results
    from tts_app.jobs.runner import run_job as _run

    engine = _engine(ctx)
    if not jsonl_file:
        raise gr.Error("Upload a JSONL task file first.")
    cancel = ctx.cancel_event(_session(request))
    cancel.clear()
    if max_batch_size:
        engine.set_max_batch_size(int(max_batch_size))
    out_dir = ctx.output_root / "jobs" / f"{time.strftime('%Y%m%d-%H%M%S')}_{_session(request)[:8]}"

    def on_progress(done, total, info=None):
        progress(done / max(total, 1), desc=f"lines {done}/{total} · batch cap {engine.stats().batch_cap}")

    session = _session(request)
    ctx.running_jobs.add(session)
    try:
        params = SynthesisParams(seed=int(seed), greedy=bool(greedy), use_cache=bool(use_cache))
        summary = _run(Path(jsonl_file), out_dir, engine, audio_dir=audio_zip or None, progress=on_progress,
                       cancel_event=cancel, params=params, reference_config=ctx.reference_config,
                       default_voice=default_voice or None)
    except TTSAppError as exc:
        raise gr.Error(_hide_paths(str(exc), ctx, jsonl_file, audio_zip)) from exc
    finally:
        ctx.running_jobs.discard(session)
    records = read_results(out_dir)
    rows = [[n, r.get("output_name"), r.get("status"), _hide_paths(r.get("error") or "", ctx, jsonl_file, audio_zip),
             r.get("duration_s")]
            for n, r in sorted(records.items())]
    if summary.num_failed:
        gr.Warning(f"{summary.num_failed} line(s) failed; see the results table.")
    text = (f"ok {summary.num_ok} · failed {summary.num_failed} · skipped {summary.num_skipped}"
            + (f" · cancelled {summary.num_cancelled}" if summary.num_cancelled else ""))
    return text, rows, str(make_results_zip(out_dir))


def cancel_job(ctx: AppContext, request: gr.Request = None):
    """Cancel this browser session's running job (other users' jobs are untouched)."""
    session = _session(request)
    if session not in ctx.running_jobs:
        return "no job of yours is running"
    ctx.cancel_event(session).set()
    gr.Info("Cancelling: lines already running finish, the rest are skipped.")
    return "cancelling…"


def gauge(ctx: AppContext):
    """Timer tick -> (summary markdown, plot rows). Reads memory, records it, and marks new OOM events."""
    import pandas as pd

    device = "cpu"
    stats = None
    if ctx.engine is not None:
        stats = ctx.engine.stats()
        device = stats.device
        if stats.num_oom > ctx._last_oom_count:
            for _ in range(stats.num_oom - ctx._last_oom_count):
                ctx.history.add_oom()
            ctx._last_oom_count = stats.num_oom
    reading = read_memory(device)
    ctx.history.add(reading)
    what = "system RAM (CPU run: no GPU)" if reading.is_cpu else "GPU memory"
    lines = [f"**{reading.device_name}** ({reading.device}) — {what}",
             f"- total {reading.total_bytes / GIB:.2f} GiB · used {reading.used_bytes / GIB:.3f} GiB · "
             f"free {reading.free_bytes / GIB:.3f} GiB",
             (f"- process RSS {reading.torch_allocated_bytes / GIB:.3f} GiB · peak {reading.torch_peak_bytes / GIB:.3f} GiB"
              if reading.is_cpu else
              f"- torch allocated {reading.torch_allocated_bytes / GIB:.2f} GiB · reserved "
              f"{reading.torch_reserved_bytes / GIB:.2f} GiB · peak {reading.torch_peak_bytes / GIB:.2f} GiB")]
    if reading.utilization_percent is not None:
        lines.append(f"- utilisation {reading.utilization_percent:.0f} %")
    if stats is not None:
        budget = "unlimited" if stats.memory_budget_bytes is None else f"{stats.memory_budget_bytes / GIB:.2f} GiB"
        lines += [f"- engine budget {budget} · batch cap {stats.batch_cap} / {stats.max_batch_size} · "
                  f"OOM count {stats.num_oom} · queue depth {stats.queue_depth} segments",
                  f"- KV-cache + activations estimate per row (default settings): "
                  f"{stats.default_row_bytes / 1024**2:.1f} MiB"]
        ooms = ctx.history.oom_times()
        if ooms:
            lines.append(f"- 🔴 {len(ooms)} out-of-memory event(s) in the plotted window, the last "
                         f"{reading.time_s - ooms[-1]:.0f} s ago (batch halved and retried; nothing lost)")
    else:
        lines.append(f"- no model loaded: {ctx.load_error}")
    frame = pd.DataFrame(ctx.history.rows() or [{"seconds_ago": 0.0, "used_gib": 0.0, "torch_gib": 0.0,
                                                  "event": "ok"}])
    return "\n".join(lines), frame
