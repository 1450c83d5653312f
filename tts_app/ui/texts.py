"""Interface text in English and Chinese, for gradio's ``gr.I18n`` (the browser's language picks one; ``--lang``
forces one). Keys are stable identifiers; values are what the user reads."""

from __future__ import annotations

EN: dict[str, str] = {
    "title": "# tts_app — voice-cloning text to speech",
    "intro": "Upload a few seconds of a voice, type Chinese or English text, and get speech in that voice.",
    "tab_single": "Single synthesis",
    "tab_batch": "Batch (JSONL)",
    "tab_memory": "Memory",
    "reference_audio": "Reference audio (upload or record)",
    "reference_report": "Reference quality report",
    "cleaned_reference": "Cleaned reference (what the model hears)",
    "reference_text": "Reference text (transcript of the reference, optional)",
    "reference_text_required": "Reference text (transcript of the reference — required by this model)",
    "text": "Text to speak",
    "text_placeholder": "Type text. Fix a polyphone with pinyin: 重(zhòng)要, 银行(yin2 hang2). Pause: [pause:500ms]",
    "preview": "Pronunciation preview (polyphones highlighted)",
    "preview_warnings": "Front-end notes",
    "settings": "Settings",
    "max_batch_size": "Max batch size (server-wide, set by the operator: --max-batch-size)",
    "use_cache": "KV cache (faster; same output on or off)",
    "segment_context": "Segment context: each segment hears the earlier ones (long text in one voice; segments run "
                       "one after another)",
    "prompt_cache": "Prompt cache (long text: earlier segments join the next prompt; not the KV cache)",
    "max_new_tokens": "Max new tokens per segment",
    "greedy": "Greedy decoding (deterministic)",
    "temperature": "Temperature",
    "top_p": "Top-p",
    "top_k": "Top-k",
    "cfg_scale": "CFG scale",
    "num_beams": "Beams (1 = no beam search)",
    "length_penalty": "Beam length penalty",
    "num_diffusion_steps": "Diffusion steps (IndexTTS 2: 25; 12 = fast preset, a slightly coarser sound)",
    "seed": "Seed",
    "randomize_seed": "Randomize seed",
    "max_segment_chars": "Max characters per segment (0 = the model's own)",
    "reference_cleanup": "Reference cleanup: auto = only what the model's own tool does (mono, resample; checks "
                         "and report); full = trim, filter, level; off = as uploaded, no checks",
    "pause_between_segments_ms": "Pause between segments (ms)",
    "take_check": "Check every take: score = transcribe each segment and score it (CER/WER, voice similarity, "
                  "silence, clipping), shown in the segments table; reroll = also generate a segment below the "
                  "thresholds again with a new seed and keep the best take (slower); off = no checks",
    "settings_note": "Every setting starts at the loaded model's own default (from its generation config); a "
                     "setting left at its default runs exactly as the command line and JSONL jobs do. The text is "
                     "spoken in as few segments as the model takes (the whole text when it fits; IndexTTS 2: up to "
                     "120 text tokens each), cut at sentence ends; 'Max characters per segment' sets your own "
                     "limit instead (0 = the model's own).",
    "reset_defaults": "Reset to model defaults",
    "generate": "Generate",
    "output_audio": "Output",
    "live_audio": "Live playback (plays while the speech is generated)",
    "download_srt": "Download subtitles (SRT)",
    "download_metadata": "Metadata (JSON: model, settings, seeds, reference, segments)",
    "used_seed": "Seed used",
    "timings": "Segments",
    "jsonl_file": "Task file (JSONL)",
    "audio_zip": "Reference audio (ZIP, optional)",
    "default_voice": "Default voice for lines without prompt_audio (optional)",
    "validate": "Validate",
    "validation": "Validation report",
    "run_job": "Run job",
    "cancel_job": "Cancel",
    "job_progress": "Progress",
    "job_status": "Job status",
    "job_results": "Results",
    "download_zip": "Download outputs (ZIP with results.jsonl)",
    "memory_summary": "Device memory",
    "memory_plot": "Memory use over the last minutes (OOM events marked)",
    "model_status": "Model",
    "batch_intro": "Run many lines at once: upload a JSONL task file (one line per clip to make) and, when its lines "
                   "name reference audio files, the ZIP that holds them. The job runs on the server: you can close or "
                   "reload this page and come back to it (it is listed under Recent jobs).",
    "jsonl_help_title": "What goes in the task file (fields, example, template)",
    "jsonl_help": "One JSON object per line, UTF-8. GLM-TTS's own files (`uttid`, `prompt_text`, `prompt_speech`, "
                  "`syn_text`) run as they are: upload the JSONL and a ZIP of its `prompt` folder. Fields:\n\n"
                  "| field | also accepted | meaning |\n|---|---|---|\n"
                  "| `input_text` | `syn_text` | the text to speak (required) |\n"
                  "| `prompt_audio` | `prompt_speech` | reference audio file inside the ZIP, e.g. `voices/mei.wav` "
                  "(required unless you give a default voice) |\n"
                  "| `prompt_text` | | what is said in the reference audio (optional; some models need it) |\n"
                  "| `output_name` | `uttid` | file name of the result without `.wav` (default: the line number) |\n"
                  "| `format` | | this line's audio format: `wav`, `flac`, `mp3` or `opus` (default: the job's "
                  "Output format) |\n"
                  "| `voice` | | a saved voice of the voice library (or an example voice) instead of `prompt_audio` "
                  "|\n"
                  "| `script` + `speakers` | | a dialogue instead of `input_text`: the script (`Speaker 1: …`, "
                  "`[S1] …` or `张三：…` lines) and per speaker (number or name) a saved voice or an audio file in "
                  "the ZIP, e.g. `{\"1\": \"voices/mei.wav\", \"李四\": \"en-male\"}` |\n"
                  "| `seed`, `greedy`, `temperature`, `top_p`, `top_k`, `cfg_scale`, `max_new_tokens`, "
                  "`num_beams`, `length_penalty`, `num_diffusion_steps`, `max_segment_chars`, `pause_between_segments_ms`, `chapter_pause_ms` | | per-line settings "
                  "(optional) |\n"
                  "| `reference_cleanup` | | `auto` (only what the model's own tool does), `full` (trim, high-pass, "
                  "loudness, pauses shortened) or `off` (optional) |\n"
                  "| `segment_context` | | `true`: each segment hears the earlier ones as context, long text in one "
                  "voice (CSM, Higgs Audio v2; GLM-TTS: its prompt cache; optional) |\n"
                  "| `take_check`, `take_max_rerolls`, `take_max_error_rate`, `take_min_similarity` | | check each "
                  "segment's take: `score` (record its scores) or `reroll` (generate a take below the thresholds "
                  "again with a new seed, keep the best), thresholds (optional) |\n"
                  "| `prompt_cache` | | GLM-TTS's long-text prompt cache, `true` / `false` (default on, as upstream; "
                  "not the KV cache) (optional) |\n"
                  "| `speed`, `duration_s`, `loudness_lufs`, `segment_durations_s` | | the output's pace (x the "
                  "model's), target length in seconds, loudness in LUFS, or a list of seconds per line of the text "
                  "(optional) |\n"
                  "| `emo_audio_prompt`, `emo_vector`, `emo_alpha`, `use_emo_text`, `emo_text` | `emo_audio`, "
                  "`emo_weight` | emotion, for models with emotion control (IndexTTS 2): an emotion clip in the ZIP, "
                  "8 weights (happy, angry, sad, afraid, disgusted, melancholic, surprised, calm), the strength 0-1, "
                  "or the emotion read from a text (optional; Validate flags them when the model has none) |\n\n"
                  "Example: `{\"input_text\": \"你好。\", \"prompt_audio\": \"voices/mei.wav\", "
                  "\"output_name\": \"hello\"}`. Write paths with forward slashes (`voices/mei.wav`, not "
                  "`voices\\mei.wav`). Validate before you run: every problem is listed with its line number.",
    "download_template": "Download a template (.jsonl)",
    "job_settings": "Job settings (batch size, KV cache, greedy, seed, output format)",
    "resume_job": "Resume",
    "recent_jobs": "Recent jobs (this browser)",
    "job_id": "Job id (paste one to reopen it)",
    "open_job": "Open",
    "show_lines": "Show lines",
    "validation_summary": "Validation summary",
    "languages": "Languages the model was trained on (other text gets a warning)",
    "emotion": "Emotion",
    "emotion_note": "This model can speak with another emotion than the voice reference's: copy it from an emotion "
                    "clip, set it with the eight sliders, or let the checkpoint's emotion model read it from the text. "
                    "The weight says how strongly (1 = fully).",
    "emotion_mode": "Emotion source",
    "emotion_audio": "Emotion clip (its emotion, not its voice, is used)",
    "emotion_weight": "Emotion weight",
    "emotion_text": "Emotion text (empty: the text to speak)",
    "emo_happy": "Happy", "emo_angry": "Angry", "emo_sad": "Sad", "emo_afraid": "Afraid",
    "emo_disgusted": "Disgusted", "emo_melancholic": "Melancholic", "emo_surprised": "Surprised", "emo_calm": "Calm",
}

