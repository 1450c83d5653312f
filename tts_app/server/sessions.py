"""Each browser's outputs are its own: a browser cookie names an owner, and the web UI's files under the owners'
folder are served only to the browser whose cookie owns them.

The web UI writes a browser's outputs (single and dialogue results, JSONL job folders and their ZIPs) to
``<output root>/single/<owner key>/...`` (``owner_key`` of its cookie: a SHA-256 prefix, so a folder name never
reveals the cookie); that folder is one of gradio's static paths, so gradio serves the files from there instead of
copying them into its shared cache. Gradio serves files by path (``/gradio_api/file=PATH``) to whoever asks;
``BrowserSessions`` sits in front of it and answers 403 for a file of that folder unless the request carries the
owning cookie, so a visitor who learns another's file path (from a
shared screen, a log, a guess) still cannot fetch it. Browsers and ``gradio_client`` keep the cookie and send it
with every request, file downloads included.

The cookie (``tts_app_browser``): 128 random bits, ``HttpOnly`` (page scripts cannot read it), ``SameSite=Lax``,
``Path=/``; set on the first response to a client without one. It is a capability, not a log-in: it ties files to
a browser, and ``--auth`` decides who may use the page at all.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from http.cookies import SimpleCookie
from pathlib import Path

from starlette.datastructures import MutableHeaders
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

COOKIE_NAME = "tts_app_browser"
#: The web UI's per-browser output area, under the output root.
SESSIONS_DIR = "single"
#: gradio's file route (``gradio.routes``: ``API_PREFIX + "/file={path}"``).
FILE_ROUTE_PREFIX = "/gradio_api/file="
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{22,64}$")


def new_browser_token() -> str:
    """A fresh cookie value (128 random bits, URL-safe)."""
    return secrets.token_urlsafe(16)


def owner_key(token: str | None) -> str:
    """The folder name of the browser holding cookie value ``token`` ("anonymous" without one)."""
    if not token:
        return "anonymous"
    return hashlib.sha256(token.encode()).hexdigest()[:32]


def browser_token(cookie_header: str | None) -> str | None:
    """The ``tts_app_browser`` value of a ``Cookie`` header, if well-formed."""
    if not cookie_header:
        return None
    jar = SimpleCookie()
    try:
        jar.load(cookie_header)
    except Exception:  # noqa: BLE001 - a malformed Cookie header means "no cookie"
        return None
    morsel = jar.get(COOKIE_NAME)
    if morsel is None or not _TOKEN.match(morsel.value):
        return None
    return morsel.value


class BrowserSessions:
    """ASGI middleware: gives every client a browser cookie, and refuses files of another browser's folder
    (module docstring).

    Args:
        app: the app behind it (the whole server).
        output_root: the web UI's output folder; ``output_root / SESSIONS_DIR`` is protected.
    """

    def __init__(self, app: ASGIApp, output_root: Path):
        self.app = app
        self.protected = Path(os.path.realpath(Path(output_root) / SESSIONS_DIR))

    def _owner_of(self, path_text: str) -> str | None:
        """The owner folder a requested file lies in, or None when it is outside the protected area."""
        target = Path(os.path.realpath(path_text))
        try:
            relative = target.relative_to(self.protected)
        except ValueError:
            return None
        return relative.parts[0] if relative.parts else ""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = MutableHeaders(scope=scope)
        token = browser_token(headers.get("cookie"))
        issued = None
        if token is None:
            issued = token = new_browser_token()
            cookie = f"{COOKIE_NAME}={token}"
            headers["cookie"] = f"{headers['cookie']}; {cookie}" if headers.get("cookie") else cookie
        path = scope.get("path", "")
        if path.startswith(FILE_ROUTE_PREFIX):
            owner = self._owner_of(path[len(FILE_ROUTE_PREFIX):])
            if owner is not None and owner != owner_key(token):
                response = JSONResponse({"detail": "this file belongs to another browser session"}, status_code=403)
                await response(scope, receive, send)
                return

        async def send_with_cookie(message: Message) -> None:
            if issued is not None and message["type"] == "http.response.start":
                out = MutableHeaders(scope=message)
                out.append("set-cookie", f"{COOKIE_NAME}={issued}; Path=/; HttpOnly; SameSite=Lax")
            await send(message)

        await self.app(scope, receive, send_with_cookie)
