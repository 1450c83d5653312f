"""OpenAI-style error responses: ``{"error": {"message", "type", "param", "code"}}`` with the HTTP status that says
what happened (the shape the official ``openai`` client parses into ``openai.APIStatusError`` subclasses:
400 ``BadRequestError``, 401 ``AuthenticationError``, 404 ``NotFoundError``, 413, 429 ``RateLimitError``, 503
``InternalServerError``). Reference: https://platform.openai.com/docs/guides/error-codes
"""

from __future__ import annotations

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

#: HTTP status -> OpenAI error ``type``
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "invalid_request_error",
               413: "invalid_request_error", 429: "rate_limit_error", 499: "invalid_request_error", 500: "server_error",
               503: "server_error"}


class APIError(Exception):
    """An HTTP API request that cannot be served; becomes an OpenAI error response.

    Attributes:
        status: HTTP status code (400 bad input, 401 no/wrong key, 404 unknown model/voice, 413 too large, 429 rate
            or queue limit, 422 the model produced no audio for the text (``no_audio``), 500 synthesis failed, 503 no
            model loaded yet).
        message: what is wrong and how to fix it (shown to the API user as is).
        code: short machine-readable code ("voice_not_found", "input_too_long", ...), or None.
        param: the request field at fault, or None.
        headers: extra response headers (``Retry-After`` on 429/503, ``WWW-Authenticate`` on 401).
        request_id: the engine request that failed (500): sent as ``error.request_id`` and the ``X-Request-Id``
            header, the id the server log files the failure's traceback under; None otherwise.
        finish_reason: the engine request's ``tts_app.finish.FinishReason`` value when it ended without audio,
            sent as ``error.finish_reason``; None for errors found before any engine request.
    """

    def __init__(self, status: int, message: str, *, code: str | None = None, param: str | None = None,
                 headers: dict[str, str] | None = None, request_id: str | None = None,
                 finish_reason: str | None = None):
        super().__init__(message)
        self.status = int(status)
        self.message = message
        self.code = code
        self.param = param
        self.headers = dict(headers or {})
        self.request_id = request_id
        self.finish_reason = finish_reason
        if request_id is not None:
            self.headers.setdefault("X-Request-Id", request_id)

    def response(self) -> JSONResponse:
        error = {"message": self.message, "type": ERROR_TYPES.get(self.status, "invalid_request_error"),
                 "param": self.param, "code": self.code}
        if self.request_id is not None:
            error["request_id"] = self.request_id
        if self.finish_reason is not None:
            error["finish_reason"] = self.finish_reason
        return JSONResponse({"error": error}, status_code=self.status, headers=self.headers)


async def api_error_handler(_request: Request, exc: APIError) -> JSONResponse:
    return exc.response()


async def validation_error_handler(_request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 for a malformed body, as OpenAI's 400 naming the first bad field."""
    errors = exc.errors()
    first = errors[0] if errors else {}
    location = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path")]
    param = ".".join(location) or None
    what = first.get("msg", "invalid request")
    message = f"{param}: {what}" if param else what
    if len(errors) > 1:
        message += f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})"
    return APIError(400, message, code="invalid_value" if param else "invalid_request", param=param).response()
