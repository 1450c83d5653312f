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
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from tts_app import metrics
from tts_app.config import MAX_SPEED, MIN_SPEED, ServerConfig
from tts_app.errors import InputError, ReferenceAudioError, TTSAppError
from tts_app.request import EmotionControl, Priority, SynthesisParams, SynthesisRequest
from tts_app.server.errors import APIError
from tts_app.server.security import RateLimiter, check_api_key, client_id
from tts_app.server.state import AppHost

if TYPE_CHECKING:
    from tts_app.runtime import Runtime

logger = logging.getLogger(__name__)

#: OpenAI's speech model names; any of them means "the loaded model" (clients often cannot change the name).
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


class VoiceId(BaseModel):
    """``voice`` as an object (OpenAI's custom-voice form ``{"id": "..."}``)."""

    id: str


class SpeechRequest(BaseModel):
    """The body of ``POST /v1/audio/speech`` (OpenAI's fields plus ``seed``). Unknown fields are ignored, as
    OpenAI's own clients send some that other servers lack."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(description="the loaded model's id or family, or tts-1 / tts-1-hd / gpt-4o-mini-tts")
    input: str = Field(description="text to speak (Chinese or English)")
    voice: str | VoiceId = Field(description="a voice of the library (GET /v1/audio/voices)")
    response_format: str = Field(DEFAULT_FORMAT, description="wav, mp3, flac, opus or pcm")
    speed: float = Field(1.0, description=f"tempo, x the model's own pace, {MIN_SPEED}-{MAX_SPEED}")
    instructions: str | None = Field(None, description="style / emotion in words, for models that read it")
    stream_format: Literal["audio", "sse"] = "audio"
    seed: int | None = Field(None, description="base seed (default 0): the same request gives the same audio")


@dataclass(frozen=True)
class SpeechResult:
    """Encoded audio for one speech request, plus what the headers say."""

    body: bytes
    content_type: str
    headers: dict[str, str]


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


def warnings_header(warnings: list[str]) -> str:
    """A JSON list of the warnings, ASCII-escaped (headers are Latin-1), cut to ``MAX_WARNINGS_HEADER_CHARS``."""
    kept: list[str] = []
    for warning in dict.fromkeys(warnings):
        if len(json.dumps(kept + [warning], ensure_ascii=True)) > MAX_WARNINGS_HEADER_CHARS:
            break
        kept.append(warning)
    return json.dumps(kept, ensure_ascii=True)


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

    # -- guards ----------------------------------------------------------------------------------------------------
    def guard(self, request: Request) -> None:
        """Dependency of every ``/v1`` route: the API key (401), then the client's rate (429)."""
        key = check_api_key(request, self.config.api_keys)
        self.limiter.check(client_id(request, key))

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
        """The loaded model's id as the API shows it: the hub id, or for a local checkpoint its folder's name (a
        server path would tell every API user the server's folder layout)."""
        from pathlib import Path

        model_id = runtime.model.model_id
        return Path(model_id).name if Path(model_id).expanduser().exists() else model_id

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
        fmt = body.response_format.lower()
        if fmt not in CONTENT_TYPES:
            raise APIError(400, f"response_format {body.response_format!r} is not supported; use one of "
                                f"{', '.join(CONTENT_TYPES)}", code="unsupported_format", param="response_format")
        if body.stream_format != "audio":
            raise APIError(400, "stream_format 'sse' is not supported; leave it out (the audio comes as the "
                                "response body)", code="unsupported_stream_format", param="stream_format")
        try:
            params = SynthesisParams(seed=0 if body.seed is None else int(body.seed),
                                     speed=None if body.speed == 1.0 else float(body.speed))
        except InputError as exc:
            raise APIError(400, str(exc), param="speed") from None
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

        Raises:
            APIError: 404 unknown voice (listing the voices); 400 unusable voice clip, text with nothing to speak;
                413 text whose segments cannot fit the memory budget.
        """
        from tts_app.voices import VoiceNotFoundError

        try:
            prepared, transcript = self.host.voices.prepare_source(voice_name, runtime.references)
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
            warnings.append(f"instructions were ignored: {runtime.model.family} takes no style or emotion "
                            "instructions")
        request = SynthesisRequest(text=body.input, reference_audio=prepared.audio,
                                   reference_text=transcript or prepared.text, params=params,
                                   priority=Priority.INTERACTIVE, emotion=emotion)
        try:
            need = runtime.engine.estimate_request_bytes(request)
        except InputError as exc:
            raise APIError(400, str(exc), param="input") from None
        budget = runtime.engine.stats().memory_budget_bytes
        if budget is not None and need > budget:
            raise APIError(413, "input has a segment too long for the server's memory; split the text into shorter "
                                "sentences", code="input_too_long", param="input")
        return request, warnings

    async def speech(self, body: SpeechRequest, request: Request) -> Response:
        started = time.perf_counter()
        runtime = self.runtime()
        fmt, params, voice_name = self.check_speech(body, runtime)
        synthesis, warnings = await run_in_threadpool(self.build_request, body, runtime, params, voice_name)
        handle = await run_in_threadpool(runtime.engine.submit, synthesis)
        result = await self._wait(handle, request)
        if not result.ok:
            raise APIError(500, f"request {result.request_id} failed: {result.error}",
                           code="synthesis_failed", request_id=result.request_id)
        body_bytes = await run_in_threadpool(encode_speech, result.audio, result.sampling_rate, fmt)
        wall_s = time.perf_counter() - started
        metrics.observe_synthesis("api", wall_s=wall_s, audio_s=result.duration_s, first_audio_s=wall_s)
        headers = {"X-Request-Id": result.request_id, "X-Seed": str(params.seed),
                   "X-Sampling-Rate": str(result.sampling_rate), "X-Audio-Duration-S": f"{result.duration_s:.3f}",
                   "X-TTS-Warnings": warnings_header(warnings + list(result.warnings))}
        return Response(body_bytes, media_type=CONTENT_TYPES[fmt], headers=headers)

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