ZH: dict[str, str] = {
    "title": "# tts_app — 声音克隆语音合成",
    "intro": "上传几秒钟的参考声音，输入中文或英文文本，即可用该声音朗读。",
    "tab_single": "单条合成",
    "tab_batch": "批量（JSONL）",
    "tab_memory": "内存 / 显存",
    "reference_audio": "参考音频（上传或录音）",
    "reference_report": "参考音频质量报告",
    "cleaned_reference": "处理后的参考音频（模型实际听到的）",
    "reference_text": "参考文本（参考音频的文字内容，可选）",
    "reference_text_required": "参考文本（参考音频的文字内容——此模型必填）",
    "text": "要朗读的文本",
    "text_placeholder": "输入文本。用拼音纠正多音字：重(zhòng)要、银行(yin2 hang2)。停顿：[pause:500ms]",
    "preview": "读音预览（多音字高亮）",
    "preview_warnings": "文本前端提示",
    "settings": "设置",
    "max_batch_size": "最大批大小（全服务器统一，由运维设定：--max-batch-size）",
    "use_cache": "KV 缓存（更快；开关输出相同）",
    "segment_context": "段落上下文：每段参考前面已生成的段落（长文本保持同一个声音；各段依次生成）",
    "prompt_cache": "提示缓存（长文本：前面的段落加入下一段的提示；不是 KV 缓存）",
    "max_new_tokens": "每段最大新 token 数",
    "greedy": "贪心解码（结果确定）",
    "temperature": "温度",
    "top_p": "Top-p",
    "top_k": "Top-k",
    "cfg_scale": "CFG 强度",
    "num_beams": "束搜索宽度（1 = 不用束搜索）",
    "length_penalty": "束搜索长度惩罚",
    "num_diffusion_steps": "扩散步数（IndexTTS 2：25；12 = 快速预设，音质略粗）",
    "seed": "种子",
    "randomize_seed": "随机生成种子",
    "max_segment_chars": "每段最大字数（0 = 模型自身的分段）",
    "reference_cleanup": "参考音频处理：auto = 只做模型原版工具会做的（单声道、重采样；照常检查并报告）；full = 裁剪、滤波、"
                         "统一响度；off = 原样使用，不检查",
    "pause_between_segments_ms": "段间停顿（毫秒）",
    "take_check": "逐段检查：score = 识别每一段并打分（字/词错误率、音色相似度、静音、削波），显示在分段表中；reroll = "
                  "另外把低于阈值的段换个种子重新生成，保留最好的一次（更慢）；off = 不检查",
    "settings_note": "各项设置的初始值都是当前模型自己的默认值（来自其生成配置）；保持默认的设置与命令行和 JSONL 任务的运行方式完全相同。"
                     "文本按模型能接受的长度分成尽量少的段（能一次说完就整段一次生成；IndexTTS 2 每段最多 120 个文本 token），"
                     "只在句末切分；“每段最大字数”可改用你自己的上限（0 = 用模型自身的）。",
    "reset_defaults": "恢复模型默认值",
    "generate": "生成",
    "output_audio": "输出",
    "live_audio": "实时播放（边生成边播放）",
    "download_srt": "下载字幕（SRT）",
    "download_metadata": "元数据（JSON：模型、设置、种子、参考音频、分段）",
    "used_seed": "实际使用的种子",
    "timings": "分段",
    "jsonl_file": "任务文件（JSONL）",
    "audio_zip": "参考音频（ZIP，可选）",
    "default_voice": "默认声音（用于没有 prompt_audio 的行，可选）",
    "validate": "校验",
    "validation": "校验报告",
    "run_job": "运行任务",
    "cancel_job": "取消",
    "job_progress": "进度",
    "job_status": "任务状态",
    "job_results": "结果",
    "download_zip": "下载输出（含 results.jsonl 的 ZIP）",
    "memory_summary": "设备内存",
    "memory_plot": "最近几分钟的内存占用（标出 OOM 事件）",
    "model_status": "模型",
    "batch_intro": "一次合成多条：上传 JSONL 任务文件（每行一条要生成的音频）；如果各行引用了参考音频文件，再上传包含这些文件的 "
                   "ZIP。任务在服务器上运行：可以关闭或刷新本页面，稍后回来继续查看（在“最近的任务”中）。",
    "jsonl_help_title": "任务文件的写法（字段、示例、模板）",
    "jsonl_help": "每行一个 JSON 对象，UTF-8 编码。GLM-TTS 自带的任务文件（`uttid`、`prompt_text`、`prompt_speech`、"
                  "`syn_text`）可直接使用：上传该 JSONL 和其 `prompt/` 文件夹的 ZIP。字段：\n\n"
                  "| 字段 | 也可写作 | 含义 |\n|---|---|---|\n"
                  "| `input_text` | `syn_text` | 要朗读的文本（必填） |\n"
                  "| `prompt_audio` | `prompt_speech` | ZIP 中的参考音频文件，如 `voices/mei.wav`（未设默认声音时必填） |\n"
                  "| `prompt_text` | | 参考音频里说的话（可选；部分模型需要） |\n"
                  "| `output_name` | `uttid` | 结果文件名，不含 `.wav`（默认：行号） |\n"
                  "| `format` | | 该行的音频格式：`wav`、`flac`、`mp3` 或 `opus`（默认：任务的“输出格式”） |\n"
                  "| `voice` | | 声音库中已保存的声音（或示例声音），代替 `prompt_audio` |\n"
                  "| `script` + `speakers` | | 对话，代替 `input_text`：对话脚本（`Speaker 1: …`、`[S1] …` 或 `张三：…` 行），"
                  "以及每位说话人（编号或名字）的已保存声音或 ZIP 中的音频文件，例如 "
                  "`{\"1\": \"voices/mei.wav\", \"李四\": \"en-male\"}` |\n"
                  "| `seed`、`greedy`、`temperature`、`top_p`、`top_k`、`cfg_scale`、`max_new_tokens`、"
                  "`num_beams`、`length_penalty`、`num_diffusion_steps`、`max_segment_chars`、`pause_between_segments_ms`、`chapter_pause_ms` | | 每行的生成设置（可选） |\n"
                  "| `reference_cleanup` | | `auto`（只做模型自己的工具会做的处理）、`full`（裁剪静音、高通、响度、缩短停顿）"
                  "或 `off`（可选） |\n"
                  "| `segment_context` | | `true`：每段参考前面已生成的段落，长文本保持同一个声音（CSM、Higgs Audio v2；GLM-TTS：即它的提示缓存；可选） |\n"
                  "| `take_check`、`take_max_rerolls`、`take_max_error_rate`、`take_min_similarity` | | 逐段检查："
                  "`score`（记录分数）或 `reroll`（低于阈值的段换种子重新生成，保留最好的一次），以及阈值（可选） |\n"
                  "| `prompt_cache` | | GLM-TTS 的长文本提示缓存，`true` / `false`（默认开启，与原版相同；不是 KV 缓存）（可选） |\n"
                  "| `speed`、`duration_s`、`loudness_lufs`、`segment_durations_s` | | 输出的语速（相对模型原速）、目标时长（秒）、"
                  "响度（LUFS），或文本每一行的秒数列表（可选） |\n"
                  "| `emo_audio_prompt`、`emo_vector`、`emo_alpha`、`use_emo_text`、`emo_text` | `emo_audio`、`emo_weight` | "
                  "情感，仅用于支持情感控制的模型（IndexTTS 2）：ZIP 中的情感参考音频、8 个权重（高兴、愤怒、悲伤、恐惧、反感、"
                  "低落、惊讶、自然）、强度 0-1，或从文本判断情感（可选；模型不支持时“校验”会标出） |\n\n"
                  "示例：`{\"input_text\": \"你好。\", \"prompt_audio\": \"voices/mei.wav\", "
                  "\"output_name\": \"hello\"}`。路径请用正斜杠（`voices/mei.wav`，而不是 `voices\\mei.wav`）。"
                  "运行前先校验：每个问题都会列出行号。",
    "download_template": "下载模板（.jsonl）",
    "job_settings": "任务设置（批大小、KV 缓存、贪心解码、种子、输出格式）",
    "resume_job": "继续",
    "recent_jobs": "最近的任务（本浏览器）",
    "job_id": "任务 ID（粘贴 ID 可重新打开）",
    "open_job": "打开",
    "show_lines": "显示行",
    "validation_summary": "校验摘要",
    "languages": "模型训练所用的语言（其他语言的文本会收到提示）",
    "emotion": "情感",
    "emotion_note": "该模型可以用与参考音频不同的情感说话：从情感参考音频复制、用下面八个滑块设定，或由模型自带的情感模型从文本判断。"
                    "权重表示强度（1 = 完全采用）。",
    "emotion_mode": "情感来源",
    "emotion_audio": "情感参考音频（只取其情感，不取其音色）",
    "emotion_weight": "情感权重",
    "emotion_text": "情感文本（留空则用要朗读的文本）",
    "emo_happy": "高兴", "emo_angry": "愤怒", "emo_sad": "悲伤", "emo_afraid": "恐惧",
    "emo_disgusted": "反感", "emo_melancholic": "低落", "emo_surprised": "惊讶", "emo_calm": "自然",
}

