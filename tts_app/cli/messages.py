"""What the commands (``synth``, ``batch``, ``frontend``, ``reference``) print around the messages, in English and
Chinese (``--lang``, ``tts_app.cli.args.add_lang_arg``). Keys ``cli_*``, registered with
``tts_app.frontend.messages``; ``say(lang, key, **values)`` renders one. Report field names (``speech_s``) and
JSON keys stay as they are: scripts read them.
"""
from __future__ import annotations
from tts_app.frontend.messages import Notice, register
EN: dict[str, str] = {
    "cli_error": "error: {message}",
    "cli_warning": "warning: {message}",
    "cli_wrote": "wrote {path}",
    "cli_yes": "yes", "cli_no": "no",
    # synth
    "cli_synth_wrote": "wrote {path}: {duration_s:.2f} s at {sampling_rate} Hz, {num_segments} segments in "
                       "{num_batches} batches (largest {largest}), {num_oom} out-of-memory retries, memory budget "
                       "{budget}; metadata in {metadata}{chapters}",
    "cli_chapters": ", {count} chapter files",
    # batch
    "cli_valid_count": "{num_valid} of {num_lines} lines valid",
    "cli_failed_lines": "failed lines:",
    # frontend
    "cli_normalised": "normalised: {text}",
    "cli_segments": "segments ({count}):",
    "cli_segment": "  {index:>3}  {text}   (pause after {pause_ms} ms){rendered}",
    "cli_model_sees": "   [model sees: {text}]",
    "cli_readings_all": "readings:",
    "cli_readings": "readings of polyphones decided in context, and overrides (--all-chars for every one):",
    "cli_warnings": "warnings:",
}
ZH: dict[str, str] = {
    "cli_error": "错误：{message}",
    "cli_warning": "提示：{message}",
    "cli_wrote": "已写入 {path}",
    "cli_yes": "是", "cli_no": "否",
    "cli_synth_wrote": "已写入 {path}：{duration_s:.2f} 秒，{sampling_rate} Hz，{num_segments} 段，分 {num_batches} 批"
                       "（最大批 {largest}），显存不足重试 {num_oom} 次，内存预算 {budget}；元数据在 {metadata}{chapters}",
    "cli_chapters": "，{count} 个章节文件",
    "cli_valid_count": "{num_lines} 行中 {num_valid} 行有效",
    "cli_failed_lines": "失败的行：",
    "cli_normalised": "规范化文本：{text}",
    "cli_segments": "分段（{count}）：",
    "cli_segment": "  {index:>3}  {text}   （之后停顿 {pause_ms} 毫秒）{rendered}",
    "cli_model_sees": "   [模型看到：{text}]",
    "cli_readings_all": "读音：",
    "cli_readings": "按上下文判定的多音字读音，以及指定读音（--all-chars 列出每个字）：",
    "cli_warnings": "提示：",
}
register(__name__, EN, ZH)
def say(lang: str, key: str, **values) -> str:
    """The message ``key`` in ``lang`` with ``values`` (values that are notices are rendered in ``lang`` too)."""
    return Notice(key, **values).render(lang)
