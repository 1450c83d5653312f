"""The engine's refusals of a request's text, in English and Chinese (``tts_app.frontend.messages``): found while
the text is split into segments, they end the request as ``FinishReason.REFUSED`` and each door shows them in its
user's language; and its warnings on a finished request (a segment cut at its cap or without audio, a setting
ignored), rendered likewise. No torch."""

from __future__ import annotations

from tts_app.frontend.messages import register

ENGINE_EN: dict[str, str] = {
    "eng_nothing_to_speak": "the text has nothing to speak; type some words",
    "eng_durations_dialogue": "segment_durations_s is for plain text (one target per line); for a dialogue give the "
                              "whole request's duration_s instead",
    "eng_durations_count": "segment_durations_s gives {num_targets} duration(s) but the text has {num_lines} "
                           "non-blank line(s); give one duration per line",
    "eng_turn_speaker": "turn {turn} names speaker {speaker} but the dialogue has {num_speakers} speaker(s)",
    "eng_turn_empty": "turn {turn} has nothing to speak; give it some words or remove it",
    "eng_line_target_empty": "line {line} ({text!r}) has a target duration but nothing to speak; give it words or "
                             "remove the line and its duration",
    "eng_line_target_split": "line {line} ({text!r}) has a target duration but would be split into {num_segments} "
                             "segments (longer than {max_chars} characters); shorten it, split it into lines with a "
                             "duration each, or raise max_segment_chars",
    "eng_retaken": "segment {segment}: the model ended speech at once with seed {seeds}; it was generated again "
                   "with seed {seed}",
    "eng_take_below": "segment {segment} ({text!r}) is still below the quality thresholds after {num_takes} take(s) "
                      "({problems}); listen to it, or run it again with another seed",
    "eng_emotion_unsupported": "emotion control (emotion clip, emotion vector, emotion from text) needs a model that "
                               "has it, such as IndexTTS 2; the loaded model ({name}) has none: remove the emotion "
                               "settings",
    "eng_emotion_text_unsupported": "this {name} checkpoint has no emotion model to read the emotion from text; give "
                                    "an emotion vector or an emotion clip instead",
    "eng_segment_context_unsupported": "segment_context was ignored: {name} has no way to hear earlier segments as "
                                       "context (CSM, Higgs Audio v2 and GLM-TTS have one); each segment is generated on its "
                                       "own",
    "eng_segment_context_dialogue": "segment_context was ignored: it is for text in one voice, not a dialogue; "
                                    "each turn is generated on its own",
    "eng_segment_context_prompt_cache_off": "segment_context was ignored: {name} hears earlier segments through its "
                                            "prompt cache, which this request turned off (prompt_cache=false); "
                                            "turn the prompt cache on, or leave it out",
    "eng_segment_cap": "segment {segment} ({text!r}) hit the {audio_s:g} s cap (max_new_tokens={max_new_tokens}) and "
                       "was cut off; shorten it (max_segment_chars) or raise max_new_tokens",
    "eng_segment_no_audio": "segment {segment} ({text!r}) produced no audio: the model ended speech at once; try "
                            "another seed, sampling instead of greedy, or a longer segment",
    "eng_reference_rate": "reference audio is at {rate_hz} Hz but the model needs {model_rate_hz} Hz; clean it with "
                          "tts_app.audio.reference.prepare_reference(path, target_sampling_rate={model_rate_hz})",
    "eng_emotion_reference_rate": "emotion reference audio is at {rate_hz} Hz but the model needs {model_rate_hz} Hz; "
                                  "clean it with tts_app.audio.reference.prepare_reference(path, "
                                  "target_sampling_rate={model_rate_hz})",
}
ENGINE_ZH: dict[str, str] = {
    "eng_nothing_to_speak": "文本中没有可朗读的内容；请输入文字",
    "eng_durations_dialogue": "segment_durations_s 用于普通文本（每行一个目标时长）；对话请改为给整段的 duration_s",
    "eng_durations_count": "segment_durations_s 给了 {num_targets} 个时长，但文本有 {num_lines} 个非空行；请每行给一个时长",
    "eng_turn_speaker": "第 {turn} 轮指定了说话人 {speaker}，但对话只有 {num_speakers} 个说话人",
    "eng_turn_empty": "第 {turn} 轮没有可朗读的内容；请写上文字或删去这一轮",
    "eng_line_target_empty": "第 {line} 行（{text!r}）有目标时长，但没有可朗读的内容；请写上文字，或删去这一行及其时长",
    "eng_line_target_split": "第 {line} 行（{text!r}）有目标时长，但会被分成 {num_segments} 段（超过 {max_chars} 个字符）；"
                             "请缩短它、拆成每行一个时长，或调大 max_segment_chars",
    "eng_retaken": "第 {segment} 段：模型在种子 {seeds} 下立即结束了语音，已改用种子 {seed} 重新生成",
    "eng_take_below": "第 {segment} 段（{text!r}）生成 {num_takes} 次后仍低于质量阈值（{problems}）；请试听，或换个种子重新生成",
    "eng_emotion_unsupported": "情感控制（情感参考音频、情感向量、从文本读取情感）需要支持它的模型，例如 IndexTTS 2；"
                               "当前加载的模型（{name}）不支持：请去掉情感设置",
    "eng_emotion_text_unsupported": "这个 {name} 检查点没有可从文本读取情感的情感模型；请改为给出情感向量或情感参考音频",
    "eng_segment_context_unsupported": "已忽略 segment_context：{name} 无法把前面的段落作为上下文（CSM、"
                                       "Higgs Audio v2 和 GLM-TTS 可以）；每段单独生成",
    "eng_segment_context_dialogue": "已忽略 segment_context：它用于同一个声音朗读的长文本，不用于对话；每一轮单独生成",
    "eng_segment_context_prompt_cache_off": "已忽略 segment_context：{name} 通过提示缓存参考前面的段落，而本次请求关闭了"
                                            "提示缓存（prompt_cache=false）；请开启提示缓存，或不设置它",
    "eng_segment_cap": "第 {segment} 段（{text!r}）达到了 {audio_s:g} 秒的上限（max_new_tokens={max_new_tokens}），"
                       "后面被截断；请缩短这一段（max_segment_chars）或调大 max_new_tokens",
    "eng_segment_no_audio": "第 {segment} 段（{text!r}）没有生成音频：模型立即结束了语音；请换一个种子、改用采样而不是"
                            "贪心解码，或让这一段长一些",
    "eng_reference_rate": "参考音频的采样率是 {rate_hz} Hz，但模型需要 {model_rate_hz} Hz；请用 "
                          "tts_app.audio.reference.prepare_reference(path, target_sampling_rate={model_rate_hz}) 处理",
    "eng_emotion_reference_rate": "情感参考音频的采样率是 {rate_hz} Hz，但模型需要 {model_rate_hz} Hz；请用 "
                                  "tts_app.audio.reference.prepare_reference(path, "
                                  "target_sampling_rate={model_rate_hz}) 处理",
}
register(__name__, ENGINE_EN, ENGINE_ZH)
