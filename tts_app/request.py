"""Plain-data request / result types shared by the UI, CLI, job runner and engine.

Vocabulary (see ../shared/STYLE.md): a *request* is one user synthesis; a *segment* is one text chunk of a request
after splitting; a *batch* is the segments run in one forward call; a *job* is a JSONL file of requests.
No torch import here.
"""

from __future__ import annotations

import enum
import math
import numbers
import uuid
from dataclasses import dataclass, field, replace

import numpy as np

from tts_app.config import (DEFAULT_CHAPTER_PAUSE_MS, DEFAULT_REFERENCE_CLEANUP, MAX_LOUDNESS_LUFS, MAX_SPEED,
                            MIN_LOUDNESS_LUFS, MIN_MAX_SEGMENT_CHARS, MIN_SPEED, REFERENCE_CLEANUPS, REQUEST_LIMITS,
                            FrontendConfig)
from tts_app.errors import ConfigError
from tts_app.finish import Finish, FinishReason
from tts_app.frontend.messages import Notice, register
from tts_app.quality.policy import (DEFAULT_TAKE_CHECK, DEFAULT_TAKE_MAX_ERROR_RATE, DEFAULT_TAKE_MAX_REROLLS,
                                    DEFAULT_TAKE_MIN_SIMILARITY, MAX_TAKE_REROLLS, TAKE_CHECKS)

# Upper bound of ``SynthesisParams.num_beams``: each beam is a row of the running batch (its own KV cache), so a
# request with n beams costs n rows; 8 is far above what beam-searching TTS models use (IndexTTS 2: 3).
MAX_NUM_BEAMS = 8
# Upper bound of ``SynthesisParams.num_diffusion_steps``: 4 x IndexTTS 2's own 25 steps; beyond it a request only costs
# time (the Euler solver of a flow-matching model converges well before).
MAX_NUM_DIFFUSION_STEPS = 100

