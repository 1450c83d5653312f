"""The Gradio layout: three tabs (single synthesis, JSONL batch — built in ``batch.py``, memory gauge) wired to
``handlers``.

Every event that touches the model shares ``concurrency_id="model"``; the engine batches what arrives together, so
the limit is generous (callers only wait on futures). Every action has a stable ``api_name`` for ``gradio_client``.
"""

from __future__ import annotations

import functools

import gradio as gr
from gradio.i18n import I18nData

from tts_app.config import DEFAULT_REFERENCE_CLEANUP, REFERENCE_CLEANUPS, public_model_id
from tts_app.quality.policy import DEFAULT_TAKE_CHECK, TAKE_CHECKS
from tts_app.monitor import MEMORY_SAMPLE_PERIOD_S
from tts_app.ui import batch, handlers
from tts_app.ui.audio import Audio  # gr.Audio without the ffmpeg program
from tts_app.ui import history as history_handlers
from tts_app.ui import voices as voice_handlers
from tts_app.ui.context import AppContext
from tts_app.ui.controls import Control, generation_controls
from tts_app.ui.ranges import defer_range_checks, range_error
from tts_app.ui.texts import SERVER, preview_colors, server_text, translations

MODEL_CONCURRENCY = dict(concurrency_id="model", concurrency_limit=32)

# Long text must not grow the preview without bound; empty download boxes stay small.
CSS = """
#preview { max-height: 260px; overflow-y: auto; }
.download-box { max-height: 150px; overflow: hidden; }
""" + batch.CSS


# Gradio's audio upload refuses a file that is not audio with its own English text listing a dozen MIME types
# ("Invalid file type: notes.txt. Only audio/aac,audio/midi,... allowed."), which it cannot translate. This page
# script rewrites that one toast (only when the list is of audio types) into the user's words and language. It also
# gives a Chinese page's pop-ups their titles in Chinese: gradio 6 writes the message type ("Error", "Warning",
# "Info") as the title whatever ``gr.Error(title=...)`` says, past its translations.
_NOT_AUDIO_JS = """() => {
  const lang = __LANG__ || (navigator.language || "en").toLowerCase();
  const say = (name) => lang.startsWith("zh")
    ? `“${name}”不是音频文件：请上传一段录音（WAV、MP3、FLAC、OGG 或 M4A）。`
    : `“${name}” is not an audio file: upload a recording (WAV, MP3, FLAC, OGG or M4A).`;
  const titles = lang.startsWith("zh") ? __ZH_TITLES__ : null;
  const fix = () => {
    document.querySelectorAll('[data-testid="toast-text"]').forEach((el) => {
      const m = /^Invalid file types?: (.+?)\\. Only (.*) allowed\\.$/s.exec(el.textContent.trim());
      if (m && m[2].includes("audio/")) el.textContent = say(m[1]);
    });
    if (titles) document.querySelectorAll('.toast-title').forEach((el) => {
      const node = [...el.childNodes].find((n) => n.nodeType === 3 && titles[n.nodeValue.trim()]);
      if (node) node.nodeValue = titles[node.nodeValue.trim()] + " ";
    });
  };
  new MutationObserver(fix).observe(document.body, {childList: true, subtree: true, characterData: true});
}"""


def page_js(lang: str | None) -> str:
    """The page script (``demo.launch(js=...)``): see ``_NOT_AUDIO_JS``; ``lang`` is --lang (None: the browser's)."""
    import json

    titles = {kind: SERVER["zh"][f"toast_{kind.lower()}"] for kind in ("Error", "Warning", "Info")}
    return (_NOT_AUDIO_JS.replace("__LANG__", "null" if lang is None else f'"{lang}"')
            .replace("__ZH_TITLES__", json.dumps(titles, ensure_ascii=False)))