# Voices, dialogue and long-form output (issue 16).
EN.update({
    "voice": "Voice (a saved voice, or the uploaded clip)",
    "voice_library": "Voice library: save the uploaded clip, rename or delete the selected voice",
    "voice_name": "Name for the uploaded clip",
    "save_voice": "Save as voice",
    "new_voice_name": "New name for the selected voice",
    "rename_voice": "Rename",
    "delete_voice": "Delete",
    "voice_status": "Voice library status",
    "transcribe": "Transcribe the reference (automatic, editable)",
    "speed": "Speed (x the model's pace; pitch kept)",
    "duration_s": "Target duration in seconds (0 = as generated)",
    "segment_durations_s": "Or a target duration per line, in seconds, comma separated (dubbing: one per line of "
                           "the text, e.g. 2.5, 1.8, 3)",
    "loudness_lufs": "Loudness target in LUFS (0 = as generated; -16 podcast, -23 broadcast)",
    "audio_format": "Output format",
    "tab_dialogue": "Dialogue",
    "dialogue_intro": "One turn per line: `Speaker 1: …`, `[S1] …` or `张三：…` (up to 4 speakers; names take "
                      "speaker numbers in order of appearance). Give each speaker a saved voice or a clip.",
    "script": "Dialogue script",
    "script_placeholder": "Speaker 1: 你好，欢迎收听。\nSpeaker 2: Thanks, glad to be here.",
    "speaker_voice": "Saved voice",
    "speaker_audio": "or upload a clip",
    "generate_dialogue": "Generate dialogue",
    "history": "History: this browser's last generations (Re-run generates again with the same settings)",
    "rerun": "Re-run",
    "stop": "Stop",
    "chapter_files": "One file per chapter (the text's # headings)",
})
ZH.update({
    "voice": "声音（已保存的声音，或上传的音频）",
    "voice_library": "声音库：保存上传的音频，重命名或删除所选声音",
    "voice_name": "为上传的音频命名",
    "save_voice": "保存为声音",
    "new_voice_name": "所选声音的新名字",
    "rename_voice": "重命名",
    "delete_voice": "删除",
    "voice_status": "声音库状态",
    "transcribe": "自动识别参考文本（可编辑）",
    "speed": "语速（相对模型原速；音高不变）",
    "duration_s": "目标时长（秒，0 = 不调整）",
    "segment_durations_s": "或每行的目标时长（秒，用逗号分隔；配音：文本每行一个，例如 2.5, 1.8, 3）",
    "loudness_lufs": "响度目标（LUFS，0 = 不调整；播客 -16，广播 -23）",
    "audio_format": "输出格式",
    "tab_dialogue": "对话",
    "dialogue_intro": "每行一句：`Speaker 1: …`、`[S1] …` 或 `张三：…`（最多 4 位说话人；名字按出现顺序编号）。"
                      "为每位说话人选择已保存的声音或上传音频。",
    "script": "对话脚本",
    "script_placeholder": "Speaker 1: 你好，欢迎收听。\nSpeaker 2: 谢谢，很高兴来到这里。",
    "speaker_voice": "已保存的声音",
    "speaker_audio": "或上传音频",
    "generate_dialogue": "生成对话",
    "history": "历史记录：本浏览器最近的生成（“重新生成”沿用当时的设置再生成一次）",
    "rerun": "重新生成",
    "stop": "停止",
    "chapter_files": "按章节分开的音频（文本中的 # 标题）",
})