# The settings' and emotion control's refusals in English and Chinese (``tts_app.frontend.messages``); the knob
# names are the fields a JSONL line and the API use.
PARAM_EN: dict[str, str] = {
    "param_segment_durations_type": "segment_durations_s={value!r} must be a list of numbers of seconds, one per line "
                                    "of the text",
    "param_temperature": "temperature={value} must be > 0 (use greedy=True for argmax decoding)",
    "param_top_p": "top_p={value} must be in (0, 1]",
    "param_top_k": "top_k={value} must be >= 1",
    "param_max_new_tokens": "max_new_tokens={value} must be >= 1",
    "param_num_beams": "num_beams={value} must be in 1..{maximum}",
    "param_length_penalty": "length_penalty={value} must be a finite number",
    "param_num_diffusion_steps": "num_diffusion_steps={value} must be an integer in 1..{maximum}",
    "param_max_segment_chars": "max_segment_chars={value} must be >= {minimum} (or 0: the model's own segment length)",
    "param_reference_cleanup": "reference_cleanup={value!r} is not one of {choices}",
    "param_take_check": "take_check={value!r} is not one of {choices}",
    "param_take_max_rerolls": "take_max_rerolls={value} must be a whole number in 0..{maximum}",
    "param_take_max_error_rate": "take_max_error_rate={value} must be a number >= 0 (the CER / WER above which a take "
                                 "is re-generated, e.g. 0.3)",
    "param_take_min_similarity": "take_min_similarity={value} must be in [0, 1] (the speaker similarity below which "
                                 "a take is re-generated, e.g. 0.7)",
    "param_pause": "pause_between_segments_ms={value} must be >= 0",
    "param_speed": "speed={value} is outside {low}-{high} (x the model's own pace); beyond that speech stops "
                   "sounding natural",
    "param_duration": "duration_s={value} must be > 0 seconds",
    "param_speed_and_duration": "give either speed or duration_s, not both",
    "param_loudness": "loudness_lufs={value} is outside {low}..{high} LUFS (-23 is EBU R128 broadcast, -16 podcasts)",
    "param_chapter_pause": "chapter_pause_ms={value} must be >= 0",
    "param_segment_durations": "segment_durations_s={value} must hold one duration > 0 seconds per line",
    "param_durations_and_tempo": "give segment_durations_s (per line) or speed / duration_s (whole request), not both",
    "param_emo_clip": "an emotion reference clip",
    "param_emo_vector": "an emotion vector",
    "param_emo_from_text": "emotion from text",
    "param_emo_none": "emotion control needs a source: an emotion reference clip, an emotion vector or emotion from "
                      "text",
    "param_emo_many": "emotion control got {first} and {second}; choose one of them",
    "param_emo_length": "emotion vector has {count} values; give {wanted}, one per emotion ({names})",
    "param_emo_range": "emotion vector values must be in [0, 1]: {bad}",
    "param_emo_weight": "emotion weight {value} must be in [0, 1]",
    "param_emo_text": "emotion text is only used with emotion from text; set from_text or drop the text",
}
PARAM_ZH: dict[str, str] = {
    "param_segment_durations_type": "segment_durations_s={value!r} 必须是秒数列表，文本每行一个",
    "param_temperature": "temperature={value} 必须 > 0（要取最大概率请用 greedy=True）",
    "param_top_p": "top_p={value} 必须在 (0, 1] 之间",
    "param_top_k": "top_k={value} 必须 >= 1",
    "param_max_new_tokens": "max_new_tokens={value} 必须 >= 1",
    "param_num_beams": "num_beams={value} 必须在 1..{maximum} 之间",
    "param_num_diffusion_steps": "num_diffusion_steps={value} 必须是 1..{maximum} 之间的整数",
    "param_length_penalty": "length_penalty={value} 必须是有限的数",
    "param_max_segment_chars": "max_segment_chars={value} 必须 >= {minimum}（或 0：使用模型自己的分段长度）",
    "param_reference_cleanup": "reference_cleanup={value!r} 不是以下之一：{choices}",
    "param_take_check": "take_check={value!r} 不是以下之一：{choices}",
    "param_take_max_rerolls": "take_max_rerolls={value} 必须是 0..{maximum} 之间的整数",
    "param_take_max_error_rate": "take_max_error_rate={value} 必须是 >= 0 的数（CER / WER 高于它的音频会重新生成，例如 0.3）",
    "param_take_min_similarity": "take_min_similarity={value} 必须在 [0, 1] 之间（说话人相似度低于它的音频会重新生成，例如 0.7）",
    "param_pause": "pause_between_segments_ms={value} 必须 >= 0",
    "param_speed": "speed={value} 超出 {low}-{high}（相对模型原速的倍数）；超出后语音不再自然",
    "param_duration": "duration_s={value} 必须大于 0 秒",
    "param_speed_and_duration": "speed 和 duration_s 只能给一个",
    "param_loudness": "loudness_lufs={value} 超出 {low}..{high} LUFS（广播 EBU R128 为 -23，播客 -16）",
    "param_chapter_pause": "chapter_pause_ms={value} 必须 >= 0",
    "param_segment_durations": "segment_durations_s={value} 必须为每行给一个大于 0 秒的时长",
    "param_durations_and_tempo": "segment_durations_s（每行）与 speed / duration_s（整段）只能选一种",
    "param_emo_clip": "情感参考音频",
    "param_emo_vector": "情感向量",
    "param_emo_from_text": "从文本判断情感",
    "param_emo_none": "情感控制需要一个来源：情感参考音频、情感向量或从文本判断情感",
    "param_emo_many": "情感控制同时给了{first}和{second}；请只选一个",
    "param_emo_length": "情感向量有 {count} 个值；需要 {wanted} 个，每种情感一个（{names}）",
    "param_emo_range": "情感向量的值必须在 [0, 1] 之间：{bad}",
    "param_emo_weight": "情感权重 {value} 必须在 [0, 1] 之间",
    "param_emo_text": "情感文本只在从文本判断情感时使用；请设置 from_text，或删去该文本",
}
register(__name__, PARAM_EN, PARAM_ZH)

def _finite_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


class RequestStatus(str, enum.Enum):
    """How a request ended (coarse; ``SynthesisResult.finish`` says why)."""

    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class StopReason(str, enum.Enum):
    """Why decoding of one row (one segment) stopped.

    A plain value the adapter reports per row (``TTSAdapter.stop_reasons``) and the engine turns into
    ``SegmentTiming.stop_reason`` plus a per-segment warning; a step-wise (continuous batching) decode loop reports
    the same value for each row the step finishes.

    Members:
        END_OF_SPEECH: the model ended the row itself (its end-of-speech / end-of-audio token).
        MAX_NEW_TOKENS: the row was cut at ``max_new_tokens`` decode steps; its audio may end mid-word.
    """

    END_OF_SPEECH = "end_of_speech"
    MAX_NEW_TOKENS = "max_new_tokens"


class Priority(enum.IntEnum):
    """Lower value is served first. Interactive (UI single synthesis) goes ahead of batch-job segments."""

    INTERACTIVE = 0
    JOB = 1


