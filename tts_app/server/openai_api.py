"""The OpenAI-compatible endpoints, on the web app's engine (their requests share batches with the web page's):

    POST   /v1/audio/speech          {model, input, voice, response_format, speed, instructions} -> audio bytes
    GET    /v1/audio/voices          the voice library (saved + bundled)
    POST   /v1/audio/voices          multipart: name, audio_sample (file), [reference_text] -> the saved voice
    DELETE /v1/audio/voices/{name}   remove a saved voice
    GET    /v1/models                the loaded model (and the OpenAI names accepted for it)

Request and response shapes follow the OpenAI API reference (https://platform.openai.com/docs/api-reference/audio),
so the official ``openai`` client and tools built on it (Open WebUI, SillyTavern, agents) work unchanged:
``client.audio.speech.create(model="tts-1", voice="zh-female", input="你好")``. Differences, all documented in the
README: ``voice`` names a voice of our library (a cloned voice, not OpenAI's "alloy"...; an unknown name gets 404
listing the voices there are); ``model`` may be the loaded checkpoint's id, its family, or one of OpenAI's model
names (all mean "the loaded model"); ``pcm`` is 16-bit little-endian mono at the model's own rate (the
``X-Sampling-Rate`` header says which; OpenAI's is always 24 kHz); ``instructions`` reaches models that read a style
or emotion from text (IndexTTS 2 with its emotion model) and is otherwise ignored with a warning; ``seed`` is an
extra field. Response headers: ``X-Request-Id``, ``X-Seed``, ``X-Sampling-Rate``, ``X-Audio-Duration-S``,
``X-TTS-Warnings`` (JSON list, ASCII-escaped).

Streaming: a request that asks for it (``stream_format: "audio"`` given explicitly, as
``client.audio.speech.with_streaming_response.create(..., stream_format="audio")`` sends it, or ``stream: true``)
with ``response_format`` pcm or wav gets a chunked response fed from the engine's stream
(``Engine.submit(on_audio=...)``): its first bytes leave once the first segment's first frames are decoded, the rest follows as it is decoded, and the
bytes are those of the answer without streaming (pcm: byte for byte; wav: the same samples, after a header whose
sizes are 0xFFFFFFFF since the length is not known yet). The headers go out with the first audio, so every error
found before it (bad input, unknown voice, a failure before any audio) still gets its status; a failure after it
ends the body early (the client sees a truncated response). No ``X-Audio-Duration-S`` then, and
``X-TTS-Warnings`` holds the warnings known before the first audio. A client that
disconnects cancels its request in the engine (its batch-mates go on). Requests that need the whole clip (mp3,
flac, opus: encoded at once; ``speed`` other than 1: ``SynthesisParams.needs_whole_clip``) are answered when done,
with ``X-TTS-Stream: whole-clip`` and a warning saying why; a streamed answer has ``X-TTS-Stream: chunked``. Without
a streaming request the answer comes when the request is done, with every header (OpenAI streams always; we keep
the duration header and error statuses for clients that do not read as a stream).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import struct
import time
from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from tts_app import metrics
from tts_app.config import MAX_SPEED, MIN_SPEED, ServerConfig
from tts_app.errors import InputError, ReferenceAudioError, TTSAppError
from tts_app.finish import FinishReason
from tts_app.frontend.messages import Notice, register
from tts_app.request import EmotionControl, Priority, SynthesisParams, SynthesisRequest, check_text
from tts_app.server.errors import APIError
from tts_app.server.security import AccessPolicy, RateLimiter, client_id
from tts_app.server.state import AppHost

if TYPE_CHECKING:
    from tts_app.runtime import Runtime

logger = logging.getLogger(__name__)

#: OpenAI's speech model names; any of them means "the loaded model" (clients often cannot change the name).
# The API's own warnings (``X-TTS-Warnings``), in English and Chinese (``tts_app.frontend.messages``).
API_EN = {
    "api_instructions_ignored": "instructions were ignored: {family} takes no style or emotion instructions",
    "api_no_beam_search": "{name} was ignored: {family} has no beam search",
    "api_format_whole_clip": "response_format {fmt} is sent when the whole clip is done (it is encoded at once); ask "
                             "for one of {formats} to get the audio as it is decoded",
    "api_speed_whole_clip": "speed other than 1 changes the whole clip after decoding, so it is sent when done",
}
API_ZH = {
    "api_instructions_ignored": "已忽略 instructions：{family} 不接受风格或情感指令",
    "api_no_beam_search": "已忽略 {name}：{family} 没有束搜索",
    "api_format_whole_clip": "response_format {fmt} 要等整段音频完成后才发送（一次性编码）；请选择 {formats} 之一，"
                             "即可边解码边接收音频",
    "api_speed_whole_clip": "speed 不为 1 时要在解码后处理整段音频，因此完成后才发送",
}
register(__name__, API_EN, API_ZH)

OPENAI_MODEL_NAMES = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
#: response_format -> Content-Type. "pcm": raw 16-bit little-endian mono samples at ``X-Sampling-Rate`` Hz.
CONTENT_TYPES = {"wav": "audio/wav", "flac": "audio/flac", "mp3": "audio/mpeg", "opus": "audio/ogg",
                 "pcm": "audio/pcm"}
#: OpenAI's default response format.
DEFAULT_FORMAT = "mp3"
#: Seconds a client is told to wait (``Retry-After``) while the model loads or the queue is full.
RETRY_AFTER_S = 5
#: Longest ``X-TTS-Warnings`` header, in characters (proxies commonly cap a header at 8 KB).
MAX_WARNINGS_HEADER_CHARS = 4000
#: response formats sent while the audio is decoded when the client streams (the others are encoded whole)
STREAM_FORMATS = ("pcm", "wav")
#: seconds between two looks at a streaming client's connection while no audio arrives
STREAM_POLL_S = 0.25


class VoiceId(BaseModel):
    """``voice`` as an object (OpenAI's custom-voice form ``{"id": "..."}``)."""

    id: str


class SpeechRequest(BaseModel):
    """The body of ``POST /v1/audio/speech`` (OpenAI's fields plus ours: ``seed``, ``stream``, ``num_beams``,
    ``length_penalty``, ``num_diffusion_steps``, ``reference_cleanup``, ``segment_context``, ``take_check`` and its thresholds,
    ``prompt_cache``). Unknown fields are ignored, as OpenAI's own clients send some that other servers lack."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(description="the loaded model's id or family, or tts-1 / tts-1-hd / gpt-4o-mini-tts")
    input: str = Field(description="text to speak (Chinese or English)")
    voice: str | VoiceId = Field(description="a voice of the library (GET /v1/audio/voices)")
    response_format: str = Field(DEFAULT_FORMAT, description="wav, mp3, flac, opus or pcm")
    speed: float = Field(1.0, description=f"tempo, x the model's own pace, {MIN_SPEED}-{MAX_SPEED}")
    instructions: str | None = Field(None, description="style / emotion in words, for models that read it")
    stream_format: Literal["audio", "sse"] = Field(
        "audio", description="'audio' given explicitly: stream pcm / wav as it is decoded ('sse' is not supported)")
    stream: bool | None = Field(None, description="ours: true = stream (as stream_format 'audio'), false = not")
    seed: int | None = Field(None, description="base seed (default 0): the same request gives the same audio")
    # extension fields (not OpenAI's): settings every other door has too; None = the model's / voice's own
    num_beams: int | None = Field(None, description="ours: beam search width, for models with beams (IndexTTS 2: "
                                                    "3, sampled); 1 = no beams")
    length_penalty: float | None = Field(None, description="ours: beam search length penalty (IndexTTS 2: 0)")
    num_diffusion_steps: int | None = Field(None, description="ours: Euler steps of the flow-matching stage, for "
                                                              "models with one (IndexTTS 2: 25; 12 = fast preset)")
    reference_cleanup: str | None = Field(None, description="ours: auto, full or off: what is done to the voice's "
                                                            "clip (default: as the voice was saved)")
    segment_context: bool | None = Field(None, description="ours: long text in one voice: each segment hears the "
                                                           "earlier segments as context (CSM, Higgs Audio v2; GLM-TTS: its prompt cache; "
                                                           "ignored with a warning by other models)")
    take_check: str | None = Field(None, description="ours: off, score or reroll: score each segment's take (ASR "
                                                     "CER/WER, speaker similarity, signal checks) and, with reroll, "
                                                     "generate one below a threshold again with a new seed (default "
                                                     "off); the scores come back in X-TTS-Take-Scores")
    take_max_rerolls: int | None = Field(None, description="ours: most re-generations of one segment (default 2)")
    take_max_error_rate: float | None = Field(None, description="ours: CER/WER threshold of a take (default 0.3)")
    take_min_similarity: float | None = Field(None, description="ours: speaker similarity threshold (default 0.7)")
    prompt_cache: bool | None = Field(None, description="ours: long-text prompt cache, for models that have one "
                                                        "(GLM-TTS, on by default): earlier segments join the next "
                                                        "segment's prompt. Not the KV cache")

    @property
    def wants_stream(self) -> bool:
        """The client asked for the audio as it is decoded: ``stream`` if given, else ``stream_format`` given."""
        return self.stream if self.stream is not None else "stream_format" in self.model_fields_set


#: the take policy's extension fields (``SynthesisParams``' names)
TAKE_FIELDS = ("take_check", "take_max_rerolls", "take_max_error_rate", "take_min_similarity")
#: ``SynthesisRequest`` fields -> the ``/v1/audio/speech`` parameter a client sends them as (``error.param``)
API_PARAMS = {"text": "input", "reference_audio": "voice", "reference_text": "voice", "emotion": "instructions",
              "emotion_text": "instructions"}
#: HTTP status of a request that ended without audio, by ``FinishReason`` (a user's mistake is never a 5xx; the
#: official ``openai`` client retries 408/409/429/5xx only, so a refusal is not sent again)
FINISH_STATUS = {FinishReason.REFUSED: 400, FinishReason.TOO_LARGE: 413, FinishReason.CANCELLED: 499,
                 FinishReason.OUT_OF_MEMORY: 503, FinishReason.UNAVAILABLE: 503, FinishReason.ERROR: 500}


def finish_error(result) -> APIError:
    """The error answer of a request that ended without audio, from its ``SynthesisResult.finish`` (never from its
    message): 400 REFUSED (``param`` = the field at fault), 413 TOO_LARGE, 499 CANCELLED, 503 + ``Retry-After``
    OUT_OF_MEMORY (after the engine's own back-off) and UNAVAILABLE, 500 ERROR (a bug: the request id names the
    server log's traceback). The body's ``error.finish_reason`` is the reason's value."""
    from tts_app.frontend.messages import localize

    finish = result.finish
    status = FINISH_STATUS.get(finish.reason, 500)
    cause = localize(finish.message, "en")
    headers = {"Retry-After": str(RETRY_AFTER_S)} if status == 503 else None
    if status == 500:
        return APIError(500, f"request {result.request_id} failed: {cause}", code=finish.code or "synthesis_failed",
                        request_id=result.request_id, finish_reason=finish.reason.value)
    param = API_PARAMS.get(finish.field, finish.field) if finish.field else None
    # a refusal's cause names the fix by itself; the others read with their reason ("... try again later")
    message = cause if finish.is_users_mistake else finish.render("en")
    return APIError(status, message, code=finish.code, param=param, headers=headers,
                    finish_reason=finish.reason.value)


def encode_speech(audio, sampling_rate: int, fmt: str) -> bytes:
    """``audio`` (float32 ``(num_samples,)``) as ``fmt``: "pcm" = raw 16-bit little-endian (soundfile's RAW, the same
    float -> int16 conversion as its WAV); the other formats through ``tts_app.audio.formats.encode_audio``."""
    if fmt == "pcm":
        import io

        import numpy as np
        import soundfile as sf

        buf = io.BytesIO()
        sf.write(buf, np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0), int(sampling_rate), format="RAW",
                 subtype="PCM_16", endian="LITTLE")
        return buf.getvalue()
    from tts_app.audio.formats import encode_audio

    return encode_audio(audio, sampling_rate, fmt)


def _refuse_no_audio(synthesis: SynthesisRequest, result) -> None:
    """A finished request with no audio at all (``tts_app.outputs.no_audio_error``: the model ended speech at once)
    is refused with the page's and ``synth``'s words, 422 ``no_audio``: the same request and seed would end the
    same way, so a client must not retry it unchanged (and no encoder is given 0 samples: MP3/Opus fail on them).

    Raises:
        APIError: 422 when ``result`` has no samples.
    """
    from tts_app.outputs import no_audio_error

    no_audio = no_audio_error(synthesis, result)
    if no_audio is not None:
        # ``param``: what to change is the seed (an extension field; the text is fine as it is)
        raise APIError(422, str(no_audio), code="no_audio", param="seed", request_id=result.request_id)


def wav_stream_header(sampling_rate: int) -> bytes:
    """The 44-byte header of a 16-bit mono PCM WAV file whose length is not known yet (RIFF and ``data`` sizes
    0xFFFFFFFF, the usual marker for a streamed WAV: libsndfile, ffmpeg/PyAV and browsers read such a file to its
    end). Layout: the canonical RIFF/WAVE header (``fmt `` chunk of 16 bytes, format tag 1 = PCM; Microsoft's
    "Multimedia Programming Interface and Data Specifications 1.0", 1991). The samples that follow are
    ``encode_speech(..., "pcm")``'s."""
    rate = int(sampling_rate)
    block_align = 2  # mono, 16 bits
    unknown = 0xFFFFFFFF
    return (b"RIFF" + struct.pack("<I", unknown) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, rate, rate * block_align, block_align, 16)
            + b"data" + struct.pack("<I", unknown))