def build_demo(ctx: AppContext) -> tuple[gr.Blocks, gr.I18n]:
    """Build the Blocks app for ``ctx``. Returns (demo, i18n) — pass i18n to ``demo.launch``."""
    i18n = gr.I18n(**translations(ctx.lang))
    facts = ctx.engine.facts if ctx.engine is not None else None

    limits = ctx.upload_config
    # delete_cache: gradio's copies of uploads (and files it served) older than cache_max_age_s are removed, so the
    # temp folder of finished or abandoned sessions does not grow without end.
    with _Blocks(title="tts_app", delete_cache=(limits.cache_check_every_s, limits.cache_max_age_s)) as demo:
        gr.Markdown(i18n("title"), elem_id="title")
        gr.Markdown(i18n("intro"))
        if ctx.load_error:
            gr.Markdown(f"### ⚠ {ctx.load_error}", elem_id="load-error")
        else:
            # one translated key per Markdown: gradio translates a string's leading i18n token only
            gr.Markdown(f"{i18n('model_status')}: `{public_model_id(ctx.model_config.model_id)}` · {facts.family} · "
                        f"{facts.sampling_rate} Hz", elem_id="model-status")
            gr.Markdown(f"{i18n('languages')}: {', '.join(facts.languages)}", elem_id="model-languages")

        with gr.Tab(i18n("tab_single"), id="single"):
            with gr.Row():
                with gr.Column():
                    voice = gr.Dropdown(choices=voice_handlers.voice_choices(ctx, ctx.lang or "en"),
                                        value=voice_handlers.UPLOAD, label=i18n("voice"), elem_id="voice",
                                        allow_custom_value=True)  # voices saved since the page loaded; API
                    ref_audio = Audio(label=i18n("reference_audio"), sources=["upload", "microphone"],
                                         type="filepath", elem_id="ref-audio")
                    needs_text = facts is not None and facts.needs_reference_text
                    ref_text = gr.Textbox(label=i18n("reference_text_required" if needs_text else "reference_text"),
                                          lines=1, elem_id="ref-text")
                    transcribe = gr.Button(i18n("transcribe"), size="sm", elem_id="transcribe")
                    reference_cleanup = gr.Radio(choices=list(REFERENCE_CLEANUPS), value=DEFAULT_REFERENCE_CLEANUP,
                                                 label=i18n("reference_cleanup"), elem_id="reference-cleanup")
                    take_check = gr.Radio(choices=list(TAKE_CHECKS), value=DEFAULT_TAKE_CHECK,
                                          label=i18n("take_check"), elem_id="take-check")
                    ref_report = gr.Markdown(label=i18n("reference_report"), elem_id="ref-report")
                    ref_clean = Audio(label=i18n("cleaned_reference"), interactive=False, elem_id="ref-clean")
                    with gr.Accordion(i18n("voice_library"), open=False, elem_id="voice-library"):
                        with gr.Row():
                            voice_name = gr.Textbox(label=i18n("voice_name"), lines=1, elem_id="voice-name")
                            save_voice = gr.Button(i18n("save_voice"), size="sm", elem_id="save-voice")
                        with gr.Row():
                            new_voice_name = gr.Textbox(label=i18n("new_voice_name"), lines=1,
                                                        elem_id="new-voice-name")
                            rename_voice = gr.Button(i18n("rename_voice"), size="sm", elem_id="rename-voice")
                            delete_voice = gr.Button(i18n("delete_voice"), size="sm", variant="stop",
                                                     elem_id="delete-voice")
                        voice_status = gr.Markdown(label=i18n("voice_status"), elem_id="voice-status")
                        delete_confirmed = gr.Checkbox(value=True, visible=False, label="confirmed")  # the page asks
                with gr.Column():
                    text = gr.Textbox(label=i18n("text"), placeholder=i18n("text_placeholder"), lines=5,
                                      elem_id="text")
                    # one legend needs one language: with --lang a legend; else each span's category in its
                    # page's language (handlers.pronunciation_preview)
                    preview = gr.HighlightedText(label=i18n("preview"), combine_adjacent=False,
                                                 color_map=preview_colors(ctx.lang),
                                                 show_legend=ctx.lang is not None,
                                                 elem_id="preview")
                    preview_notes = gr.Markdown(label=i18n("preview_warnings"), elem_id="preview-notes")
            controls = generation_controls(facts)
            with gr.Accordion(i18n("settings"), open=False, elem_id="settings"):
                gr.Markdown(i18n("settings_note"))
                with gr.Row():
                    seed = gr.Number(value=0, precision=0, minimum=0, label=i18n("seed"), elem_id="seed")
                    randomize = gr.Checkbox(value=False, label=i18n("randomize_seed"))
                    greedy = gr.Checkbox(value=bool(controls["greedy"].default), label=i18n("greedy"),
                                         visible=controls["greedy"].visible, elem_id="greedy")
                    use_cache = gr.Checkbox(value=True, label=i18n("use_cache"))
                    # long text in one voice (issue 29): only for a family that hears earlier segments as context
                    segment_context = gr.Checkbox(value=False, label=i18n("segment_context"),
                                                  visible=bool(facts is not None and facts.supports_segment_context),
                                                  elem_id="segment-context")
                    # the long-text prompt cache (GLM-TTS's use_cache): only for a family that has one; not the
                    # KV cache (the box before)
                    prompt_cache = gr.Checkbox(value=bool(controls["prompt_cache"].default),
                                               label=i18n("prompt_cache"), visible=controls["prompt_cache"].visible,
                                               elem_id="prompt-cache")
                with gr.Row():
                    knobs = {name: _control_widget(c, i18n) for name, c in controls.items()
                             if name in ("temperature", "top_p", "top_k", "cfg_scale")}
                with gr.Row():
                    knobs.update({name: _control_widget(c, i18n) for name, c in controls.items()
                                  if name in ("max_new_tokens", "max_segment_chars", "pause_between_segments_ms")})
                with gr.Row():  # IndexTTS 2's beam search and s2mel steps; hidden for families without them
                    knobs.update({name: _control_widget(c, i18n) for name, c in controls.items()
                                  if name in ("num_beams", "length_penalty", "num_diffusion_steps")})
                with gr.Row():
                    speed, duration_s, loudness, audio_format = _output_controls(i18n, "")
                    # dubbing cues: one target length per line of the text (handlers.segment_durations_from_text)
                    segment_durations = gr.Textbox(label=i18n("segment_durations_s"), lines=1,
                                                   placeholder="2.5, 1.8, 3", elem_id="segment-durations")
                with gr.Row():
                    # The operator's setting, for everyone: shown, not changed here (one user must not throttle
                    # or overload the server for all).
                    gr.Number(value=ctx.engine_config.max_batch_size, precision=0, interactive=False,
                              label=i18n("max_batch_size"), elem_id="max-batch-size")
                    reset = gr.Button(i18n("reset_defaults"), size="sm", elem_id="reset-defaults")
            emotion = _emotion_widgets(facts, i18n, ctx.lang)
            # Without a model nothing can be generated: the button waits, greyed out, under the banner's fix.
            with gr.Row():
                generate = gr.Button(i18n("generate"), variant="primary", elem_id="generate",
                                     interactive=ctx.engine is not None, scale=4)
                stop_single = gr.Button(i18n("stop"), variant="stop", elem_id="stop", scale=1)
            # The non-streaming /synthesize API (same inputs, the final files only); the button above streams.
            synthesize_api = gr.Button(visible=False)
            # Plays the speech while it is generated (chunks as the engine decodes them); the file is below. A
            # request with speed, a target duration or loudness does not stream (they need the whole clip).
            live_audio = Audio(label=i18n("live_audio"), streaming=True, autoplay=True, interactive=False,
                                  elem_id="live-audio")
            synthesis_outputs = _result_widgets(i18n, ctx.lang, audio="out-audio", seed="used-seed", srt="srt-file",
                                                metadata="metadata-file", timings="timings")
            out_audio, _, metadata_file, _, used_seed = synthesis_outputs
            # a text with chapters ("# 第一章" headings) also gets one audio file per chapter (handlers.chapter_files)
            chapters_box = gr.File(label=i18n("chapter_files"), file_count="multiple", interactive=False,
                                   visible=False, elem_id="chapter-files")
            # History: this browser's last generations (tts_app.history; "this browser" = its owner, AppContext.owner)
            history_state = gr.State([])
            history_box = gr.Accordion(i18n("history"), open=True, elem_id="history",
                                       visible=ctx.history_store.enabled)

        with gr.Tab(i18n("tab_dialogue"), id="dialogue"):
            gr.Markdown(i18n("dialogue_intro"))
            script = gr.Textbox(label=i18n("script"), lines=6, elem_id="script",
                                placeholder=i18n("script_placeholder"))
            speaker_voices, speaker_audios = [], []
            with gr.Row():
                for n in range(1, 5):
                    with gr.Column(min_width=160):
                        gr.Markdown(f"**{n}**")
                        speaker_voices.append(gr.Dropdown(
                            choices=voice_handlers.voice_choices(ctx, ctx.lang or "en"), value=voice_handlers.UPLOAD,
                            label=i18n("speaker_voice"), elem_id=f"speaker-voice-{n}", allow_custom_value=True))
                        speaker_audios.append(Audio(label=i18n("speaker_audio"), sources=["upload"],
                                                       type="filepath", elem_id=f"speaker-audio-{n}"))
            with gr.Row():
                d_seed = gr.Number(value=0, precision=0, minimum=0, label=i18n("seed"), elem_id="dialogue-seed")
                d_speed, d_duration, d_loudness, d_format = _output_controls(i18n, "dialogue-")
                d_cleanup = gr.Radio(choices=list(REFERENCE_CLEANUPS), value=DEFAULT_REFERENCE_CLEANUP,
                                     label=i18n("reference_cleanup"), elem_id="dialogue-reference-cleanup")
            with gr.Row():
                generate_dialogue = gr.Button(i18n("generate_dialogue"), variant="primary",
                                              elem_id="generate-dialogue", scale=4)
                stop_dialogue = gr.Button(i18n("stop"), variant="stop", elem_id="stop-dialogue", scale=1)
            dialogue_outputs = _result_widgets(i18n, ctx.lang, audio="dialogue-audio", seed=None, srt="dialogue-srt",
                                               metadata="dialogue-metadata", timings="dialogue-timings")

        jobs_browser = batch.browser_state()  # outside the tabs: loaded with the page, not when a tab is drawn
        with gr.Tab(i18n("tab_batch"), id="batch") as batch_tab:
            restore_jobs = batch.build_batch_tab(ctx, i18n, lambda fn: _wrap(fn, ctx), MODEL_CONCURRENCY,
                                                 jobs_browser)
        batch_tab.select(**restore_jobs)

        with gr.Tab(i18n("tab_memory"), id="memory"):
            gauge_md = gr.Markdown(label=i18n("memory_summary"), elem_id="gauge")
            gauge_plot = gr.LinePlot(x="seconds_ago", y="used_gib", color="event", label=i18n("memory_plot"),
                                     color_map={**{SERVER[code]["legend_ok"]: "#4c78a8" for code in SERVER},
                                                "OOM": "#e45756"}, elem_id="gauge-plot")
            timer = gr.Timer(MEMORY_SAMPLE_PERIOD_S)  # reads the history the app's one sampler feeds

        # --- events -------------------------------------------------------------------------------------------
        ref_audio.change(_wrap(handlers.reference_report, ctx), [ref_audio, ref_text, reference_cleanup],
                         [ref_clean, ref_report], api_name="reference_report", **MODEL_CONCURRENCY)
        reference_cleanup.change(_wrap(handlers.reference_report, ctx), [ref_audio, ref_text, reference_cleanup],
                                 [ref_clean, ref_report], api_visibility="private", **MODEL_CONCURRENCY)
        text.change(_wrap(handlers.pronunciation_preview, ctx), [text], [preview, preview_notes],
                    api_name="preview", trigger_mode="always_last", queue=False)
        knob_order = ["temperature", "top_p", "top_k", "cfg_scale", "max_new_tokens", "max_segment_chars",
                      "pause_between_segments_ms"]
        knob_widgets = [knobs[n] for n in knob_order]
        synthesis_inputs = [ref_audio, text, ref_text, seed, randomize, greedy, *knob_widgets, use_cache, *emotion,
                            voice, speed, duration_s, loudness, audio_format, segment_durations, reference_cleanup,
                            knobs["num_beams"], knobs["length_penalty"], segment_context, take_check,
                            knobs["num_diffusion_steps"], prompt_cache]  # newer inputs last: API order kept
        # history_handlers.remember's inputs: the sidecar written, the seed used, what was asked, then SETTINGS
        beam_widgets = [knobs["num_beams"], knobs["length_penalty"], knobs["num_diffusion_steps"]]
        remember_inputs = [metadata_file, used_seed, ref_audio, text, ref_text, voice, seed, greedy, *knob_widgets,
                           use_cache, speed, duration_s, loudness, audio_format, segment_durations, *beam_widgets,
                           segment_context, prompt_cache, *emotion]
        # Queued, as every event that sets history_state must be: gradio's unqueued route reports no changed
        # state, so the State's change (what re-draws the list below) would never fire.
        remember = dict(fn=_wrap(history_handlers.remember, ctx), inputs=remember_inputs, outputs=[history_state],
                        api_visibility="private")
        # history_handlers.rerun_values's outputs
        rerun_outputs = [ref_audio, text, ref_text, seed, randomize, voice, greedy, *knob_widgets, use_cache, speed,
                         duration_s, loudness, audio_format, segment_durations, *beam_widgets, segment_context,
                         prompt_cache, *emotion]
        # an empty text is refused by a first step without outputs: a pop-up, and the Output player keeps no
        # "Error" badge next to the previous result
        single_run = generate.click(_wrap(handlers.check_text_given, ctx), [text], None,
                                    api_visibility="private", show_progress="hidden").success(
            _wrap(handlers.synthesize_stream, ctx), synthesis_inputs, [live_audio, *synthesis_outputs],
            api_name="synthesize_stream", show_progress_on=[out_audio], **MODEL_CONCURRENCY)
        single_run.success(**remember)  # the page's generations go to its history, API calls do not
        show_chapters = dict(fn=_wrap(handlers.chapter_files, ctx), inputs=[metadata_file], outputs=[chapters_box],
                             api_visibility="private", queue=False, show_progress="hidden")
        single_run.success(**show_chapters)
        # Stop: the engine drops this session's request (its queued segments and its rows in the running batch;
        # handlers.RUNNING also covers a history Re-run), and gradio ends the event on the page.
        stop_single.click(_stop_fn(ctx, "single"), None, None, cancels=[single_run], queue=False,
                          api_visibility="private")
        synthesize_api.click(_wrap(handlers.synthesize, ctx), synthesis_inputs, synthesis_outputs,
                             api_name="synthesize", show_progress_on=[out_audio],
                             **MODEL_CONCURRENCY)  # progress and errors in one place
        demo.load(_wrap(history_handlers.list_history, ctx), None, [history_state], api_visibility="private")

        history_defaults = history_handlers.page_defaults(ctx)
        # the browser's time zone (an IANA name), so the history shows its local times
        time_zone = gr.Textbox(visible=False)
        demo.load(None, None, [time_zone], js="() => Intl.DateTimeFormat().resolvedOptions().timeZone || ''")
        with history_box:
            @gr.render(inputs=[history_state, time_zone])
            def _history(entries, zone, request: gr.Request):
                lang = handlers._lang(ctx, request)
                if not entries:
                    gr.Markdown(server_text(lang, "history_empty"), elem_id="history-empty")
                for i, entry in enumerate(entries):
                    with gr.Row(elem_classes="history-entry"):
                        Audio(entry["audio"], type="filepath", interactive=False, show_label=False,
                                 elem_id=f"history-audio-{i}", scale=1)
                        gr.Markdown(history_handlers.entry_summary(entry, lang, history_defaults, zone),
                                    elem_id=f"history-text-{i}", scale=3)
                        rerun = gr.Button(i18n("rerun"), size="sm", elem_id=f"history-rerun-{i}", scale=0)
                    rerun.click(_rerun_fn(ctx, entry["entry_id"]), None, rerun_outputs, queue=False,
                                api_visibility="private").success(
                        _wrap(handlers.synthesize_stream, ctx), synthesis_inputs, [live_audio, *synthesis_outputs],
                        api_visibility="private", show_progress_on=[out_audio], **MODEL_CONCURRENCY
                    ).success(**remember).success(**show_chapters)

        dialogue_run = generate_dialogue.click(
            _wrap(handlers.synthesize_dialogue, ctx),
            [script, *speaker_voices, *speaker_audios, d_seed, d_speed, d_duration, d_loudness, d_format, d_cleanup],
            dialogue_outputs, api_name="synthesize_dialogue", show_progress_on=[dialogue_outputs[0]],
            **MODEL_CONCURRENCY)
        stop_dialogue.click(_stop_fn(ctx, "dialogue"), None, None, cancels=[dialogue_run], queue=False,
                            api_visibility="private")
        transcribe.click(_wrap(voice_handlers.transcribe_reference, ctx), [ref_audio, voice], [ref_text],
                         api_name="transcribe", **MODEL_CONCURRENCY)
        # --- voice library
        ref_audio.upload(lambda: voice_handlers.UPLOAD, None, [voice], queue=False, api_visibility="private")
        voice.input(_wrap(voice_handlers.select_voice, ctx), [voice, ref_text], [ref_text, ref_clean, ref_report],
                    api_visibility="private", **MODEL_CONCURRENCY)
        # A refusal is a toast and a line in the library's status box, never a status badge over the Voice
        # dropdown (gradio draws an event's "Error" over its output boxes; a badge there would hide the dropdown).
        library_event = dict(show_progress_on=[voice_status])
        save_voice.click(_wrap(voice_handlers.save_voice, ctx), [ref_audio, ref_text, voice_name, reference_cleanup],
                         [voice, voice_status], api_name="save_voice", **library_event, **MODEL_CONCURRENCY)
        rename_voice.click(_wrap(voice_handlers.rename_voice, ctx), [voice, new_voice_name], [voice, voice_status],
                           api_name="rename_voice", queue=False, **library_event)
        delete_voice.click(_wrap(voice_handlers.delete_voice, ctx), [voice, delete_confirmed], [voice, voice_status],
                           api_name="delete_voice", queue=False, js=voice_handlers.confirm_delete_js(ctx.lang),
                           **library_event)  # the browser asks "Delete the voice ...?" first
        gr.api(_wrap(voice_handlers.list_voices, ctx), api_name="list_voices", queue=False)
        for dropdown in (voice, *speaker_voices):
            demo.load(_wrap(voice_handlers.refresh_voices, ctx), None, [dropdown], queue=False,
                      api_visibility="private")
        reset_order = [*knob_order, "num_beams", "length_penalty", "num_diffusion_steps"]
        reset.click(lambda: [bool(controls["greedy"].default), bool(controls["prompt_cache"].default)]
                    + [controls[n].default for n in reset_order], None,
                    [greedy, prompt_cache] + [knobs[n] for n in reset_order], queue=False, api_visibility="private")
        timer.tick(_wrap(handlers.gauge, ctx), None, [gauge_md, gauge_plot], api_name="memory", queue=False,
                   show_progress="hidden")
        demo.load(_wrap(handlers.gauge, ctx), None, [gauge_md, gauge_plot], queue=False, show_progress="hidden",
                  api_visibility="private")  # the same as /memory
        demo.load(**restore_jobs)  # a reloaded page reopens its job, with live progress

        def end_session(request: gr.Request) -> None:  # the tab closed: its single-synthesis outputs go
            ctx.end_session(getattr(request, "session_hash", None), handlers._headers(request))

        demo.unload(end_session)
    defer_range_checks(demo)  # out-of-range numbers refused by _wrap in the caller's language
    return demo, i18n