@dataclass(frozen=True)
class SynthesisParams:
    """Per-call generation knobs. ``None`` means "not given": the loaded checkpoint's default applies
    (``ModelFacts.generation_defaults``, resolved once per model from its generation config;
    ``GenerationDefaults.resolve`` fills them in).

    Attributes:
        seed: base seed of the request; segment ``i`` uses ``seed + i`` so a segment's audio never depends on its
            batch-mates.
        greedy: True = greedy decoding (argmax), False = sampling, None = the checkpoint's choice (its
            ``do_sample``). Greedy output is deterministic and equal batched or one by one, cache on or off.
        temperature, top_p, top_k: sampling knobs where the model has them (ignored when ``greedy``).
        cfg_scale: classifier-free guidance scale where the model has it.
        max_new_tokens: cap on decode steps per segment.
        num_beams: beam search width where the model has it (IndexTTS 2: upstream's default is 3 beams, sampled);
            1 = no beams. With ``greedy`` the beams are kept by score (beam search), else drawn (beam sampling), as
            transformers' ``generate(num_beams=..., do_sample=...)``.
        length_penalty: exponent of the length a finished beam's log-probability is divided by (transformers'
            ``length_penalty``; 0 = plain sum, upstream IndexTTS 2's default); only with ``num_beams`` > 1.
        num_diffusion_steps: Euler steps of the flow-matching stage where the model has one (IndexTTS 2's s2mel:
            upstream's 25; its fast preset, vLLM-Omni's, is 12: about half that stage's time, a slightly coarser
            mel). Recorded with the result like every knob.
        use_cache: KV cache on (fast) or off (recomputes the whole prefix each step; same output).
        prompt_cache: long-text prompt cache where the model has one (GLM-TTS: upstream's ``--use_cache``): each
            finished segment's text and speech tokens join the prompt of the request's next segment (oldest dropped
            past the model's input budget), which keeps voice and prosody continuous across segments; the segments of
            a request then run one after another. Not the KV cache (``use_cache``). None = the model's default
            (GLM-TTS: on, as upstream); ignored by families without one.
        max_segment_chars: an optional character limit of the user's own for a segment, in place of the model's
            (``ModelFacts.max_segment_chars``; sentences are packed up to it; a token limit such as IndexTTS 2's
            ``max_segment_tokens`` still applies). None or 0 = the model's own segment unit and limit.
        pause_between_segments_ms: silence inserted between consecutive segments of one request, in ms.
        reference_cleanup: what is done to the reference clip before the model hears it, one of
            ``tts_app.config.REFERENCE_CLEANUPS`` ("auto": checks and report, only the changes the model's upstream
            tool makes; "full": trim, filter, shorten pauses, level; "off": as given). Read by whoever prepares the
            reference (UI, ``synth``, job runner, API) through ``ReferencePreparer.prepare(cleanup=...)``.
        speed: tempo of the whole request's audio, x the model's own pace (1.25 = 25 % faster, 20 % shorter), in
            [MIN_SPEED, MAX_SPEED]; pitch is kept (``tts_app.audio.effects``). None = as generated.
        duration_s: target length of the whole request's audio in seconds (dubbing); the tempo factor it needs
            must lie in the speed range. Not together with ``speed``. None = as generated.
        loudness_lufs: integrated loudness (ITU-R BS.1770) the request's audio is normalised to, in LUFS, in
            [MIN_LOUDNESS_LUFS, MAX_LOUDNESS_LUFS]; None = not normalised.
        chapter_pause_ms: silence after each chapter of a text with chapters (``tts_app.longform``), in ms.
        segment_durations_s: dubbing cues: a target length in seconds for each line of the text, in order (every
            non-blank line is then one segment, stretched on its own to its target, pitch kept; the lines are
            joined with ``pause_between_segments_ms``). The factor each line needs must lie in the speed range;
            not with ``speed`` / ``duration_s``, nor with a dialogue. None = no per-line targets.
        segment_context: long text in one voice: each segment of the request hears the earlier segments' text and
            generated audio as context, by the family's own mechanism (``ModelFacts.supports_segment_context``: CSM's
            earlier conversation turns, Higgs Audio's earlier chat turns as Boson AI's long-form generation builds
            them); the segments then run one after another (segment i+1 starts once segment i's audio exists), still
            batched with other requests' rows. Only the most recent segments that fit the model's input limit are
            carried (``tts_app.engine.input.InputProcessor.context_window``). On a family whose long-form context
            is its prompt cache (GLM-TTS: ``prompt_cache``, upstream's ``--use_cache``) it means that cache on,
            which is its default (``InputProcessor.context_by_prompt_cache``); with ``prompt_cache=False`` in the
            same request it is ignored with a warning. Ignored, with a warning, by a family without such a
            mechanism and by a dialogue. False (the default) = every segment generated on its own, as
            before.
        take_check: the take policy (``tts_app.quality.policy``), one of ``TAKE_CHECKS``: "off" (no scoring);
            "score" (every segment's take scored off the engine's worker thread, the scores recorded); "reroll"
            (scored, and a segment below a threshold generated again with a new seed, up to ``take_max_rerolls``
            times, the best take kept; sampled decoding only, a greedy take is the same with any seed; a stream
            then sends only the final audio, ``needs_whole_clip``).
        take_max_rerolls: most re-generations of one segment under "reroll", in 0..MAX_TAKE_REROLLS.
        take_max_error_rate: a take whose ASR CER (Chinese) / WER (other) is above this is below threshold.
        take_min_similarity: a take whose speaker similarity to the reference is below this is below threshold
            (Resemblyzer cosine, in [0, 1]).

    Tempo, loudness and chapter pauses act after generation: they never change which segments share a batch.
    """

    seed: int = 0
    greedy: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    cfg_scale: float | None = None
    max_new_tokens: int | None = None
    num_beams: int | None = None
    length_penalty: float | None = None
    num_diffusion_steps: int | None = None
    use_cache: bool = True
    prompt_cache: bool | None = None
    max_segment_chars: int | None = None
    pause_between_segments_ms: int = FrontendConfig.default_pause_ms
    reference_cleanup: str = DEFAULT_REFERENCE_CLEANUP
    speed: float | None = None
    duration_s: float | None = None
    loudness_lufs: float | None = None
    chapter_pause_ms: int = DEFAULT_CHAPTER_PAUSE_MS
    segment_durations_s: tuple[float, ...] | None = None
    segment_context: bool = False
    take_check: str = DEFAULT_TAKE_CHECK
    take_max_rerolls: int = DEFAULT_TAKE_MAX_REROLLS
    take_max_error_rate: float = DEFAULT_TAKE_MAX_ERROR_RATE
    take_min_similarity: float = DEFAULT_TAKE_MIN_SIMILARITY

    @property
    def needs_whole_clip(self) -> bool:
        """True when the request's post-processing changes audio after decoding (a tempo other than 1, a target
        duration, loudness normalisation: ``tts_app.audio.effects.apply_request_effects`` on the whole joined clip;
        per-line target durations, each segment stretched once complete), or a segment's take may be replaced by a
        re-roll (``take_check`` "reroll"): such a request streams no partial audio, only its final audio once done
        (``tts_app.engine.streaming``)."""
        return (self.speed is not None and self.speed != 1.0) or self.duration_s is not None \
            or self.loudness_lufs is not None or self.segment_durations_s is not None or self.take_check == "reroll"

    def __post_init__(self) -> None:
        if self.segment_durations_s is not None:
            try:
                if isinstance(self.segment_durations_s, (str, bytes)):
                    raise TypeError("a string")
                durations = tuple(float(v) for v in self.segment_durations_s)
            except (TypeError, ValueError):
                raise ConfigError("segment_durations_s", Notice("param_segment_durations_type",
                                                                value=self.segment_durations_s)) from None
            object.__setattr__(self, "segment_durations_s", durations)
        speed, duration_s, loudness, durations = (self.speed, self.duration_s, self.loudness_lufs,
                                                  self.segment_durations_s)
        checks = [  # (field, ok, message key of PARAM_EN / PARAM_ZH, its values)
            ("temperature", self.temperature is None or self.temperature > 0, "param_temperature",
             dict(value=self.temperature)),
            ("top_p", self.top_p is None or 0 < self.top_p <= 1, "param_top_p", dict(value=self.top_p)),
            ("top_k", self.top_k is None or self.top_k >= 1, "param_top_k", dict(value=self.top_k)),
            ("max_new_tokens", self.max_new_tokens is None or self.max_new_tokens >= 1, "param_max_new_tokens",
             dict(value=self.max_new_tokens)),
            ("num_beams", self.num_beams is None or 1 <= self.num_beams <= MAX_NUM_BEAMS, "param_num_beams",
             dict(value=self.num_beams, maximum=MAX_NUM_BEAMS)),
            ("length_penalty", self.length_penalty is None or math.isfinite(self.length_penalty),
             "param_length_penalty", dict(value=self.length_penalty)),
            ("num_diffusion_steps", self.num_diffusion_steps is None or (
                isinstance(self.num_diffusion_steps, numbers.Integral)
                and not isinstance(self.num_diffusion_steps, bool)
                and 1 <= self.num_diffusion_steps <= MAX_NUM_DIFFUSION_STEPS),
             "param_num_diffusion_steps", dict(value=self.num_diffusion_steps, maximum=MAX_NUM_DIFFUSION_STEPS)),
            ("max_segment_chars", self.max_segment_chars in (None, 0) or self.max_segment_chars >= MIN_MAX_SEGMENT_CHARS,
             "param_max_segment_chars", dict(value=self.max_segment_chars, minimum=MIN_MAX_SEGMENT_CHARS)),
            ("reference_cleanup", self.reference_cleanup in REFERENCE_CLEANUPS, "param_reference_cleanup",
             dict(value=self.reference_cleanup, choices=", ".join(REFERENCE_CLEANUPS))),
            ("take_check", self.take_check in TAKE_CHECKS, "param_take_check",
             dict(value=self.take_check, choices=", ".join(TAKE_CHECKS))),
            ("take_max_rerolls", isinstance(self.take_max_rerolls, numbers.Integral)
             and not isinstance(self.take_max_rerolls, bool) and 0 <= self.take_max_rerolls <= MAX_TAKE_REROLLS,
             "param_take_max_rerolls", dict(value=self.take_max_rerolls, maximum=MAX_TAKE_REROLLS)),
            ("take_max_error_rate", _finite_number(self.take_max_error_rate) and self.take_max_error_rate >= 0,
             "param_take_max_error_rate", dict(value=self.take_max_error_rate)),
            ("take_min_similarity", _finite_number(self.take_min_similarity) and 0 <= self.take_min_similarity <= 1,
             "param_take_min_similarity", dict(value=self.take_min_similarity)),
            ("pause_between_segments_ms", self.pause_between_segments_ms >= 0, "param_pause",
             dict(value=self.pause_between_segments_ms)),
            ("speed", speed is None or MIN_SPEED <= speed <= MAX_SPEED, "param_speed",
             dict(value=speed, low=MIN_SPEED, high=MAX_SPEED)),
            ("duration_s", duration_s is None or duration_s > 0, "param_duration", dict(value=duration_s)),
            ("duration_s", speed is None or duration_s is None, "param_speed_and_duration", {}),
            ("loudness_lufs", loudness is None or MIN_LOUDNESS_LUFS <= loudness <= MAX_LOUDNESS_LUFS,
             "param_loudness", dict(value=loudness, low=MIN_LOUDNESS_LUFS, high=MAX_LOUDNESS_LUFS)),
            ("chapter_pause_ms", self.chapter_pause_ms >= 0, "param_chapter_pause", dict(value=self.chapter_pause_ms)),
            ("segment_durations_s", durations is None or (
                len(durations) > 0 and all(math.isfinite(v) and v > 0 for v in durations)),
             "param_segment_durations", dict(value=durations)),
            ("segment_durations_s", durations is None or (speed is None and duration_s is None),
             "param_durations_and_tempo", {}),
        ]
        for name, ok, key, values in checks:
            if not ok:
                raise ConfigError(name, Notice(key, **values))
        self._check_limits()

    def _check_limits(self) -> None:
        """``REQUEST_LIMITS``: the seed's range and what the request may ask for (decode steps, pauses, target
        durations), so an absurd value is refused before any work.

        Raises:
            ConfigError: the first value over its limit (a ``Notice``: English, or ``render("zh")``).
        """
        limits = REQUEST_LIMITS
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) \
                or not 0 <= self.seed <= limits.max_seed:
            raise ConfigError("seed", Notice("limit_seed", seed=self.seed, max_seed=limits.max_seed))
        if self.max_new_tokens is not None and self.max_new_tokens > limits.max_new_tokens:
            raise ConfigError("max_new_tokens", Notice("limit_max_new_tokens", value=self.max_new_tokens,
                                                       max_value=limits.max_new_tokens))
        for name in ("pause_between_segments_ms", "chapter_pause_ms"):
            if getattr(self, name) > limits.max_pause_ms:
                raise ConfigError(name, Notice("limit_pause", name=name, value=getattr(self, name),
                                               max_ms=limits.max_pause_ms))
        for name, value_s in (("duration_s", self.duration_s),
                              ("segment_durations_s", sum(self.segment_durations_s or ()) or None)):
            if value_s is not None and value_s > limits.max_duration_s:
                raise ConfigError(name, Notice("limit_duration", name=name, value_s=round(value_s, 3),
                                               max_s=limits.max_duration_s))

    def batch_key(self) -> tuple:
        """Segments can share one batch only when every generation knob except the seed is equal."""
        return (self.greedy, self.temperature, self.top_p, self.top_k, self.cfg_scale, self.max_new_tokens,
                self.num_beams, self.length_penalty, self.num_diffusion_steps,
                self.use_cache, self.prompt_cache)

    def with_seed(self, seed: int) -> "SynthesisParams":
        return replace(self, seed=seed)


