"""The one HTTP server of ``python app.py``: the OpenAI-compatible API (``/v1``), Prometheus metrics (``/metrics``)
and, at ``/``, the web UI (gradio's app, mounted by ``tts_app.ui.launch`` once the model has loaded).

    app, ui = build_app(ctx, server_config)   # ctx: an AppHost (the web app's AppContext)
    ... start uvicorn on ``app``; load the model; build the gradio app ...
    await ui.attach(gradio_asgi_app)          # from the server's event loop: runs its startup, then serves it

The server starts before the model has loaded, so API clients get 503 + ``Retry-After`` (not "connection refused")
while it loads, and browsers a page that reloads itself until the UI is there (``LateMount``).

Access: ``tts_app.server.security.AccessPolicy`` for every route (``AccessGuard``, in front of everything but CORS).

CORS: no route sends CORS headers unless ``ServerConfig.cors_origins`` lists origins (then Starlette's
``CORSMiddleware`` answers for the whole server). gradio's own CORS middleware never runs: the gradio app's parent
has Starlette's (``add_cors``, with no origins when none are configured), which is gradio's sign to add none. So a
web page of another site cannot read responses in a visitor's browser.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tts_app import metrics
from tts_app.config import ServerConfig, UploadConfig
from tts_app.server.errors import APIError, api_error_handler, validation_error_handler
from tts_app.server.openai_api import CLIENT_GONE_SCOPE_KEY, OpenAIRoutes
from tts_app.server.security import AccessGuard, AccessPolicy
from tts_app.server.sessions import UPLOAD_ROUTE, BrowserSessions
from tts_app.server.uploads import DiskQuota, UploadLimits, UploadRoute, page_upload_limit
from tts_app.server.state import AppHost

logger = logging.getLogger(__name__)

LOADING_PAGE = """<!doctype html><html lang="{lang}"><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">
<title>{title}</title></head><body style="font-family: sans-serif; margin: 3em">
<h2>{heading}</h2><p>{detail}</p>
<p>{reload}</p></body></html>"""


def loading_page(lang: str, load_error: object | None) -> str:
    """The 503 page shown while the model loads (or after it failed), in ``lang`` ("zh" or "en")."""
    import html

    from tts_app.ui.texts import server_text

    detail = (server_text(lang, "loading_failed", error=load_error) if load_error is not None
              else server_text(lang, "loading_wait"))
    return LOADING_PAGE.format(lang=lang, title=html.escape(server_text(lang, "loading_title")),
                               heading=html.escape(server_text(lang, "loading_heading")),
                               detail=html.escape(detail), reload=html.escape(server_text(lang, "loading_reload")))


class LateMount:
    """An ASGI app standing in for one that is not there yet: a 503 page (or the load error) until ``attach``.

    ``attach(app)`` runs the app's ASGI lifespan startup (gradio starts its queue there) inside the running server's
    event loop, then routes every request to it; ``close`` runs its lifespan shutdown.

    Args:
        host: read for ``load_error`` (shown on the page).
    """

    def __init__(self, host: AppHost):
        self.host = host
        self.app: ASGIApp | None = None
        self._shutdown: asyncio.Event | None = None
        self._lifespan: asyncio.Task | None = None

    async def attach(self, app: ASGIApp) -> None:
        """Start ``app``'s lifespan and serve it from now on.

        Raises:
            RuntimeError: the app's startup failed (its message).
        """
        started: asyncio.Future = asyncio.get_running_loop().create_future()
        self._shutdown = asyncio.Event()
        shutdown = self._shutdown

        async def receive() -> Message:
            if not started.done():
                return {"type": "lifespan.startup"}
            await shutdown.wait()
            return {"type": "lifespan.shutdown"}

        async def send(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete" and not started.done():
                started.set_result(None)
            elif message["type"] == "lifespan.startup.failed" and not started.done():
                started.set_exception(RuntimeError(message.get("message", "startup failed")))

        async def run() -> None:
            try:
                await app({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, receive, send)
            except Exception as exc:  # noqa: BLE001 - an app without lifespan support just starts
                if not started.done():
                    logger.debug("mounted app has no lifespan: %s", exc)
                    started.set_result(None)
            if not started.done():
                started.set_result(None)

        self._lifespan = asyncio.ensure_future(run())
        await started
        self.app = app

    async def close(self) -> None:
        """Run the attached app's lifespan shutdown (waits at most 10 s)."""
        if self._shutdown is not None and self._lifespan is not None:
            self._shutdown.set()
            try:
                await asyncio.wait_for(self._lifespan, timeout=10)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - shutting down anyway
                logger.warning("the web UI did not shut down cleanly")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.app is not None:
            await self.app(scope, receive, send)
            return
        if scope["type"] == "lifespan":  # the outer server's own lifespan never reaches a mount; be safe
            return
        if scope["type"] != "http":
            return
        from tts_app.ui.texts import pick_language

        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope.get("headers", [])}
        lang = pick_language(getattr(self.host, "lang", None), headers.get("accept-language"))
        response = Response(loading_page(lang, self.host.load_error), status_code=503,
                            media_type="text/html", headers={"Retry-After": "5"})
        await response(scope, receive, send)