def _result_widgets(i18n: gr.I18n, lang: str | None, *, audio: str, seed: str | None, srt: str, metadata: str,
                    timings: str) -> list:
    """A tab's result widgets, ``[audio, subtitles, metadata, segments table, seed used]`` (the order the
    synthesis handlers return them), with these elem ids. The audio is a WAV file path: the player gets the file's
    own 16-bit samples (its download button saves it)."""
    with gr.Row():
        out_audio = Audio(label=i18n("output_audio"), type="filepath", interactive=False, elem_id=audio)
        used_seed = gr.Number(value=None, label=i18n("used_seed"), interactive=False, elem_id=seed)
    with gr.Row():
        srt_file = gr.File(label=i18n("download_srt"), interactive=False, height=90, elem_classes="download-box",
                           elem_id=srt)
        metadata_file = gr.File(label=i18n("download_metadata"), interactive=False, height=90,
                                elem_classes="download-box", elem_id=metadata)
    def empty_timings(request: gr.Request = None):  # headers in the page's language, made per page load
        from tts_app.ui.texts import empty_table, pick_language

        return empty_table(pick_language(lang, (getattr(request, "headers", None) or {}).get("accept-language")),
                           "col_timings")

    table = gr.Dataframe(value=empty_timings, headers=server_text(lang or "en", "col_timings").split("|"),
                         label=i18n("timings"), interactive=False, elem_id=timings)
    return [out_audio, srt_file, metadata_file, table, used_seed]