@dataclass(frozen=True)
class ReferenceAudio:
    """A cleaned reference clip.

    Attributes:
        samples: float32 mono waveform, shape ``(num_samples,)``, values in [-1, 1].
        sampling_rate: Hz.
        key: content hash of the original file/array plus processing settings (cache key); "" if unknown.
    """

    samples: np.ndarray
    sampling_rate: int
    key: str = ""

    @property
    def duration_s(self) -> float:
        return len(self.samples) / float(self.sampling_rate)


#: The eight emotions of IndexTTS 2's emotion vector, in its order (indextts2-inference ``infer_v2.py``:
#: ``[happy, angry, sad, afraid, disgusted, melancholic, surprised, calm]``).
EMOTION_NAMES = ("happy", "angry", "sad", "afraid", "disgusted", "melancholic", "surprised", "calm")


@dataclass(frozen=True)
class EmotionControl:
    """How a request should sound, for a model with emotion control (``ModelFacts.supports_emotion``).

    Exactly one source: an emotion reference clip, an emotion vector, or emotion read from text by the checkpoint's
    emotion model (``ModelFacts.supports_emotion_text``).

    Attributes:
        reference_audio: a clip whose emotion to copy (cleaned, at the model's sampling rate), or None.
        vector: one weight per name of ``EMOTION_NAMES``, each in [0, 1], or None.
        weight: strength in [0, 1]: how far the clip's or vector's emotion replaces the voice reference's own
            (IndexTTS 2's ``emo_alpha``); 1.0 = fully.
        from_text: read the emotion vector from ``text`` with the checkpoint's emotion model.
        text: the text to read the emotion from; None = the request's own text.

    Raises:
        ConfigError: (an ``InputError``; ``field`` names the bad part) no source or more than one; a vector of the
            wrong length or with values outside [0, 1]; a weight outside [0, 1]; ``text`` without ``from_text``.
    """

    reference_audio: "ReferenceAudio | None" = None
    vector: tuple[float, ...] | None = None
    weight: float = 1.0
    from_text: bool = False
    text: str | None = None

    def __post_init__(self) -> None:
        vector = check_emotion(has_reference_audio=self.reference_audio is not None, vector=self.vector,
                               weight=self.weight, from_text=self.from_text, text=self.text)
        object.__setattr__(self, "vector", vector)