#: the HTTP API's upload route (``POST``: a voice clip, multipart)
VOICES_ROUTE = "/v1/audio/voices"
#: path prefix -> the ``endpoint`` label of ``tts_request_duration_seconds`` (the UI's own paths are not timed here)
_TIMED_PREFIXES = ("/v1/", "/metrics")


class RequestTimer:
    """ASGI middleware timing the API's requests until their last body byte (streams included) into
    ``tts_request_duration_seconds{endpoint, outcome}``; outcome = "ok" (2xx), "client_error" (4xx),
    "server_error" (5xx) or "disconnected" (the client left first)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not path.startswith(_TIMED_PREFIXES):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status: list[int] = []

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        outcome = "disconnected"
        try:
            await self.app(scope, receive, timed_send)
            code = status[0] if status else 500
            outcome = "ok" if code < 400 else ("server_error" if code >= 500 and code != 499 else "client_error")
            if code == 499 or scope.get(CLIENT_GONE_SCOPE_KEY):  # left before or during a streamed answer
                outcome = "disconnected"
        finally:
            route = scope.get("route")
            endpoint = f"{scope.get('method', '')} {getattr(route, 'path', None) or path}"
            metrics.REQUEST_DURATION.labels(endpoint=endpoint, outcome=outcome).observe(time.perf_counter() - started)


def build_app(host: AppHost, config: ServerConfig, *, upload_folder: Path | None = None,
              uploads: UploadConfig = UploadConfig()) -> tuple[FastAPI, LateMount]:
    """The server app and the ``LateMount`` where the web UI goes (see the module docstring).

    Args:
        host: the app state (runtime, voices); read per request, so a model that finishes loading is used at once.
        config: access control and limits.
        upload_folder: gradio's upload folder, from the composition root (``tts_app.ui.launch``: only it imports
            gradio); None = no web UI uploads (none is a file input, none counts in the quota).
        uploads: the per-kind upload limits and the per-owner disk quota (``tts_app.server.uploads``).
    """
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    app = FastAPI(title="tts_app", docs_url=None, redoc_url=None, openapi_url="/v1/openapi.json")
    app.add_exception_handler(APIError, api_error_handler)
    app.add_exception_handler(RequestValidationError, validation_error_handler)
    policy = AccessPolicy(config.api_keys, config.ui_auth)
    # Starlette runs the middleware added last first: CORS (answers preflights) -> timer -> access -> sessions ->
    # upload limits (they need the owner the sessions' cookie names).
    voice_limit = (config.max_voice_upload_bytes, "kind_voice")
    app.add_middleware(UploadLimits, routes=(
        UploadRoute(UPLOAD_ROUTE, page_upload_limit(uploads.max_upload_bytes, uploads.max_zip_upload_bytes)),
        UploadRoute(VOICES_ROUTE, lambda _name: voice_limit, api_param="audio_sample")),
        quota=DiskQuota(host.output_root, upload_folder, uploads.max_owner_bytes), api_keys=tuple(config.api_keys))
    app.add_middleware(BrowserSessions, output_root=host.output_root, api_keys=tuple(config.api_keys),
                       upload_folder=upload_folder)
    app.add_middleware(AccessGuard, policy=policy)
    app.add_middleware(RequestTimer)
    if config.cors_origins:
        add_cors(app, config)
    routes = OpenAIRoutes(host, config)
    app.include_router(routes.router())
    registry = metrics.make_registry(lambda: host.runtime)

    @app.get("/metrics")
    def prometheus_metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    ui = LateMount(host)
    app.mount("/", ui)
    app.state.openai_routes = routes
    app.state.access_policy = policy
    return app, ui


def add_cors(app: FastAPI, config: ServerConfig) -> None:
    """Starlette's ``CORSMiddleware`` on ``app`` for ``config.cors_origins`` (none: no CORS headers at all). Added to
    the gradio app's parent too, where its presence stops gradio from adding its own (which reflects any origin
    with credentials when the host is not localhost, and localhost origins when it is)."""
    from starlette.middleware.cors import CORSMiddleware

    app.add_middleware(CORSMiddleware, allow_origins=list(config.cors_origins), allow_methods=["GET", "POST",
                       "DELETE", "OPTIONS"], allow_headers=["Authorization", "Content-Type", "X-API-Key"],
                       expose_headers=["X-Request-Id", "X-Seed", "X-Sampling-Rate", "X-Audio-Duration-S",
                                       "X-TTS-Warnings", "X-TTS-Stream", "Retry-After"])


def attach_ui(app_loop: asyncio.AbstractEventLoop, ui: LateMount, asgi_app: Any, timeout_s: float = 60.0) -> None:
    """From another thread: attach ``asgi_app`` to ``ui`` in the server's event loop and wait for its startup.

    Raises:
        RuntimeError: its startup failed.
        concurrent.futures.TimeoutError: it did not start within ``timeout_s``.
    """
    asyncio.run_coroutine_threadsafe(ui.attach(asgi_app), app_loop).result(timeout=timeout_s)