assert EN.keys() == ZH.keys()  # a missing translation is a programming error, caught at import


def translations(lang: str | None) -> dict[str, dict[str, str]]:
    """Locale -> strings for ``gr.I18n``. ``lang`` None: both, the browser decides; "zh"/"en": every locale shows
    that language."""
    en = {**EN, **{k: v for k, v in SERVER["en"].items() if k.startswith(CHOICE_PREFIXES)}}
    zh = {**GRADIO_ZH, **ZH, **{k: v for k, v in SERVER["zh"].items() if k.startswith(CHOICE_PREFIXES)}}
    if lang is None:
        return {"en": en, "zh": zh, "zh-CN": zh}
    chosen = zh if lang == "zh" else en
    return {"en": chosen, "zh": chosen, "zh-CN": chosen}


# Strings the server composes (reports, summaries, progress, notices). Messages raised by the front end, the
# reference checks and the job runner are ``tts_app.frontend.messages.Notice`` s with their own tables; the page
# renders them in its language (``error_text``, ``localize``).
SERVER: dict[str, dict[str, str]] = {
    "en": {
        "format": "format", "sampling_rate": "sampling rate", "channels": "channels", "duration_s": "duration",
        "speech_start_s": "speech starts", "speech_end_s": "speech ends", "speech_s": "speech found", "speech_kept_s": "speech kept", "bandwidth_hz": "bandwidth",
        "snr_db": "estimated SNR", "clipping_share": "clipped share", "speech_level_dbfs": "speech level",
        "cropped": "cropped", "yes": "yes", "no": "no",
        "no_problems": "no problems found", "reference_refused": "This reference cannot be used",
        "reference_changes": "Changed ({cleanup})", "reference_unchanged": "Sent to the model as uploaded ({cleanup})",
        "override": "override", "polyphone": "polyphone",
        "need_reference": "Upload or record a reference audio clip first (a few seconds of the voice to clone).",
        "need_reference_or_example": "Upload or record a reference audio clip first (a few seconds of the voice to "
                                     "clone), or pick an example voice in the Voice list above: {examples}.",
        "need_text": "Type some text to speak.", "need_jsonl": "Upload a JSONL task file first.",
        "bad_audio_format": "Output format {value!r} is unknown; choose one of {allowed}.",
        "bad_segment_durations": "Per-line durations: {value!r} is not a list of seconds separated by commas; give "
                                 "one number above 0 per line of the text, e.g. 2.5, 1.8, 3.",
        "segment_durations_and_tempo": "Give either per-line durations or a speed / target duration for the whole "
                                       "text, not both: set the speed to 1 and the target duration to 0, or clear "
                                       "the per-line durations.",
        "queued": "queued", "segment_progress": "segment {done}/{total}",
        "stream_off_whole_clip": "streaming is off for this request: speed/duration/loudness need the whole clip",
        "synthesis_failed": "Synthesis failed (request {request_id}, seed {seed}): {error}. Quote the request id "
                            "when you report it: the server log has the details under it.",
        "col_timings": "#|speaker|text|start (s)|end (s)|batch size|generate (s)|quality",
        "col_validation": "line|status|message",
        "col_results": "line|output name|status|error|duration (s)",
        "job_file": "job file",
        "validation_ok": "✓ {num_lines} lines, all valid ({num_warnings} warnings). Ready to run.",
        "validation_bad": "{num_lines} lines: {num_valid} valid, {num_invalid} invalid (they will be recorded as "
                          "failed; the valid lines still run), {num_warnings} warnings.",
        "job_progress": "lines {done}/{total} · batch cap {cap}",
        "job_summary": "ok {ok} · failed {failed} ({skipped} of the ok lines kept from an earlier run)",
        "job_cancelled": "Job cancelled: {ok} lines finished, {cancelled} not run.",
        "lines_failed": "{failed} line(s) failed; see the results table.",
        "no_job_yet": "No job yet: upload a task file and press Run job (or open one of your recent jobs).",
        "status_queued": "queued", "status_running": "running", "status_done": "done",
        "status_cancelled": "cancelled", "status_failed": "failed", "status_interrupted": "interrupted (resume it)",
        "status_damaged": "damaged (its job.json cannot be read; outputs kept)",
        "lines_done": "lines {done}/{total}", "outcomes": "ok {ok} · failed {failed} · cancelled {cancelled}",
        "kept_lines": "{kept} of them kept from an earlier run", "eta": "about {eta} left", "batch_now": "batch of {size}",
        "col_job_results": "line|output name|status|duration (s)|quality|listen|error / notes",
        "line_ok": "ok", "line_failed": "failed", "line_cancelled": "cancelled",
        "filter_all": "all", "filter_ok": "ok", "filter_failed": "failed", "filter_cancelled": "cancelled",
        "filter_needs_listening": "needs listening",
        "quality_needs_listening": "needs listening: {problems}", "quality_passes": "passes",
        "quality_scores": "{metric} {error_rate} · voice {similarity} · {rerolled} re-roll(s)",
        "rows_shown": "Showing the first {shown} of {total} lines; the ZIP has every line.",
        "no_rows": "No lines to show.",
        "no_such_job": "There is no job {job_id} (it may have been removed).",
        "bad_job_id": "{value} is not a job id: give the job id text, e.g. 20250101-120000-1a2b3c4d (the first "
                      "value /submit_job returns).",
        "not_your_job": "Job {job_id} belongs to another browser (or API key); open it from the one that started it.",
        "upload_too_large": "{name} is {size}; files up to {limit} are accepted here. Upload a smaller file.",
        "notes_more": "(and {count} more)",
        "cancelling": "cancelling…", "no_job": "no job of yours is running",
        "cancel_info": "Cancelling: lines already running finish, the rest are recorded as cancelled.",
        "cpu_memory": "system RAM (CPU run: no GPU)", "gpu_memory": "GPU memory",
        "mem_totals": "total {total} GiB · used {used} GiB · free {free} GiB",
        "mem_cpu_process": "process RSS {rss} GiB · peak {peak} GiB",
        "mem_torch": "torch allocated {alloc} GiB · reserved {reserved} GiB · peak {peak} GiB",
        "mem_util": "utilisation {util} %",
        "mem_engine": "engine budget {budget} · batch cap {cap} / {max} · OOM count {oom} · queue depth {queue} "
                      "segments",
        "unlimited": "unlimited",
        "mem_row": "KV cache + activations estimate per row (default settings): {mib} MiB",
        "mem_oom": "🔴 {count} out-of-memory event(s) in the plotted window, the last {ago} s ago (batch halved and "
                   "retried; nothing lost)",
        "no_model": "no model loaded: {error}",
        "emo_mode_none": "the voice reference's own", "emo_mode_clip": "emotion clip",
        "emo_mode_vector": "emotion sliders", "emo_mode_text": "from text",
        "workers_title": "**Ray workers** ({up} of {total} up) — the Batch tab's jobs run on them",
        "worker_row": "worker {n}: {state} · {where} · lines done {done}, in flight {flight}",
        "worker_memory": "device memory used {used} / {total} GiB (worker's own {own} GiB)",
        "worker_engine": "batch cap {cap} / {max} · OOM count {oom}",
        "worker_up": "up", "worker_restarting": "restarting (its lines went to the others)", "worker_dead": "stopped",
    },
    "zh": {
        "format": "格式", "sampling_rate": "采样率", "channels": "声道", "duration_s": "时长",
        "speech_start_s": "语音开始", "speech_end_s": "语音结束", "speech_s": "检测到语音", "speech_kept_s": "保留语音", "bandwidth_hz": "带宽",
        "snr_db": "估计信噪比", "clipping_share": "削波比例", "speech_level_dbfs": "语音电平",
        "cropped": "已裁剪", "yes": "是", "no": "否",
        "no_problems": "未发现问题", "reference_refused": "该参考音频无法使用",
        "reference_changes": "已做处理（{cleanup}）", "reference_unchanged": "按上传原样交给模型（{cleanup}）",
        "override": "指定读音", "polyphone": "多音字",
        "need_reference": "请先上传或录制一段参考音频（几秒钟要克隆的声音）。",
        "need_reference_or_example": "请先上传或录制一段参考音频（几秒钟要克隆的声音），或在上方“声音”列表中选择一个示例声音："
                                     "{examples}。",
        "need_text": "请输入要朗读的文本。", "need_jsonl": "请先上传 JSONL 任务文件。",
        "bad_audio_format": "未知的输出格式 {value!r}；请选择 {allowed} 之一。",
        "bad_segment_durations": "每行时长：{value!r} 不是用逗号分隔的秒数；请为文本的每一行给一个大于 0 的数，例如 "
                                 "2.5, 1.8, 3。",
        "segment_durations_and_tempo": "每行时长与整段的语速 / 目标时长只能选一种：请把语速设为 1、目标时长设为 0，"
                                       "或清空每行时长。",
        "queued": "排队中", "segment_progress": "第 {done}/{total} 段",
        "stream_off_whole_clip": "此请求不流式播放：语速/时长/响度需要完整音频",
        "synthesis_failed": "合成失败（请求 {request_id}，种子 {seed}）：{error}。报告问题时请附上请求 ID：服务器日志中"
                            "以它记录了详细信息。",
        "col_timings": "#|说话人|文本|开始（秒）|结束（秒）|批大小|生成（秒）|质量",
        "col_validation": "行|状态|说明",
        "col_results": "行|输出名|状态|错误|时长（秒）",
        "job_file": "任务文件",
        "validation_ok": "✓ 共 {num_lines} 行，全部有效（{num_warnings} 条提示），可以运行。",
        "validation_bad": "共 {num_lines} 行：{num_valid} 行有效，{num_invalid} 行无效（将记为失败，有效行照常运行），"
                          "{num_warnings} 条提示。",
        "job_progress": "已完成 {done}/{total} 行 · 批大小上限 {cap}",
        "job_summary": "成功 {ok} · 失败 {failed}（成功的行中 {skipped} 行沿用之前的结果）",
        "job_cancelled": "任务已取消：完成 {ok} 行，{cancelled} 行未运行。",
        "lines_failed": "{failed} 行失败，详见结果表。",
        "no_job_yet": "还没有任务：上传任务文件后点击“运行任务”（或打开最近的任务）。",
        "status_queued": "排队中", "status_running": "运行中", "status_done": "已完成",
        "status_cancelled": "已取消", "status_failed": "失败", "status_interrupted": "已中断（可继续）",
        "status_damaged": "已损坏（job.json 无法读取；输出已保留）",
        "lines_done": "{done}/{total} 行", "outcomes": "成功 {ok} · 失败 {failed} · 取消 {cancelled}",
        "kept_lines": "其中 {kept} 行沿用之前的结果", "eta": "预计还需 {eta}", "batch_now": "批大小 {size}",
        "col_job_results": "行|输出名|状态|时长（秒）|质量|试听|错误 / 提示",
        "line_ok": "成功", "line_failed": "失败", "line_cancelled": "已取消",
        "filter_all": "全部", "filter_ok": "成功", "filter_failed": "失败", "filter_cancelled": "已取消",
        "filter_needs_listening": "需要试听",
        "quality_needs_listening": "需要试听：{problems}", "quality_passes": "通过",
        "quality_scores": "{metric} {error_rate} · 音色 {similarity} · 重新生成 {rerolled} 次",
        "rows_shown": "仅显示前 {shown} 行（共 {total} 行）；ZIP 中包含全部。",
        "no_rows": "没有可显示的行。",
        "no_such_job": "没有任务 {job_id}（可能已被删除）。",
        "bad_job_id": "{value} 不是任务 ID：请给出任务 ID 文本，例如 20250101-120000-1a2b3c4d（/submit_job 返回的第一个值）。",
        "not_your_job": "任务 {job_id} 属于另一个浏览器（或 API 密钥）；请在启动它的浏览器中打开。",
        "upload_too_large": "{name} 大小为 {size}；此处最多接受 {limit}。请上传更小的文件。",
        "notes_more": "（另有 {count} 条）",
        "cancelling": "正在取消…", "no_job": "你没有正在运行的任务",
        "cancel_info": "正在取消：已在运行的行会完成，其余记为已取消。",
        "cpu_memory": "系统内存（CPU 运行：无 GPU）", "gpu_memory": "显存",
        "mem_totals": "总量 {total} GiB · 已用 {used} GiB · 空闲 {free} GiB",
        "mem_cpu_process": "进程常驻内存 {rss} GiB · 峰值 {peak} GiB",
        "mem_torch": "torch 已分配 {alloc} GiB · 已保留 {reserved} GiB · 峰值 {peak} GiB",
        "mem_util": "利用率 {util} %",
        "mem_engine": "引擎预算 {budget} · 批大小上限 {cap} / {max} · OOM 次数 {oom} · 队列 {queue} 段",
        "unlimited": "不限",
        "mem_row": "每行 KV 缓存 + 激活估计（默认设置）：{mib} MiB",
        "mem_oom": "🔴 图中时间窗内发生 {count} 次显存不足，最近一次在 {ago} 秒前（批大小减半后重试，未丢失任何内容）",
        "no_model": "未加载模型：{error}",
        "emo_mode_none": "参考音频自身的情感", "emo_mode_clip": "情感参考音频",
        "emo_mode_vector": "情感滑块", "emo_mode_text": "从文本判断",
        "workers_title": "**Ray 工作进程**（{total} 个中 {up} 个在线）— 批量页的任务在这些进程上运行",
        "worker_row": "工作进程 {n}：{state} · {where} · 已完成 {done} 行，进行中 {flight} 行",
        "worker_memory": "设备内存已用 {used} / {total} GiB（本进程 {own} GiB）",
        "worker_engine": "批大小上限 {cap} / {max} · OOM 次数 {oom}",
        "worker_up": "在线", "worker_restarting": "重启中（它的行已交给其他进程）", "worker_dead": "已停止",
    },
}
SERVER["en"].update({
    "voice_upload": "(uploaded / recorded clip)", "voice_example": "example",
    "voice_selected": "Voice **{name}**: {seconds} s of cleaned speech, saved {created}.",
    "voice_saved": "Saved voice {name}.", "voice_renamed": "Renamed {old} to {name}.",
    "voice_deleted": "Deleted voice {name}.", "need_voice": "Select a saved voice first.",
    "voice_delete_confirm": "Delete the voice {name}? This cannot be undone.",
    "need_speaker_voice": "{name} (speaker {number}) has no voice: pick a saved voice or upload a clip for speaker "
                          "{number}.",
    "history_empty": "Nothing generated yet: your generations will be listed here.", "history_voice": "voice",
    "emotion_word": "emotion",
    "history_not_saved": "The audio is ready, but it could not be added to the history: {error}",
    "generation_stopped": "Stopped: this generation was cancelled; nothing was saved.",
    "preview_model_input": "What {name} receives (pinyin overrides as its phonemes), per segment:",
})
SERVER["zh"].update({
    "voice_upload": "（上传 / 录制的音频）", "voice_example": "示例",
    "voice_selected": "声音 **{name}**：处理后语音 {seconds} 秒，保存于 {created}。",
    "voice_saved": "已保存声音 {name}。", "voice_renamed": "已将 {old} 重命名为 {name}。",
    "voice_deleted": "已删除声音 {name}。", "need_voice": "请先选择一个已保存的声音。",
    "voice_delete_confirm": "删除声音 {name}？此操作无法撤销。",
    "need_speaker_voice": "{name}（说话人 {number}）没有声音：请为说话人 {number} 选择已保存的声音或上传音频。",
    "history_empty": "还没有生成记录：生成的音频会列在这里。", "history_voice": "声音",
    "emotion_word": "情感",
    "history_not_saved": "音频已生成，但未能加入历史记录：{error}",
    "generation_stopped": "已停止：本次生成已取消，没有保存任何内容。",
    "preview_model_input": "{name} 实际收到的文本（拼音标注写成它的音素），逐段：",
})
# The voice library's refusals (``tts_app.voices.VoiceError.code``), shown by ``error_text``.
SERVER["en"].update({
    "voice_error_name_not_text": "A voice name must be text.",
    "voice_error_name_empty": "The voice name is empty: give the voice a name.",
    "voice_error_name_too_long": "The voice name {head!r}… is {length} characters long; at most {limit}.",
    "voice_error_name_bad_characters": "The voice name {name!r} holds a control, invisible or direction character or "
                                       "a slash; use letters, digits, spaces, '-' or '_'.",
    "voice_error_name_dots": "The voice name {name!r} is only dots; use letters or digits.",
    "voice_error_name_lookalike": "The voice name {name!r} looks like {plain!r} but is written with other "
                                  "characters; write it as {plain!r}.",
    "voice_error_name_mixed_scripts": "The voice name {name!r} mixes letters of {scripts}, as look-alikes of other "
                                      "names do; write it in one script (Latin may go with Chinese, Japanese or "
                                      "Korean).",
    "voice_error_not_found": "There is no voice named {name!r} (voices: {voices}); save it first or check the "
                             "spelling.",
    "voice_error_not_found_none": "There is no voice named {name!r}, and no voice is saved yet; save it first.",
    "voice_error_not_voice_or_file": "{name!r} is neither an audio file nor a saved voice (voices: {voices}).",
    "voice_error_no_folder": "This server has no voices folder to save into (its operator sets --voices-dir).",
    "voice_error_not_a_file": "A voice is saved from an audio file: upload or record one.",
    "voice_error_no_source": "The reference audio {source!r} is gone; upload it again.",
    "voice_error_name_bundled": "{name!r} is the name of a bundled example voice; choose another name.",
    "voice_error_name_taken_save": "The voice name {name!r} is already taken; choose another name or delete that "
                                   "voice first.",
    "voice_error_name_taken": "The voice name {name!r} is already taken; choose another name.",
    "voice_error_bundled_rename": "{name!r} is a bundled example voice and cannot be renamed; save it under another "
                                  "name instead.",
    "voice_error_bundled_delete": "{name!r} is a bundled example voice and cannot be deleted.",
})
SERVER["zh"].update({
    "voice_error_name_not_text": "声音名称必须是文字。",
    "voice_error_name_empty": "声音名称为空：请为声音命名。",
    "voice_error_name_too_long": "声音名称 {head!r}… 有 {length} 个字符；最多 {limit} 个。",
    "voice_error_name_bad_characters": "声音名称 {name!r} 含有控制字符、不可见字符、方向字符或斜杠；请使用字母、数字、空格、“-”或“_”。",
    "voice_error_name_dots": "声音名称 {name!r} 只有点号；请使用字母或数字。",
    "voice_error_name_lookalike": "声音名称 {name!r} 看起来像 {plain!r}，但用的是其他字符；请写成 {plain!r}。",
    "voice_error_name_mixed_scripts": "声音名称 {name!r} 混用了 {scripts} 的字母，仿冒其他名称时常这样做；请只用一种文字书写"
                                      "（拉丁字母可以与中文、日文或韩文一起使用）。",
    "voice_error_not_found": "没有名为 {name!r} 的声音（现有声音：{voices}）；请先保存它，或检查拼写。",
    "voice_error_not_found_none": "没有名为 {name!r} 的声音，也还没有保存任何声音；请先保存它。",
    "voice_error_not_voice_or_file": "{name!r} 既不是音频文件，也不是已保存的声音（现有声音：{voices}）。",
    "voice_error_no_folder": "此服务器没有可保存声音的文件夹（由管理员用 --voices-dir 设置）。",
    "voice_error_not_a_file": "声音需要从音频文件保存：请上传或录制一段音频。",
    "voice_error_no_source": "参考音频 {source!r} 已不存在；请重新上传。",
    "voice_error_name_bundled": "{name!r} 是内置示例声音的名字；请换一个名字。",
    "voice_error_name_taken_save": "声音名称 {name!r} 已被使用；请换一个名字，或先删除那个声音。",
    "voice_error_name_taken": "声音名称 {name!r} 已被使用；请换一个名字。",
    "voice_error_bundled_rename": "{name!r} 是内置示例声音，不能重命名；请以其他名字另存。",
    "voice_error_bundled_delete": "{name!r} 是内置示例声音，不能删除。",
})
# Table words, chart axes and the loading page (issue 23).
SERVER["en"].update({
    "row_error": "error", "row_warning": "warning",
    "axis_seconds_ago": "seconds ago", "axis_used_gib": "used (GiB)",
        "legend_event": "event", "legend_ok": "ok",
    "loading_title": "tts_app: loading", "loading_heading": "Loading the model…",
    "loading_wait": "The web page appears when the model has loaded.",
    "loading_failed": "The model could not be loaded: {error}",
    "loading_reload": "This page reloads itself every 5 seconds.",
    # a number input outside its widget's range (an API call; tts_app.ui.ranges)
    "out_of_range": "{field} = {value} is outside its range {minimum} to {maximum}; send a value in it",
    "below_minimum": "{field} = {value} is below its minimum {minimum}; send {minimum} or more",
    # the titles of the page's pop-ups (gradio writes them in English: tts_app.ui.layout.page_js)
    "toast_error": "Error", "toast_warning": "Warning", "toast_info": "Info",
    "above_maximum": "{field} = {value} is above its maximum {maximum}; send {maximum} or less",
    "not_a_choice": "{field} = {value} is not one of its choices ({choices}); send one of them",
})
SERVER["zh"].update({
    "row_error": "错误", "row_warning": "提示",
    "axis_seconds_ago": "秒前", "axis_used_gib": "已用（GiB）",
        "legend_event": "事件", "legend_ok": "正常",
    "loading_title": "tts_app：正在加载", "loading_heading": "正在加载模型…",
    "loading_wait": "模型加载完成后即显示网页。",
    "loading_failed": "模型无法加载：{error}",
    "loading_reload": "页面每 5 秒自动刷新。",
    "out_of_range": "{field} = {value} 超出范围 {minimum} 到 {maximum}；请给出此范围内的值",
    "below_minimum": "{field} = {value} 低于最小值 {minimum}；请给出不小于 {minimum} 的值",
    "toast_error": "错误", "toast_warning": "提示", "toast_info": "信息",
    "above_maximum": "{field} = {value} 高于最大值 {maximum}；请给出不大于 {maximum} 的值",
    "not_a_choice": "{field} = {value} 不是可选值之一（{choices}）；请从中选一个",
})
assert SERVER["en"].keys() == SERVER["zh"].keys()
#: server strings that also label widgets built once for every browser (radio choices), so ``gr.I18n`` carries
#: them too (translated in each browser; ``translations``)
CHOICE_PREFIXES = ("filter_", "emo_mode_")
#: gradio's own interface words that its zh-CN translation lacks (gradio 6: the status of a finished event, the
#: footer's "Runs"); given to ``gr.I18n`` for Chinese only, so English pages keep gradio's own text
GRADIO_ZH = {"common.complete": "完成", "common.runs": "运行记录", "common.runs_description": "查看本浏览器保存的运行记录"}


