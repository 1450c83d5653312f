"""Messages about one reference clip, in English and Chinese, whose file name is filled in when they are shown.

The same clip can reach the app under several names (a re-upload, another job line naming the same content), and
the cache hands every caller the analysis of the first. So a message is kept as its key plus its values, and
rendered for whichever name the caller uses (``Notice.message(name)``, a ``tts_app.frontend.messages.Notice``
that each door renders in its user's language); no message is ever rewritten by string replacement. The texts are
the tables below (keys ``ref_*``, registered with ``tts_app.frontend.messages``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tts_app.errors import ReferenceAudioError
from tts_app.frontend import messages

EN: dict[str, str] = {
    # decoding (tts_app.audio.decode, reference._array_input)
    "ref_empty_upload": "reference audio {name} is empty (0 bytes); upload a WAV/FLAC/MP3/OGG/M4A file with speech",
    "ref_empty": "reference audio {name} is empty (0 bytes); use a WAV/FLAC/MP3/OGG/M4A file with speech",
    "ref_missing": "reference audio {name} does not exist or is not a file",
    "ref_unsupported_source": "reference audio {name}: unsupported source type {kind}; pass a path, bytes or "
                              "(samples, sampling_rate)",
    "ref_not_audio": "reference audio {name} is not an audio file this app can read (or it is corrupt); use WAV, "
                     "FLAC, MP3, OGG or M4A. Decoders said: {detail}",
    "ref_no_samples_decoded": "reference audio {name} decodes to no audio samples (empty or corrupt file)",
    "ref_no_samples": "reference audio {name} has no samples",
    "ref_truncated": "reference audio {name} is truncated: its header claims {claimed} but only {decoded_s:.2f} s "
                     "could be decoded; using what is there",
    "ref_claimed_s": "{seconds:.2f} s",
    "ref_claimed_more": "more",
    "ref_truncated_damaged": "reference audio {name} is truncated or damaged: decoding stopped after "
                             "{decoded_s:.2f} s ({detail}); using what is there",
    "ref_head_only_read": "reference audio {name} is long; only its first {max_decode_s:g} s were read",
    "ref_head_only": "reference audio {name} is long; only its first {max_decode_s:g} s are used",
    "ref_unreadable": "reference audio {name} cannot be read: {reason}",
    "ref_bad_rate": "reference audio {name}: sampling_rate={rate!r} must be a positive integer (Hz)",
    "ref_bad_shape": "reference audio {name}: samples of shape {shape} must be (n,) or (n, channels)",
    "ref_bad_dtype": "reference audio {name}: samples of dtype {dtype} are not audio; pass float or integer PCM "
                     "samples",
    # cleanup and quality (tts_app.audio.reference)
    "ref_corrupt": "reference audio {name} is corrupt: {share:.1%} of its samples are NaN or infinite (at most "
                   "{limit:.1%} can be repaired)",
    "ref_nonfinite": "reference audio {name} had {count} NaN/infinite samples; they were set to silence",
    "ref_clipped": "reference audio {name} is clipped ({share:.1%} of samples flat-topped at the peak); the cloned "
                   "voice may sound distorted, record at a lower level",
    "ref_channels_cancel": "reference audio {name}: its channels cancel when mixed (polarity-inverted stereo); "
                           "channel {channel} was used alone",
    "ref_silent": "reference audio {name} is digital silence: no speech found; upload a clip with at least "
                  "{min_s:g} s of speech",
    "ref_hum": "reference audio {name} has {hz:g} Hz mains hum; it was filtered out (notches at {notches} Hz)",
    "ref_hum_kept": "reference audio {name} has {hz:g} Hz mains hum; it was left in (reference cleanup auto; choose "
                    "full to filter it out)",
    "ref_too_short_sound": "reference audio {name} is too short: it holds about {found_s:.1f} s of sound; at least "
                           "{min_s:g} s of speech is needed (5-15 s works best)",
    "ref_no_speech": "reference audio {name}: no speech found (silent, noise or music only, or a corrupt file); "
                     "upload a clip of one person speaking",
    "ref_too_short": "reference audio {name} is too short: {found_s:.2f} s of speech; at least {min_s:g} s is "
                     "needed (5-15 s works best)",
    "ref_quiet": "reference audio {name} is quiet (speech at {level:.0f} dBFS); it was amplified, which also raises "
                 "noise",
    "ref_louder": "; the background is as loud as the voice",
    "ref_music": "reference audio {name} has a music-like background (estimated SNR {snr:.0f} dB; music or "
                 "hum{louder}); the cloned voice may carry it, use a clip without background music",
    "ref_noisy": "reference audio {name} has a noisy background (estimated SNR {snr:.0f} dB, below the {min_snr:g} "
                 "dB a clean recording has{louder}); the cloned voice may carry the noise, use a cleaner recording",
    "ref_band_limited": "reference audio {name} has no sound above about {khz:.1f} kHz (telephone or low-bitrate "
                        "audio); the cloned voice will sound as muffled, use a full-band recording (at least "
                        "{min_khz:g} kHz)",
    "ref_no_pause": "reference audio {name} has no pause in its first {max_s:g} s of speech; it was cut at the "
                    "quietest point instead",
    "ref_cropped": "reference audio {name} has {speech_s:.1f} s of speech; it was cropped {where} to {kept_s:.1f} s "
                   "(a reference uses at most {max_s:g} s of speech)",
    "ref_at_quietest": "at its quietest point",
    "ref_at_pause": "at a pause",
    "ref_text_shortened": "the reference text was shortened to its first {count} sentence(s), which match the kept "
                          "{kept_s:.1f} s of reference audio {name}",
    "ref_text_dropped": "the reference text of {name} is not used: the audio was cropped to {kept_s:.1f} s and no "
                        "sentence end of the text matches the crop. Give the transcript of only the kept part, or a "
                        "clip with at most {max_s:g} s of speech",
    # what reference cleanup changed (``ReferenceReport.changes``)
    "ref_change_nonfinite": "{count} NaN/Inf samples zeroed",
    "ref_change_mixed": "{channels} channels mixed to mono",
    "ref_change_channel": "channel {channel} of {channels} used alone",
    "ref_change_highpass": "{cutoff_hz:g} Hz high-pass",
    "ref_change_hum": "mains hum notched out at {notches} Hz",
    "ref_change_resampled": "resampled {source_hz} -> {target_hz} Hz",
    "ref_change_trimmed": "trimmed to the speech: {start_s:.2f}-{end_s:.2f} s kept{cropped}",
    "ref_change_cropped": " (cropped to {max_s:g} s of speech)",
    "ref_change_pauses": "{count} pause(s) shortened to {max_ms} ms",
    "ref_change_loudness": "speech loudness {gain_db:+.1f} dB (to {target_dbfs:g} dBFS)",
}

ZH: dict[str, str] = {
    "ref_empty_upload": "参考音频 {name} 是空文件（0 字节）；请上传含有语音的 WAV/FLAC/MP3/OGG/M4A 文件",
    "ref_empty": "参考音频 {name} 是空文件（0 字节）；请使用含有语音的 WAV/FLAC/MP3/OGG/M4A 文件",
    "ref_missing": "参考音频 {name} 不存在或不是文件",
    "ref_unsupported_source": "参考音频 {name}：不支持的来源类型 {kind}；请传入路径、字节或 (samples, sampling_rate)",
    "ref_not_audio": "参考音频 {name} 不是本应用能读取的音频文件（或已损坏）；请使用 WAV、FLAC、MP3、OGG 或 M4A。"
                     "解码器的信息：{detail}",
    "ref_no_samples_decoded": "参考音频 {name} 解码后没有任何音频样本（文件为空或已损坏）",
    "ref_no_samples": "参考音频 {name} 没有样本",
    "ref_truncated": "参考音频 {name} 不完整：文件头声称 {claimed}，但只能解码 {decoded_s:.2f} 秒；按已有部分使用",
    "ref_claimed_s": "{seconds:.2f} 秒",
    "ref_claimed_more": "更长",
    "ref_truncated_damaged": "参考音频 {name} 不完整或已损坏：解码在 {decoded_s:.2f} 秒处停止（{detail}）；按已有部分使用",
    "ref_head_only_read": "参考音频 {name} 太长；只读取了前 {max_decode_s:g} 秒",
    "ref_head_only": "参考音频 {name} 太长；只使用前 {max_decode_s:g} 秒",
    "ref_unreadable": "无法读取参考音频 {name}：{reason}",
    "ref_bad_rate": "参考音频 {name}：sampling_rate={rate!r} 必须是正整数（Hz）",
    "ref_bad_shape": "参考音频 {name}：形状为 {shape} 的样本必须是 (n,) 或 (n, channels)",
    "ref_bad_dtype": "参考音频 {name}：dtype 为 {dtype} 的样本不是音频；请传入浮点或整数 PCM 样本",
    "ref_corrupt": "参考音频 {name} 已损坏：{share:.1%} 的样本是 NaN 或无穷大（最多只能修复 {limit:.1%}）",
    "ref_nonfinite": "参考音频 {name} 有 {count} 个 NaN/无穷大样本；已改为静音",
    "ref_clipped": "参考音频 {name} 有削波（{share:.1%} 的样本在峰值处被削平）；克隆的声音可能失真，请用较低的音量录制",
    "ref_channels_cancel": "参考音频 {name}：各声道混合时相互抵消（反相立体声）；只使用了第 {channel} 声道",
    "ref_silent": "参考音频 {name} 是数字静音：没有找到语音；请上传至少含 {min_s:g} 秒语音的音频",
    "ref_hum": "参考音频 {name} 有 {hz:g} Hz 电源嗡声；已滤除（陷波频率 {notches} Hz）",
    "ref_hum_kept": "参考音频 {name} 有 {hz:g} Hz 电源嗡声；已保留（参考音频清理为 auto；选 full 可滤除）",
    "ref_too_short_sound": "参考音频 {name} 太短：只有约 {found_s:.1f} 秒声音；至少需要 {min_s:g} 秒语音（5-15 秒效果最好）",
    "ref_no_speech": "参考音频 {name}：没有找到语音（只有静音、噪声或音乐，或文件已损坏）；请上传一个人说话的音频",
    "ref_too_short": "参考音频 {name} 太短：语音只有 {found_s:.2f} 秒；至少需要 {min_s:g} 秒（5-15 秒效果最好）",
    "ref_quiet": "参考音频 {name} 音量太小（语音电平 {level:.0f} dBFS）；已放大，噪声也随之变大",
    "ref_louder": "；背景和人声一样响",
    "ref_music": "参考音频 {name} 有类似音乐的背景（估计信噪比 {snr:.0f} dB；音乐或嗡声{louder}）；克隆的声音可能带上它，"
                 "请使用没有背景音乐的音频",
    "ref_noisy": "参考音频 {name} 背景噪声较大（估计信噪比 {snr:.0f} dB，低于干净录音应有的 {min_snr:g} dB{louder}）；"
                 "克隆的声音可能带上噪声，请使用更干净的录音",
    "ref_band_limited": "参考音频 {name} 在约 {khz:.1f} kHz 以上没有声音（电话或低码率音频）；克隆的声音也会发闷，"
                        "请使用全频带录音（至少 {min_khz:g} kHz）",
    "ref_no_pause": "参考音频 {name} 的前 {max_s:g} 秒语音中没有停顿；改为在最安静处截断",
    "ref_cropped": "参考音频 {name} 有 {speech_s:.1f} 秒语音；已{where}裁剪为 {kept_s:.1f} 秒（参考音频最多使用 "
                   "{max_s:g} 秒语音）",
    "ref_at_quietest": "在最安静处",
    "ref_at_pause": "在停顿处",
    "ref_text_shortened": "参考文本已缩短为前 {count} 句，与参考音频 {name} 保留的 {kept_s:.1f} 秒相符",
    "ref_text_dropped": "{name} 的参考文本未被使用：音频已裁剪为 {kept_s:.1f} 秒，而文本中没有与裁剪处对应的句末。"
                        "请只给出保留部分的文字，或使用语音不超过 {max_s:g} 秒的音频",
    "ref_change_nonfinite": "{count} 个 NaN/无穷大样本已置零",
    "ref_change_mixed": "{channels} 个声道已混为单声道",
    "ref_change_channel": "只使用了 {channels} 个声道中的第 {channel} 个",
    "ref_change_highpass": "{cutoff_hz:g} Hz 高通滤波",
    "ref_change_hum": "已滤除 {notches} Hz 的电源嗡声",
    "ref_change_resampled": "重采样 {source_hz} -> {target_hz} Hz",
    "ref_change_trimmed": "已裁到语音部分：保留 {start_s:.2f}-{end_s:.2f} 秒{cropped}",
    "ref_change_cropped": "（裁剪为 {max_s:g} 秒语音）",
    "ref_change_pauses": "{count} 处停顿缩短为 {max_ms} 毫秒",
    "ref_change_loudness": "语音响度 {gain_db:+.1f} dB（到 {target_dbfs:g} dBFS）",
}

messages.register(__name__, EN, ZH)


@dataclass(frozen=True)
class Notice:
    """One warning or refusal about a reference clip.

    Attributes:
        code: stable identifier of the kind of problem (e.g. "clipped", "band_limited", "too_short"); for tests,
            filters and metrics.
        values: the numbers and words the message shows (a value may itself be a
            ``tts_app.frontend.messages.Notice``, rendered in the same language).
        key: the message's key in the tables above without its ``ref_`` prefix (default: ``code``; two wordings
            of one kind of problem, e.g. "too_short" and "too_short_sound", share the code).
    """

    code: str
    values: dict[str, Any] = field(default_factory=dict)
    key: str | None = None

    def message(self, name: str) -> messages.Notice:
        """The message for a clip called ``name``: a ``str`` (English) that renders in either language."""
        return messages.Notice("ref_" + (self.key or self.code), name=repr(name), **self.values)

    def render(self, name: str, lang: str = "en") -> str:
        """The message for a clip called ``name``, in ``lang``."""
        return self.message(name).render(lang)


def refusal(code: str, name: str, *, key: str | None = None, report: Any = None,
            **values: Any) -> ReferenceAudioError:
    """A ``ReferenceAudioError`` for ``name`` carrying its ``Notice`` (and the partial report, when one was made),
    so a cached refusal can be shown under another name (``ReferenceAudioError.for_name``) and in either
    language (``tts_app.frontend.messages.localize``)."""
    notice = Notice(code, values, key)
    return ReferenceAudioError(notice.message(name), report=report, notice=notice)