def _output_controls(i18n: gr.I18n, prefix: str):
    """Speed, target duration, loudness and format widgets (``handlers.tempo_params`` reads them)."""
    from tts_app.config import MAX_SPEED, MIN_SPEED

    speed = gr.Slider(MIN_SPEED, MAX_SPEED, value=1.0, step=0.05, label=i18n("speed"), elem_id=f"{prefix}speed")
    duration_s = gr.Number(value=0, minimum=0, label=i18n("duration_s"), elem_id=f"{prefix}duration-s")
    loudness = gr.Number(value=0, maximum=0, label=i18n("loudness_lufs"), elem_id=f"{prefix}loudness")
    audio_format = gr.Dropdown(choices=list(handlers.AUDIO_FORMATS), value="wav", label=i18n("audio_format"),
                               elem_id=f"{prefix}audio-format")
    return speed, duration_s, loudness, audio_format


def _rerun_fn(ctx: AppContext, entry_id: str):
    """The "Re-run" handler of one history entry (``history.rerun_values`` for ``entry_id``)."""

    def rerun(request: gr.Request = None):
        return history_handlers.rerun_values(ctx, entry_id, request)

    return rerun


def _stop_fn(ctx: AppContext, kind: str):
    """The Stop button of tab ``kind`` (``handlers.stop_generation``)."""

    def stop(request: gr.Request = None):
        return handlers.stop_generation(ctx, kind, request)

    return stop