def check_emotion(*, has_reference_audio: bool, vector, weight: float, from_text: bool, text: str | None
                  ) -> tuple[float, ...] | None:
    """The rules of ``EmotionControl``, for callers that hold the clip as a file path (JSONL validation): exactly
    one source, a vector of ``len(EMOTION_NAMES)`` values in [0, 1], a weight in [0, 1], ``text`` only with
    ``from_text``. Returns the vector as a tuple of floats (or None).

    Raises:
        ConfigError: the rule broken (``field``: "emotion", "emotion_vector", "emotion_weight" or "emotion_text").
    """
    sources = [Notice(key) for key, given in (("param_emo_clip", has_reference_audio),
                                              ("param_emo_vector", vector is not None),
                                              ("param_emo_from_text", from_text)) if given]
    if not sources:
        raise ConfigError("emotion", Notice("param_emo_none"))
    if len(sources) > 1:
        raise ConfigError("emotion", Notice("param_emo_many", first=sources[0], second=sources[1]))
    if vector is not None:
        vector = tuple(float(v) for v in vector)
        if len(vector) != len(EMOTION_NAMES):
            raise ConfigError("emotion_vector", Notice("param_emo_length", count=len(vector),
                                                       wanted=len(EMOTION_NAMES), names=", ".join(EMOTION_NAMES)))
        bad = [f"{n}={v}" for n, v in zip(EMOTION_NAMES, vector) if not 0.0 <= v <= 1.0]  # NaN fails too
        if bad:
            raise ConfigError("emotion_vector", Notice("param_emo_range", bad=", ".join(bad)))
    if not 0.0 <= float(weight) <= 1.0:
        raise ConfigError("emotion_weight", Notice("param_emo_weight", value=weight))
    if text is not None and not from_text:
        raise ConfigError("emotion_text", Notice("param_emo_text"))
    return vector


