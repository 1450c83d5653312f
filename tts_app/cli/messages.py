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
                       "{runs} (largest {largest}), {num_oom} out-of-memory retries, memory budget "
                       "{budget}; metadata in {metadata}{chapters}",
    # what the engine ran: batches of whole segments, or decode steps of a running batch (continuous batching)
    "cli_runs_batches": "{count} batches",
    "cli_runs_decode_steps": "{count} decode steps",
    "cli_chapters": ", {count} chapter files",
    # synth's own usage errors
    "cli_emo_vector": "--emo-vector {value!r} must be 8 comma-separated numbers, e.g. 0.8,0,0,0,0,0,0,0",
    "cli_emo_ref_missing": "emotion clip {path!r} does not exist; give --emo-ref an audio file",
    "cli_srt_clash": "--srt {path!r} would overwrite the audio or its metadata sidecar; give another name",
    "cli_text_or_script": "give the text to speak with --text, or a dialogue script with --script (one of them)",
    "cli_ref_with_script": "--ref is for a single voice; with --script give each speaker --voice N=FILE_OR_NAME",
    "cli_script_unreadable": "--script {path!r} cannot be read as UTF-8 text: {reason}",
    "cli_ref_missing": "reference audio {path!r} does not exist; give --ref an audio file",
    "cli_voice_twice": "--voice was given more than once; one voice speaks a text (dialogue scripts: --script)",
    "cli_voice_and_ref": "--voice and --ref were both given; give one of them",
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
    "cli_synth_wrote": "已写入 {path}：{duration_s:.2f} 秒，{sampling_rate} Hz，{num_segments} 段，{runs}"
                       "（最大批 {largest}），显存不足重试 {num_oom} 次，内存预算 {budget}；元数据在 {metadata}{chapters}",
    "cli_runs_batches": "分 {count} 批",
    "cli_runs_decode_steps": "{count} 个解码步",
    "cli_chapters": "，{count} 个章节文件",
    "cli_emo_vector": "--emo-vector {value!r} 必须是 8 个以逗号分隔的数，例如 0.8,0,0,0,0,0,0,0",
    "cli_emo_ref_missing": "情感音频 {path!r} 不存在；请给 --emo-ref 一个音频文件",
    "cli_srt_clash": "--srt {path!r} 会覆盖音频或它的元数据文件；请换一个文件名",
    "cli_text_or_script": "请用 --text 给出要朗读的文本，或用 --script 给出对话脚本（二选一）",
    "cli_ref_with_script": "--ref 只用于单个声音；使用 --script 时请用 --voice N=文件或声音名 为每位说话人指定声音",
    "cli_script_unreadable": "--script {path!r} 无法按 UTF-8 文本读取：{reason}",
    "cli_ref_missing": "参考音频 {path!r} 不存在；请给 --ref 一个音频文件",
    "cli_voice_twice": "--voice 给了不止一次；一段文本由一个声音朗读（对话脚本请用 --script）",
    "cli_voice_and_ref": "同时给出了 --voice 和 --ref；请只给其中一个",
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