def _wrap(fn, ctx: AppContext):
    """Bind ``ctx`` as the first argument while keeping ``fn``'s signature (minus ctx) visible to gradio, so that
    ``gr.Progress`` / ``gr.Request`` parameters are injected and the API shows the right inputs. A number outside
    its widget's range is refused before ``fn`` runs, naming the parameter (``tts_app.ui.ranges``)."""
    import inspect

    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[1:]
    names = [p.name for p in params]

    def check_ranges(args, kwargs) -> None:  # a number outside its widget's range (tts_app.ui.ranges)
        request = next((a for a in (*args, *kwargs.values()) if isinstance(a, gr.Request)), None)
        refusal = range_error(names, args, kwargs, handlers._lang(ctx, request))
        if refusal is not None:
            raise refusal

    if inspect.isgeneratorfunction(fn):  # gradio streams a handler's yields only when it sees a generator
        @functools.wraps(fn)
        def bound(*args, **kwargs):
            check_ranges(args, kwargs)
            yield from fn(ctx, *args, **kwargs)
    else:
        @functools.wraps(fn)
        def bound(*args, **kwargs):
            check_ranges(args, kwargs)
            return fn(ctx, *args, **kwargs)

    bound.__signature__ = sig.replace(parameters=params)
    del bound.__wrapped__
    return bound