#: Most speakers a dialogue script may have (VibeVoice, the family built for dialogue, takes up to 4 voices).
MAX_SPEAKERS = 4


@dataclass(frozen=True)
class Speaker:
    """One voice of a dialogue (``SynthesisRequest.speakers``).

    Attributes:
        name: how the segment table, subtitles and sidecar name this speaker ("Speaker 1", "张三", a voice name).
        reference_audio: the speaker's cleaned reference clip at the model's rate, or None (the model's own voice).
        reference_text: its transcript, if known.
    """

    name: str
    reference_audio: ReferenceAudio | None = None
    reference_text: str | None = None


@dataclass(frozen=True)
class Turn:
    """One turn of a dialogue script: ``speaker`` is a 0-based index into ``SynthesisRequest.speakers``; ``text``
    what that speaker says (raw text; the front end runs on each turn)."""

    speaker: int
    text: str


def check_text(text: str | None, field_name: str = "text") -> None:
    """Refuse, before any work, a text longer than ``REQUEST_LIMITS.max_text_chars`` (every door's limit) or one
    holding a lone surrogate (``"\\ud800"`` in JSON decodes to one; it cannot be encoded, so it would fail deep
    inside the front end or a response header).

    Raises:
        ConfigError: naming ``field_name`` and the problem (a ``Notice``, English or ``render("zh")``).
    """
    from tts_app.frontend.messages import Notice

    if text is None:
        return
    if len(text) > REQUEST_LIMITS.max_text_chars:
        raise ConfigError(field_name, Notice("limit_text", num_chars=len(text),
                                             max_chars=REQUEST_LIMITS.max_text_chars))
    bad = next((i for i, ch in enumerate(text) if "\ud800" <= ch <= "\udfff"), None)
    if bad is not None:
        raise ConfigError(field_name, Notice("lone_surrogate", field=field_name, position=bad + 1))


