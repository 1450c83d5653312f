"""Interface text in English and Chinese, for gradio's ``gr.I18n`` (the browser's language picks one; ``--lang``
forces one). Keys are stable identifiers; values are what the user reads."""

from __future__ import annotations

EN: dict[str, str] = {
    "title": "tts_app — voice-cloning text to speech",
    "intro": "Upload a few seconds of a voice, type Chinese or English text, and get speech in that voice.",
    "tab_single": "Single synthesis",
    "tab_batch": "Batch (JSONL)",
    "tab_memory": "Memory",
    "reference_audio": "Reference audio (upload or record)",
    "reference_report": "Reference quality report",
    "cleaned_reference": "Cleaned reference (what the model hears)",
    "reference_text": "Reference text (transcript of the reference, optional)",
    "text": "Text to speak",
    "text_placeholder": "Type text. Fix a polyphone with pinyin: 重(zhòng)要, 银行(yin2 hang2). Pause: [pause:500ms]",
    "preview": "Pronunciation preview (polyphones highlighted)",
    "preview_warnings": "Front-end notes",
    "settings": "Settings",
    "max_batch_size": "Max batch size (rows per forward call)",
    "use_cache": "KV cache (faster; same output on or off)",
    "max_new_tokens": "Max new tokens per segment (0 = model default)",
    "greedy": "Greedy decoding (deterministic)",
    "temperature": "Temperature",
    "top_p": "Top-p",
    "top_k": "Top-k",
    "cfg_scale": "CFG scale",
    "seed": "Seed",
    "randomize_seed": "Randomize seed",
    "segment_chars": "Max characters per segment (0 = model default)",
    "pause_ms": "Pause between segments (ms)",
    "generate": "Generate",
    "output_audio": "Output",
    "download_wav": "Download WAV",
    "download_srt": "Download subtitles (SRT)",
    "used_seed": "Seed used",
    "timings": "Segments",
    "jsonl_file": "Task file (JSONL)",
    "audio_zip": "Reference audio (ZIP, optional)",
    "validate": "Validate",
    "validation": "Validation report",
    "run_job": "Run job",
    "cancel_job": "Cancel",
    "job_progress": "Progress",
    "job_results": "Results",
    "download_zip": "Download outputs (ZIP with results.jsonl)",
    "memory_summary": "Device memory",
    "memory_plot": "Memory use over the last minutes (OOM events marked)",
    "model_status": "Model",
}

ZH: dict[str, str] = {
    "title": "tts_app — 声音克隆语音合成",
    "intro": "上传几秒钟的参考声音，输入中文或英文文本，即可用该声音朗读。",
    "tab_single": "单条合成",
    "tab_batch": "批量（JSONL）",
    "tab_memory": "显存",
    "reference_audio": "参考音频（上传或录音）",
    "reference_report": "参考音频质量报告",
    "cleaned_reference": "处理后的参考音频（模型实际听到的）",
    "reference_text": "参考文本（参考音频的文字内容，可选）",
    "text": "要朗读的文本",
    "text_placeholder": "输入文本。用拼音纠正多音字：重(zhòng)要、银行(yin2 hang2)。停顿：[pause:500ms]",
    "preview": "读音预览（多音字高亮）",
    "preview_warnings": "文本前端提示",
    "settings": "设置",
    "max_batch_size": "最大批大小（每次前向的行数）",
    "use_cache": "KV 缓存（更快；开关输出相同）",
    "max_new_tokens": "每段最大新 token 数（0 = 模型默认）",
    "greedy": "贪心解码（结果确定）",
    "temperature": "温度",
    "top_p": "Top-p",
    "top_k": "Top-k",
    "cfg_scale": "CFG 强度",
    "seed": "随机种子",
    "randomize_seed": "随机种子",
    "segment_chars": "每段最大字数（0 = 模型默认）",
    "pause_ms": "段间停顿（毫秒）",
    "generate": "生成",
    "output_audio": "输出",
    "download_wav": "下载 WAV",
    "download_srt": "下载字幕（SRT）",
    "used_seed": "实际使用的种子",
    "timings": "分段",
    "jsonl_file": "任务文件（JSONL）",
    "audio_zip": "参考音频（ZIP，可选）",
    "validate": "校验",
    "validation": "校验报告",
    "run_job": "运行任务",
    "cancel_job": "取消",
    "job_progress": "进度",
    "job_results": "结果",
    "download_zip": "下载输出（含 results.jsonl 的 ZIP）",
    "memory_summary": "设备内存",
    "memory_plot": "最近几分钟的内存占用（标出 OOM 事件）",
    "model_status": "模型",
}

assert EN.keys() == ZH.keys()  # a missing translation is a programming error, caught at import


def translations(lang: str | None) -> dict[str, dict[str, str]]:
    """Locale -> strings for ``gr.I18n``. ``lang`` None: both, the browser decides; "zh"/"en": every locale shows
    that language."""
    if lang is None:
        return {"en": EN, "zh": ZH, "zh-CN": ZH}
    chosen = ZH if lang == "zh" else EN
    return {"en": chosen, "zh": chosen, "zh-CN": chosen}