def _emotion_widgets(facts, i18n: gr.I18n, lang: str | None) -> list:
    """The emotion controls (``tts_app.ui.emotion``): source, clip, one slider per emotion, weight, text - in the
    order ``handlers.synthesize`` takes them. Always built, so the API is the same for every model; shown only for
    a model with emotion control. For a model without it the hidden source choice still lists every
    ``EMOTION_MODES`` value, so an API call asking for one reaches ``emotion_from_controls`` and gets its message
    ("... has no emotion control") instead of gradio's bare choice check."""
    from tts_app.request import EMOTION_NAMES
    from tts_app.ui.emotion import DEFAULT_EMOTION_WEIGHT, EMOTION_MODES, emotion_inputs_shown, emotion_modes

    modes = emotion_modes(facts)
    shown = len(modes) > 1
    start = emotion_inputs_shown("none")  # only the chosen source's inputs are shown (mode.change below)
    with gr.Accordion(i18n("emotion"), open=False, visible=shown, elem_id="emotion"):
        gr.Markdown(i18n("emotion_note"))
        mode = gr.Radio([(i18n(f"emo_mode_{m}"), m) for m in (modes if shown else EMOTION_MODES)],
                        value="none", label=i18n("emotion_mode"), elem_id="emotion-mode")
        with gr.Row():
            clip = Audio(label=i18n("emotion_audio"), sources=["upload", "microphone"], type="filepath",
                         elem_id="emotion-audio", visible=start["clip"])
            with gr.Column():
                weight = gr.Slider(0.0, 1.0, value=DEFAULT_EMOTION_WEIGHT, step=0.05, label=i18n("emotion_weight"),
                                   elem_id="emotion-weight", visible=start["weight"])
                text = gr.Textbox(label=i18n("emotion_text"), lines=1, elem_id="emotion-text",
                                  visible=start["text"])
        with gr.Row(visible=start["vector"]) as vector_row:
            sliders = [gr.Slider(0.0, 1.0, value=0.0, step=0.05, label=i18n(f"emo_{name}"), elem_id=f"emo-{name}")
                       for name in EMOTION_NAMES]

    def show_inputs(chosen):
        visible = emotion_inputs_shown(chosen)
        return [gr.update(visible=visible[name]) for name in ("clip", "vector", "text", "weight")]

    mode.change(show_inputs, [mode], [clip, vector_row, text, weight], queue=False, api_visibility="private",
                show_progress="hidden")
    return [mode, clip, *sliders, weight, text]