def check_audio_s(audio_s: float) -> None:
    """Stop a request that has generated more than ``REQUEST_LIMITS.max_audio_s`` seconds of audio (speech and
    pauses so far): call it as its segments finish, at the one place every door's requests pass (the engine).

    Args:
        audio_s: the request's audio so far, in s (samples / sampling rate).

    Raises:
        InputError: over the limit (a ``Notice`` naming the seconds, the limit and the fix; English, or
            ``render("zh")``).
    """
    from tts_app.errors import InputError
    from tts_app.frontend.messages import Notice

    if audio_s > REQUEST_LIMITS.max_audio_s:
        raise InputError(Notice("limit_audio", value_s=round(audio_s, 1), max_s=REQUEST_LIMITS.max_audio_s))


def new_request_id() -> str:
    return uuid.uuid4().hex[:12]


@dataclass
class SynthesisRequest:
    """One user synthesis.

    Attributes:
        text: the text to speak (raw user text; the engine runs the front end and segmentation).
        reference_audio: the voice to clone (already cleaned, at the model's sampling rate), or None for a model
            that can speak without one.
        reference_text: transcript of the reference audio, if known.
        params: generation knobs.
        emotion: emotion control (models with ``ModelFacts.supports_emotion`` only), or None for the voice
            reference's own emotion.
        priority: INTERACTIVE (UI) requests are scheduled ahead of JOB requests.
        request_id: short unique id used in logs and results.
        speakers, turns: a dialogue (``tts_app.dialogue`` parses scripts into them): each turn is spoken by its
            speaker's voice (``reference_audio`` / ``reference_text`` of the request are then unused, ``text`` is
            the script as written, for the record). Empty: a plain single-voice request.
    """

    text: str
    reference_audio: ReferenceAudio | None = None
    reference_text: str | None = None
    params: SynthesisParams = field(default_factory=SynthesisParams)
    emotion: EmotionControl | None = None
    priority: Priority = Priority.INTERACTIVE
    request_id: str = field(default_factory=new_request_id)
    speakers: tuple[Speaker, ...] = ()
    turns: tuple[Turn, ...] = ()

    def __post_init__(self) -> None:
        check_text(self.text)
        check_text(self.reference_text, "reference_text")