def table_headers(lang: str, key: str) -> list[str]:
    """The column headers of table ``key`` ("col_validation", "col_results", "col_timings") in ``lang``."""
    return server_text(lang, key).split("|")


def empty_table(lang: str, key: str):
    """An empty ``pandas.DataFrame`` with table ``key``'s headers in ``lang`` (a table's value before any data)."""
    import pandas as pd

    return pd.DataFrame(columns=table_headers(lang, key))


def error_text(exc: BaseException, lang: str) -> str:
    """What the page shows for a refused action, in ``lang``: a voice-library refusal from its ``code``
    (``voice_error_<code>`` above), a front-end ``Notice`` rendered in ``lang``, anything else as its message."""
    from tts_app.frontend.messages import localize
    from tts_app.voices import VoiceError

    if isinstance(exc, VoiceError) and exc.code is not None:
        return server_text(lang, f"voice_error_{exc.code}", **exc.params)
    return localize(exc, lang)


def pick_language(forced: str | None, accept_language: str | None) -> str:
    """"zh" or "en": ``--lang`` when given, else the browser's first supported language (Accept-Language header,
    RFC 9110 §12.5.4), else English."""
    if forced in ("zh", "en"):
        return forced
    for part in (accept_language or "").split(","):
        tag = part.split(";")[0].strip().lower()
        if tag.startswith("zh"):
            return "zh"
        if tag.startswith("en"):
            return "en"
    return "en"


def server_text(lang: str, key: str, **values) -> str:
    """A server-composed string in ``lang``, formatted with ``values``."""
    return SERVER.get(lang, SERVER["en"])[key].format(**values)


def preview_label(lang: str, kind: str) -> str:
    """Category of a highlighted preview span ("override" or "polyphone") in the page's language ``lang``."""
    return server_text(lang, kind)


def preview_colors(forced: str | None) -> dict[str, str]:
    """The preview's colour of each category: in ``forced`` (``--lang``) only, else in every language (the widget is
    built once for all browsers; each page labels its spans in its own language, ``preview_label``)."""
    codes = [forced] if forced in SERVER else list(SERVER)
    return {SERVER[code][kind]: color for code in codes for kind, color in (("override", "green"),
                                                                            ("polyphone", "orange"))}