def warnings_header(warnings: list[str]) -> str:
    """A JSON list of the warnings, ASCII-escaped (headers are Latin-1), cut to ``MAX_WARNINGS_HEADER_CHARS``."""
    kept: list[str] = []
    for warning in dict.fromkeys(warnings):
        if len(json.dumps(kept + [warning], ensure_ascii=True)) > MAX_WARNINGS_HEADER_CHARS:
            break
        kept.append(warning)
    return json.dumps(kept, ensure_ascii=True)


#: ``scope`` key set when a streaming client disconnected mid-answer (``RequestTimer``'s outcome "disconnected")
CLIENT_GONE_SCOPE_KEY = "tts_app.client_disconnected"
_GONE = object()  # ``_ChunkFeed.next``: the client disconnected


class _ChunkFeed:
    """One streaming request's ``AudioChunk``s from the engine's worker thread (``Engine.submit(on_audio=...)``)
    to the event loop, without a thread per stream. The engine delivers every chunk before it resolves the
    request's future, and both reach the loop through ``call_soon_threadsafe`` (first in, first run), so once the
    future is done every chunk is queued."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.queue: asyncio.Queue = asyncio.Queue()
        self._checked_s = time.monotonic()

    def __call__(self, chunk) -> None:  # worker thread
        self.loop.call_soon_threadsafe(self.queue.put_nowait, chunk)

    async def next(self, done: asyncio.Future, request: Request):
        """The next chunk; None once the request has ended (``done``) with every chunk taken; ``_GONE`` when the
        client disconnected (looked at every ``STREAM_POLL_S`` seconds, chunks arriving or not)."""
        while True:
            if time.monotonic() - self._checked_s >= STREAM_POLL_S:
                self._checked_s = time.monotonic()
                if await request.is_disconnected():
                    return _GONE
            if not self.queue.empty():
                return self.queue.get_nowait()
            if done.done():
                return None
            getter = asyncio.ensure_future(self.queue.get())
            finished, _ = await asyncio.wait({getter, done}, timeout=STREAM_POLL_S,
                                             return_when=asyncio.FIRST_COMPLETED)
            if getter in finished:
                return getter.result()
            getter.cancel()  # an item it had not taken stays in the queue


class EngineStreamResponse(StreamingResponse):
    """A ``StreamingResponse`` of one engine request's audio that cancels the request whenever the response ends
    before it (the client disconnected, mid-stream or while waiting; the server stops): its rows leave the batch at
    the next decode step, its batch-mates go on. Such an end is marked in the scope (``CLIENT_GONE_SCOPE_KEY``) for
    ``RequestTimer``'s outcome "disconnected".

    Args:
        content: the body (async iterator of bytes).
        handle: the request's ``RequestHandle``.
    """

    def __init__(self, content, handle, **kwargs):
        super().__init__(content, **kwargs)
        self.handle = handle

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # left at a ``yield`` when the send was cut: end it now
            if not self.handle.done():
                self.handle.cancel()
                scope[CLIENT_GONE_SCOPE_KEY] = True
                logger.info("request %s cancelled: its streaming client went away", self.handle.request_id)


class OpenAIRoutes:
    """The ``/v1`` routes over one ``AppHost``.

    Args:
        host: the app state (runtime, voice library).
        config: access control and limits.
    """

    def __init__(self, host: AppHost, config: ServerConfig):
        self.host = host
        self.config = config
        self.limiter = RateLimiter(config.rate_limit_per_min, config.rate_limit_burst)
        self.policy = AccessPolicy(config.api_keys, config.ui_auth)

    # -- guards ----------------------------------------------------------------------------------------------------
    def guard(self, request: Request) -> None:
        """Dependency of every ``/v1`` route: the client's rate (429), the client being its API key, else its address
        (who may call at all is ``AccessGuard``'s, in front of every route)."""
        self.limiter.check(client_id(request, self.policy.api_key(request.headers)))

    def runtime(self) -> Runtime:
        """The loaded runtime.

        Raises:
            APIError: 503 while the model loads (with ``Retry-After``) or when loading failed (with the reason).
        """
        runtime = self.host.runtime
        if runtime is not None:
            return runtime
        if self.host.load_error is None:
            raise APIError(503, "the model is still loading; retry in a few seconds", code="model_loading",
                           headers={"Retry-After": str(RETRY_AFTER_S)})
        raise APIError(503, f"no model is loaded: {self.host.load_error}", code="model_not_loaded")

    @staticmethod
    def public_model_id(runtime: Runtime) -> str:
        """The loaded model's id as the API shows it (``tts_app.config.public_model_id``)."""
        from tts_app.config import public_model_id

        return public_model_id(runtime.model.model_id)

    def model_names(self, runtime: Runtime) -> list[str]:
        """Every ``model`` value accepted for the loaded model (its public id first)."""
        return list(dict.fromkeys([self.public_model_id(runtime), runtime.model.model_id, runtime.model.family,
                                   *OPENAI_MODEL_NAMES]))

    # -- /v1/models ------------------------------------------------------------------------------------------------
    def list_models(self) -> dict[str, Any]:
        runtime = self.runtime()
        created = int(runtime.started_utc_s)
        return {"object": "list", "data": [
            {"id": self.public_model_id(runtime), "object": "model", "created": created, "owned_by": "tts_app",
             "family": runtime.model.family,
             "aliases": [name for name in self.model_names(runtime)[1:] if name != runtime.model.model_id],
             "sampling_rate": runtime.engine.sampling_rate}]}

    # -- /v1/audio/voices ------------------------------------------------------------------------------------------
    def voice_object(self, voice) -> dict[str, Any]:
        """A library voice in OpenAI's voice shape (``id`` = its name, which ``voice`` in a speech request takes)
        plus our fields (transcript, duration, warnings, bundled)."""
        import datetime

        try:
            created = int(datetime.datetime.fromisoformat(voice.created_utc).timestamp())
        except ValueError:
            created = 0
        return {"id": voice.name, "object": "audio.voice", "name": voice.name, "created_at": created,
                "type": "audio_sample", **voice.to_dict()}

    def list_voices(self) -> dict[str, Any]:
        return {"object": "list", "data": [self.voice_object(v) for v in self.host.voices.list()]}

    async def create_voice(self, name: str, audio_sample: UploadFile, reference_text: str | None) -> dict[str, Any]:
        """Save an uploaded clip as voice ``name`` (cleaned like any reference: a clip the cleanup refuses gets 400
        and nothing is saved).

        Raises:
            APIError: 413 over ``max_voice_upload_bytes``; 400 bad name, taken name or unusable clip; 503 no model.
        """
        runtime = self.runtime()
        limit = self.config.max_voice_upload_bytes
        data = await audio_sample.read(limit + 1)
        if len(data) > limit:
            raise APIError(413, f"audio_sample is over {limit // 1000**2} MB; send a shorter clip (a few seconds "
                                "of speech are enough)", code="file_too_large", param="audio_sample")
        if not data:
            raise APIError(400, "audio_sample is empty; send an audio file", param="audio_sample")
        try:
            voice = await run_in_threadpool(self.host.voices.save, name, data, runtime.references,
                                            reference_text=reference_text, source_name=audio_sample.filename)
        except ReferenceAudioError as exc:
            raise APIError(400, str(exc), code="unusable_audio", param="audio_sample") from None
        except InputError as exc:
            raise APIError(400, str(exc), code="invalid_voice", param="name") from None
        return self.voice_object(voice)

    def delete_voice(self, name: str) -> dict[str, Any]:
        from tts_app.voices import VoiceNotFoundError

        try:
            self.host.voices.delete(name)
        except VoiceNotFoundError as exc:
            raise APIError(404, str(exc), code="voice_not_found", param="voice_id") from None
        except InputError as exc:  # a bundled voice
            raise APIError(400, str(exc), code="voice_read_only", param="voice_id") from None
        return {"id": name, "object": "audio.voice.deleted", "deleted": True}

    # -- /v1/audio/speech ------------------------------------------------------------------------------------------
    def check_speech(self, body: SpeechRequest, runtime: Runtime) -> tuple[str, SynthesisParams, str]:
        """Everything about the request that can be refused before any work: (format, params, voice name).

        Raises:
            APIError: 404 unknown model; 400 empty input, bad format, speed or streaming form; 413 over-long input;
                429 queue over ``max_queue_depth``.
        """
        names = self.model_names(runtime)
        if body.model not in names:
            shown = [name for name in names if name != runtime.model.model_id or name == names[0]]
            raise APIError(404, f"model {body.model!r} is not served here; use one of: {', '.join(shown)}",
                           code="model_not_found", param="model")
        if not body.input.strip():
            raise APIError(400, "input is empty; give the text to speak", param="input")
        if len(body.input) > self.config.max_input_chars:
            raise APIError(413, f"input is {len(body.input)} characters; at most {self.config.max_input_chars} per "
                                "request (split the text, or use a JSONL job for long texts)",
                           code="input_too_long", param="input")
        try:
            check_text(body.input, "input")  # e.g. a lone surrogate ("\ud800" in the JSON)
            check_text(body.instructions, "instructions")
        except InputError as exc:
            raise APIError(400, str(exc), code="invalid_text", param=exc.field) from None
        fmt = body.response_format.lower()
        if fmt not in CONTENT_TYPES:
            raise APIError(400, f"response_format {body.response_format!r} is not supported; use one of "
                                f"{', '.join(CONTENT_TYPES)}", code="unsupported_format", param="response_format")
        if body.stream_format != "audio":
            raise APIError(400, "stream_format 'sse' is not supported; leave it out (the audio comes as the "
                                "response body)", code="unsupported_stream_format", param="stream_format")
        cleanup = {} if body.reference_cleanup is None else {"reference_cleanup": body.reference_cleanup}
        cleanup.update({name: getattr(body, name) for name in TAKE_FIELDS if getattr(body, name) is not None})
        try:
            params = SynthesisParams(seed=0 if body.seed is None else int(body.seed),
                                     speed=None if body.speed == 1.0 else float(body.speed),
                                     num_beams=body.num_beams, length_penalty=body.length_penalty,
                                     segment_context=bool(body.segment_context),
                                     prompt_cache=body.prompt_cache,
                                     num_diffusion_steps=body.num_diffusion_steps, **cleanup)
        except InputError as exc:
            # the same code as a schema-level refusal of a value (tts_app.server.errors: "invalid_value")
            raise APIError(400, str(exc), code="invalid_value",
                           param=API_PARAMS.get(getattr(exc, "field", None), getattr(exc, "field", None)) or "speed"
                           ) from None
        stats = runtime.engine.stats()
        if stats.num_requests_active >= self.config.max_queue_depth:
            metrics.HTTP_REJECTIONS.labels(reason="queue_full").inc()
            raise APIError(429, f"the server is busy ({stats.num_requests_active} requests in progress, at most "
                                f"{self.config.max_queue_depth}); retry shortly", code="queue_full",
                           headers={"Retry-After": str(RETRY_AFTER_S)})
        voice = body.voice.id if isinstance(body.voice, VoiceId) else body.voice
        return fmt, params, voice

    def build_request(self, body: SpeechRequest, runtime: Runtime, params: SynthesisParams, voice_name: str
                      ) -> tuple[SynthesisRequest, list[str]]:
        """The engine request for a checked speech request (runs in a worker thread: a voice may be cleaned here)
        and the API's own warnings.

        Text with nothing to speak (400) and a segment over the memory budget (413) are the engine's to decide:
        ``Engine.submit`` runs the front end once and its result's finish reason is mapped (``finish_error``).

        Raises:
            APIError: 404 unknown voice (listing the voices); 400 unusable voice clip.
        """
        from tts_app.voices import VoiceNotFoundError

        try:  # the voice's own cleanup unless the request names one (``reference_cleanup``)
            prepared, transcript = self.host.voices.prepare_source(voice_name, runtime.references,
                                                                   body.reference_cleanup)
        except VoiceNotFoundError as exc:
            raise APIError(404, str(exc), code="voice_not_found", param="voice") from None
        except ReferenceAudioError as exc:
            raise APIError(400, f"voice {voice_name!r} cannot be used: {exc}", code="unusable_voice",
                           param="voice") from None
        warnings = list(prepared.warnings)
        emotion = None
        instructions = (body.instructions or "").strip()
        if instructions and runtime.engine.facts.supports_emotion_text:
            # the checkpoint's emotion model reads the emotion from the instructions (IndexTTS 2's emo_text)
            emotion = EmotionControl(from_text=True, text=instructions)
        elif instructions:
            warnings.append(Notice("api_instructions_ignored", family=runtime.model.family))
        defaults = runtime.engine.facts.generation_defaults
        warnings += [Notice("api_no_beam_search", name=name, family=runtime.model.family) for name in
                     ("num_beams", "length_penalty") if getattr(body, name) is not None and getattr(defaults, name) is None]
        if body.segment_context and not runtime.engine.facts.supports_segment_context:
            # the engine's own warning (the same text, so the header holds it once), known before the first audio
            warnings.append(Notice("eng_segment_context_unsupported", name=runtime.engine.adapter.display_name))
        if body.num_diffusion_steps is not None and defaults.num_diffusion_steps is None:
            warnings.append(f"num_diffusion_steps was ignored: {runtime.model.family} has no flow-matching stage")
        params = dataclasses.replace(params, reference_cleanup=prepared.report.cleanup)  # what ran on the voice
        request = SynthesisRequest(text=body.input, reference_audio=prepared.audio,
                                   reference_text=transcript or prepared.text, params=params,
                                   priority=Priority.INTERACTIVE, emotion=emotion)
        return request, warnings

    @staticmethod
    def whole_clip_reason(fmt: str, params: SynthesisParams) -> str | None:
        """Why a request that asked for streaming is answered with the whole clip (a warning for the client), or
        None when it can stream."""
        if fmt not in STREAM_FORMATS:
            return Notice("api_format_whole_clip", fmt=fmt, formats=", ".join(STREAM_FORMATS))
        if params.needs_whole_clip:
            return Notice("api_speed_whole_clip")
        return None

    async def speech(self, body: SpeechRequest, request: Request) -> Response:
        started = time.perf_counter()
        runtime = self.runtime()
        fmt, params, voice_name = self.check_speech(body, runtime)
        synthesis, warnings = await run_in_threadpool(self.build_request, body, runtime, params, voice_name)
        headers = {"X-Request-Id": synthesis.request_id, "X-Seed": str(params.seed),
                   "X-Sampling-Rate": str(runtime.engine.sampling_rate)}
        if body.wants_stream:
            reason = self.whole_clip_reason(fmt, params)
            if reason is None:
                return await self._stream(runtime, synthesis, fmt, headers, warnings, request, started)
            warnings.append(reason)
            headers["X-TTS-Stream"] = "whole-clip"
        handle = await run_in_threadpool(runtime.engine.submit, synthesis)
        result = await self._wait(handle, request)
        if not result.ok:
            raise finish_error(result)
        _refuse_no_audio(synthesis, result)
        body_bytes = await run_in_threadpool(encode_speech, result.audio, result.sampling_rate, fmt)
        wall_s = time.perf_counter() - started
        metrics.observe_synthesis("api", wall_s=wall_s, audio_s=result.duration_s, first_audio_s=wall_s)
        headers.update({"X-Audio-Duration-S": f"{result.duration_s:.3f}",
                        "X-TTS-Warnings": warnings_header(warnings + list(result.warnings))})
        if any(s.takes for s in result.segments):  # the take policy's verdict, per segment (compact JSON)
            headers["X-TTS-Take-Scores"] = json.dumps(
                [{"error_rate": (s.scores or {}).get("error_rate"), "similarity": (s.scores or {}).get("similarity"),
                  "problems": (s.scores or {}).get("problems"), "rerolled": s.rerolled} for s in result.segments],
                separators=(",", ":"))
        return Response(body_bytes, media_type=CONTENT_TYPES[fmt], headers=headers)

    async def _stream(self, runtime: Runtime, synthesis: SynthesisRequest, fmt: str, headers: dict[str, str],
                      warnings: list[str], request: Request, started: float) -> Response:
        """The chunked answer of a streaming request (module docstring): waits for the first audio (errors before
        it get their status), then sends the response with it and the rest as the engine decodes it.

        Raises:
            APIError: the request ended before any audio (``finish_error``: 4xx/5xx by its finish reason); 499 the
                client left first (request cancelled).
        """
        feed = _ChunkFeed(asyncio.get_running_loop())
        handle = await run_in_threadpool(lambda: runtime.engine.submit(synthesis, on_audio=feed))
        done = asyncio.wrap_future(handle.future)
        first = await feed.next(done, request)
        if first is _GONE:
            handle.cancel()
            raise APIError(499, "the client closed the connection", code="client_closed")
        if first is None:  # the request ended before any audio: a failure (or silence) gets a normal answer
            result = await done
            if not result.ok:
                raise finish_error(result)
            _refuse_no_audio(synthesis, result)
        first_audio_s = time.perf_counter() - started
        rate = runtime.engine.sampling_rate

        async def body():
            if fmt == "wav":
                yield wav_stream_header(rate)
            chunk = first
            while chunk is not None and chunk is not _GONE:
                yield encode_speech(chunk.samples, rate, "pcm")
                chunk = await feed.next(done, request)
            if chunk is _GONE:
                return  # ``EngineStreamResponse`` cancels the request
            result = await done
            if not result.ok:
                # the status went out with the first audio: ending the body early is all that is left to say
                raise RuntimeError(f"request {handle.request_id} ended ({result.finish.reason.value}) after its "
                                   f"first audio was sent: {result.error}")
            metrics.observe_synthesis("api", wall_s=time.perf_counter() - started, audio_s=result.duration_s,
                                      first_audio_s=first_audio_s)

        headers = {**headers, "X-TTS-Stream": "chunked", "X-TTS-Warnings": warnings_header(warnings),
                   "Cache-Control": "no-store"}
        return EngineStreamResponse(body(), handle, media_type=CONTENT_TYPES[fmt], headers=headers)

    @staticmethod
    async def _wait(handle, request: Request):
        """The request's result; cancels it in the engine when the client goes away first (its batch-mates go on)."""
        future = asyncio.wrap_future(handle.future)
        while True:
            done, _ = await asyncio.wait({future}, timeout=0.5)
            if done:
                return future.result()
            if await request.is_disconnected():
                handle.cancel()
                raise APIError(499, "the client closed the connection", code="client_closed")

    # -- router ----------------------------------------------------------------------------------------------------
    def router(self) -> APIRouter:
        router = APIRouter(prefix="/v1", dependencies=[Depends(self.guard)])

        @router.get("/models")
        def models() -> JSONResponse:
            return JSONResponse(self.list_models())

        @router.get("/audio/voices")
        def voices() -> JSONResponse:
            return JSONResponse(self.list_voices())

        @router.post("/audio/voices")
        async def create_voice(name: str = Form(...), audio_sample: UploadFile = File(...),
                               reference_text: str | None = Form(None), consent: str | None = Form(None)):
            # consent: OpenAI's consent-recording id; the official client requires it, we keep nothing of it.
            return JSONResponse(await self.create_voice(name, audio_sample, reference_text))

        @router.delete("/audio/voices/{voice_id}")
        def delete_voice(voice_id: str) -> JSONResponse:
            return JSONResponse(self.delete_voice(voice_id))

        @router.post("/audio/speech")
        async def speech(body: SpeechRequest, request: Request) -> Response:
            return await self.speech(body, request)

        return router