@dataclass(frozen=True)
class SegmentTiming:
    """Where one segment sits in the final audio, and how it was produced.

    Attributes:
        index: 0-based segment index within the request.
        text: the segment's text.
        start_s, end_s: position of the segment's audio in the request's final waveform, in seconds.
        batch_size: number of rows in the batch that produced it (continuous batching: the most rows it shared a
            decode step with).
        generate_s: wall-clock seconds of that batch's generate call.
        seed: the seed this segment was generated with (the request's seed + ``index``; a later take's seed when
            earlier takes ended speech at once, see ``retaken_seeds``).
        model_text: the text as the model received it (front-end rendering: homophone stand-ins, pinyin tokens).
        stop_reason: why its decoding stopped (``StopReason.MAX_NEW_TOKENS``: cut at the cap, a warning in
            ``SynthesisResult.warnings`` names the segment).
        max_new_tokens: the decode-step cap it ran under (after resolving the model default).
        speaker: the dialogue speaker's name (``Speaker.name``) of the segment, or None for a single-voice request
            (and for a dialogue segment that holds turns of several speakers: see ``turns``).
        chapter: 0-based chapter of the segment (``SynthesisResult.chapters``).
        turns: for a segment spoken in one generation from a family's multi-speaker prompt
            (``ModelFacts.max_dialogue_speakers``), per turn piece it holds ``(speaker name, source text)`` in order;
            ``text`` is then their texts joined by newlines. Empty for any other segment.
        retaken_seeds: seeds of earlier takes that ended speech at once and were taken again with another seed
            (``tts_app.engine.core.EngineCore._retake_empty``), in order; empty for most segments.
        takes: with a take policy (``SynthesisParams.take_check`` not "off"), every scored take of the segment in
            the order it was made: ``{"seed", "scores"`` (``TakeScores.to_dict``), ``"problems"`` (the thresholds
            it missed, ``tts_app.quality.policy.PROBLEMS``), ``"kept"}``; empty without one.
        scores: the kept take's scores with its ``problems`` (None without a take policy); ``problems`` non-empty
            = below threshold even after the re-rolls: a line that needs listening.
        rerolled: how many times the take policy generated the segment again (``len(takes) - 1``).
    """

    index: int
    text: str
    start_s: float
    end_s: float
    batch_size: int = 1
    generate_s: float = 0.0
    seed: int = 0
    model_text: str = ""
    stop_reason: StopReason = StopReason.END_OF_SPEECH
    max_new_tokens: int | None = None
    speaker: str | None = None
    chapter: int = 0
    turns: tuple[tuple[str, str], ...] = ()
    retaken_seeds: tuple[int, ...] = ()
    takes: tuple[dict, ...] = ()
    scores: dict | None = None
    rerolled: int = 0

    @property
    def needs_listening(self) -> bool:
        """The take policy left this segment below a threshold (or could not score it)."""
        return bool(self.scores and self.scores.get("problems"))

    @property
    def hit_max_new_tokens(self) -> bool:
        """True when the segment was cut at its ``max_new_tokens`` cap."""
        return self.stop_reason is StopReason.MAX_NEW_TOKENS


@dataclass(frozen=True)
class ChapterSpan:
    """Where one chapter lies in a request's audio: ``index`` (0-based), ``title`` (None when it has none),
    ``start_s`` / ``end_s`` (its first segment's start, its last segment's end), ``segments`` (their indices)."""

    index: int
    title: str | None
    start_s: float
    end_s: float
    segments: tuple[int, ...]


@dataclass
class SynthesisResult:
    """The outcome of one request.

    Attributes:
        request_id: the request's id.
        status: DONE, FAILED or CANCELLED.
        audio: float32 mono waveform, shape ``(num_samples,)`` (empty when failed).
        sampling_rate: Hz.
        segments: one timing per segment, in order.
        error: message when FAILED / CANCELLED (kept for callers that read a string; a ``Notice`` where the error
            had one). Doors map ``finish`` instead.
        finish: why the request ended (``tts_app.finish.Finish``: reason, code, field, message); derived from
            ``status`` / ``error`` when not given (DONE; CANCELLED; any other failure ERROR).
        warnings: notices for the user (front-end warnings, cropped reference, ...).
        normalized_text: the request's text after the front end's normalisation ("" when it failed before that).
        warnings: notices for the user (front-end warnings, text in a language the model was not trained on, a
            segment cut at its ``max_new_tokens`` cap, ...).
        effective_params: the knobs that ran: the request's ``params`` with every one not given set to the
            checkpoint's default (``GenerationDefaults.resolve``); None when the request failed before that.
        chapters: one ``ChapterSpan`` per chapter when the text has more than one (``tts_app.longform``), else
            empty.
        post_processing: what was done to the joined audio (``tts_app.audio.effects.RequestEffects.applied``:
            tempo factor and its source, loudness measured and applied); None when it failed before that.
    """

    request_id: str
    status: RequestStatus
    sampling_rate: int
    audio: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    segments: list[SegmentTiming] = field(default_factory=list)
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    normalized_text: str = ""
    effective_params: SynthesisParams | None = None
    post_processing: dict | None = None
    chapters: list[ChapterSpan] = field(default_factory=list)
    finish: Finish | None = None

    def __post_init__(self) -> None:
        if self.finish is None:
            if self.status is RequestStatus.DONE:
                self.finish = Finish.done()
            elif self.status is RequestStatus.CANCELLED:
                self.finish = Finish(FinishReason.CANCELLED, self.error or "", code="cancelled")
            else:
                self.finish = Finish.error(self.error or "")
        if self.error is None and self.finish.reason is not FinishReason.DONE:
            self.error = self.finish.message

    @property
    def duration_s(self) -> float:
        return len(self.audio) / float(self.sampling_rate) if self.sampling_rate else 0.0

    @property
    def ok(self) -> bool:
        return self.status is RequestStatus.DONE
