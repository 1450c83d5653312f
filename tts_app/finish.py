"""Why a request ended, as data: ``FinishReason`` and ``Finish`` (vLLM v1's ``FinishReason`` / ``RequestStatus``
idea, ``vllm/v1/engine/__init__.py``; ../shared/STYLE.md "Finish reasons are data").

Every ``SynthesisResult`` and every stream end carries a ``Finish``: the reason, the error's machine code and the
request field at fault, and the cause as a message that renders in the user's language. The reason is decided
where the error is caught, from the error's *type* (``Finish.from_error``), never by reading its message; every door
maps the reason (the page: a pop-up in the page's language; ``/v1``: the HTTP status; results.jsonl:
``finish_reason``; the CLI: its exit status) and none parses a message. No torch, no gradio.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tts_app.errors import (ConfigError, InputError, JobLineError, ReferenceAudioError, RequestCancelledError,
                            TTSAppError)
from tts_app.frontend.messages import Notice, message_of, register


class FinishReason(str, enum.Enum):
    """Why a request ended.

    Members:
        DONE: its audio is complete.
        REFUSED: the user's input cannot be served as given (bad text, knob, voice, reference, a target duration
            the speech cannot meet); the user fixes it. Never a server fault.
        TOO_LARGE: the request is larger than this server serves (text over the request limit, a segment over the
            memory budget); shorten or split it.
        OUT_OF_MEMORY: the device ran out of memory even for the request's segment alone, after the engine backed
            off (halved the batch, freed caches); may succeed later, on a less busy or larger device.
        CANCELLED: its caller cancelled it (Stop button, client gone).
        UNAVAILABLE: the engine was shutting down or shut down before the request finished; retry later.
        ERROR: anything else: a bug or an unexpected failure (logged with the request id).
        NO_AUDIO: the request ran but the model ended speech at once, so it holds no audio (decided at the doors by
            ``tts_app.outputs.no_audio_error``: a page error, ``synth`` exit 1, a failed JSONL line, /v1 422); the
            same text and seed end the same way, so the user changes the seed or the text.
    """

    DONE = "done"
    REFUSED = "refused"
    TOO_LARGE = "too_large"
    OUT_OF_MEMORY = "out_of_memory"
    CANCELLED = "cancelled"
    UNAVAILABLE = "unavailable"
    ERROR = "error"
    NO_AUDIO = "no_audio"


#: Notice codes of the request limits (``tts_app.config.RequestLimits``): their refusal is TOO_LARGE, not REFUSED.
LIMIT_CODES = frozenset({"limit_text", "limit_duration", "limit_silence", "limit_audio"})

# How each reason reads for a person, around its cause (the key is ``finish_<reason>``), and the engine's own causes.
FINISH_EN: dict[str, str] = {
    "finish_done": "done",
    "finish_refused": "this request cannot be synthesised as given: {cause}",
    "finish_too_large": "this request is larger than the server serves: {cause}",
    "finish_out_of_memory": "the server is short of device memory: {cause}; or try again later",
    "finish_cancelled": "the request was cancelled: {cause}",
    "finish_unavailable": "the server could not finish this request: {cause}; try again shortly",
    "finish_error": "synthesis failed: {cause}",
    "cause_cancelled": "its caller stopped it",
    "cause_engine_shut_down": "the engine shut down",
    "cause_oom_alone": "out of memory: segment {segment} ({num_chars} characters) did not fit in device memory even alone; shorten "
                       "the text (max_segment_chars), lower max_new_tokens or use a shorter reference",
}
FINISH_ZH: dict[str, str] = {
    "finish_done": "完成",
    "finish_refused": "无法按所给内容合成此请求：{cause}",
    "finish_too_large": "此请求超出本服务器的处理上限：{cause}",
    "finish_out_of_memory": "服务器设备内存不足：{cause}；或稍后重试",
    "finish_cancelled": "请求已取消：{cause}",
    "finish_unavailable": "服务器未能完成此请求：{cause}；请稍后重试",
    "finish_error": "合成失败：{cause}",
    "cause_cancelled": "调用方停止了它",
    "cause_engine_shut_down": "引擎已关闭",
    "cause_oom_alone": "内存不足：第 {segment} 段（{num_chars} 个字符）即使单独运行也放不进设备内存；请缩短文本"
                       "（max_segment_chars）、调小 max_new_tokens 或使用更短的参考音频",
}
register(__name__, FINISH_EN, FINISH_ZH)


@dataclass(frozen=True)
class Finish:
    """Why one request ended.

    Attributes:
        reason: ``FinishReason``.
        message: the cause for a person: a ``Notice`` (renders in zh/en) where the error has one, else its English
            text; "" for DONE. ``SynthesisResult.error`` holds the same value.
        code: a short machine code of the cause (``"invalid_value"``, ``"unusable_reference"``,
            ``"request_too_large"``, ``"limit_text"``, ``"out_of_memory"``, ...), or None.
        field: the request field at fault (``ConfigError.field``: "text", "duration_s", "reference_audio", ...),
            or None.
    """

    reason: FinishReason
    message: str = ""
    code: str | None = None
    field: str | None = None

    @property
    def notice(self) -> Notice:
        """The reason and its cause as one message (key ``finish_<reason>``) for a door to render in its user's
        language."""
        if self.reason is FinishReason.DONE:
            return Notice("finish_done")
        return Notice(f"finish_{self.reason.value}", cause=self.message)

    def render(self, lang: str) -> str:
        """``notice`` in ``lang`` ("en" or "zh")."""
        return self.notice.render(lang)

    @property
    def is_users_mistake(self) -> bool:
        """True for REFUSED and TOO_LARGE: the user changes the request (a door answers 4xx, never 5xx)."""
        return self.reason in (FinishReason.REFUSED, FinishReason.TOO_LARGE)

    @classmethod
    def done(cls) -> "Finish":
        return cls(FinishReason.DONE)

    @classmethod
    def cancelled(cls) -> "Finish":
        """Cancelled by the request's caller."""
        return cls(FinishReason.CANCELLED, Notice("cause_cancelled"), code="cancelled")

    @classmethod
    def shut_down(cls) -> "Finish":
        """The engine shut down before the request finished."""
        return cls(FinishReason.UNAVAILABLE, Notice("cause_engine_shut_down"), code="engine_shut_down")

    @classmethod
    def too_large(cls, message: str, field: str | None = "text") -> "Finish":
        """A segment over the memory budget even as a batch of one (``message`` quotes the budget)."""
        return cls(FinishReason.TOO_LARGE, message, code="request_too_large", field=field)

    @classmethod
    def out_of_memory_alone(cls, segment_index: int, num_chars: int) -> "Finish":
        """Segment ``segment_index`` (0-based) ran out of device memory as a batch of one, after the back-off."""
        return cls(FinishReason.OUT_OF_MEMORY, Notice("cause_oom_alone", segment=segment_index + 1,
                                                      num_chars=num_chars), code="out_of_memory")

    @classmethod
    def error(cls, message: str, code: str | None = "synthesis_failed") -> "Finish":
        """An unexpected failure (a bug, a crashed worker); ``message`` is its bare cause."""
        return cls(FinishReason.ERROR, message, code=code)

    @classmethod
    def from_error(cls, exc: BaseException) -> "Finish":
        """The finish of a request that ``exc`` ended, by the error's type:

        * ``RequestCancelledError`` -> CANCELLED;
        * ``InputError`` / ``ConfigError`` / ``JobLineError`` -> REFUSED (the ``ConfigError``'s ``field``; a
          request-limit notice, ``LIMIT_CODES``, -> TOO_LARGE), ``ReferenceAudioError`` -> REFUSED (field
          "reference_audio");
        * any other error -> ERROR (a project error keeps its message; any other exception is named by its type).

        The message keeps the error's ``Notice`` when it has one (``message_of``).
        """
        message = message_of(exc)
        code = getattr(message, "code", None)
        if isinstance(exc, RequestCancelledError):
            return cls(FinishReason.CANCELLED, message, code="cancelled")
        if isinstance(exc, ReferenceAudioError):
            notice_code = getattr(exc.notice, "code", None) or code
            return cls(FinishReason.REFUSED, message, code=notice_code or "unusable_reference",
                       field="reference_audio")
        if isinstance(exc, (InputError, JobLineError)):
            field = exc.field if isinstance(exc, ConfigError) else None
            if code in LIMIT_CODES:
                return cls(FinishReason.TOO_LARGE, message, code=code, field=field or "text")
            return cls(FinishReason.REFUSED, message, code=code or getattr(exc, "code", None) or "invalid_input",
                       field=field)
        if isinstance(exc, TTSAppError):
            return cls(FinishReason.ERROR, message, code=code or "synthesis_failed")
        return cls(FinishReason.ERROR, f"{type(exc).__name__}: {exc}", code="synthesis_failed")

    def to_json(self) -> dict:
        """``{"reason", "code", "field"}`` for a JSON record (the message travels as the record's ``error`` and
        ``error_i18n``)."""
        return {"reason": self.reason.value, "code": self.code, "field": self.field}