def _control_widget(control: Control, i18n: gr.I18n):
    """A slider for one generation control, starting at the model's default; hidden when the family lacks it."""
    value = control.default if control.default is not None else control.minimum  # hidden: never sent
    return gr.Slider(control.minimum, control.maximum, value=value, step=control.step, label=i18n(control.name),
                     visible=control.visible, elem_id=control.name.replace("_", "-"))


#: API names of outputs whose interface text key reads badly as a name
API_NAMES = {"output_audio": "audio", "download_srt": "subtitles", "download_metadata": "metadata",
             "timings": "segments", "live_audio": "live_audio", "preview_warnings": "notes",
             "reference_report": "report",
             "cleaned_reference": "cleaned_reference", "memory_summary": "summary", "memory_plot": "plot",
             "job_results": "results", "download_zip": "zip", "validation": "validation", "voice": "voice",
             "voice_status": "status", "speed": "speed", "duration_s": "duration_s", "loudness_lufs": "loudness_lufs",
             "audio_format": "audio_format", "segment_durations_s": "segment_durations_s", "script": "script",
             "reference_text": "reference_text",
             "validation_summary": "summary", "job_progress": "progress", "job_status": "summary"}


class _Blocks(gr.Blocks):
    """``gr.Blocks`` whose API description names values after their interface text key (``API_NAMES``), not the
    translation record gradio puts there for ``gr.I18n`` labels (an ``I18nData``, sent as ``{"key": ...,
    "_type": "translation_metadata"}``, which ``gradio_client.view_api`` prints as "key")."""

    def get_api_info(self, *args, **kwargs):
        info = super().get_api_info(*args, **kwargs)
        for name, labels in batch.API_RETURNS.items():  # gr.api endpoints: name their returned values too
            for item, label in zip((info or {}).get("named_endpoints", {}).get(name, {}).get("returns", []), labels):
                item["label"] = label
        for endpoint in (info or {}).get("named_endpoints", {}).values():
            for item in endpoint.get("parameters", []) + endpoint.get("returns", []):
                label = item.get("label")
                key = label.get("key") if isinstance(label, dict) else label.key if isinstance(label, I18nData) \
                    else None
                if isinstance(key, str):
                    item["label"] = API_NAMES.get(key, key)
        return info
