"""Each browser's files are its own: a browser cookie (or an API key) names an *owner*, and the web UI's files are
served only to their owner.

Owners: a browser is ``owner_key`` of its cookie (a SHA-256 prefix, so a folder name never reveals the cookie); an API
client that sends one of the server's API keys (``Authorization: Bearer KEY``) is ``key_owner`` of that key, so a
script sees the jobs it submitted from any machine. ``request_owner`` picks one for a request.

What is guarded (gradio serves files by path, ``/gradio_api/file=PATH`` and ``/gradio_api/file/PATH``, to whoever
asks; ``BrowserSessions`` sits in front of it and answers 403 unless the request comes from the file's owner, so a
visitor who learns another's file URL, from a shared screen, a log or a guess, still cannot fetch it):

* ``<output root>/single/<owner>/...``: a browser's single and dialogue results (one folder per page session) and
  the cleaned reference clips its players show (``references/``). A gradio static path: served from there, never
  copied into gradio's shared cache.
* ``<output root>/jobs/<job id>/...``: a JSONL job's folder (its players' WAVs, its ZIP), owned by the owner recorded
  in its ``job.json`` (``JobState.owner``; a job with none is nobody's). Also a static path.
* gradio's copies of uploads (``<gradio temp dir>/<content hash>/<name>``): the upload route's answer names the
  files, and their folder gets a ``.tts_app_owners`` list of the owners that uploaded them (kept across restarts;
  gradio's cache clean-up removes it with the folder). Anyone else asking for them gets 403.
* ``<output root>/references/``: where cleaned clips lay before they moved into each browser's folder; refused.

The cookie (``tts_app_browser``): 128 random bits, ``HttpOnly`` (page scripts cannot read it), ``SameSite=Lax``,
``Path=/``, kept ``COOKIE_MAX_AGE_S`` (so a browser finds its jobs again after it restarts); set on the first
response to a client without one. Browsers and ``gradio_client`` keep it and send it with every request, file
downloads included. It is a capability, not a log-in: it ties files to a browser, and ``--auth`` decides who may
use the page at all.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import re
import secrets
from http.cookies import SimpleCookie
from pathlib import Path

from starlette.datastructures import MutableHeaders
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

logger = logging.getLogger(__name__)

COOKIE_NAME = "tts_app_browser"
#: How long a browser keeps its cookie, in s (400 days: the most browsers accept, RFC 6265bis §5.5).
COOKIE_MAX_AGE_S = 400 * 86400
#: The web UI's per-browser output area, under the output root.
SESSIONS_DIR = "single"
#: A browser's cleaned reference clips, inside its folder (``<output root>/single/<owner>/references/``).
REFERENCES_DIR = "references"
#: Where cleaned clips lay before (shared by everyone): refused.
LEGACY_REFERENCES_DIR = "references"
#: gradio's file routes (``gradio.routes``: ``API_PREFIX + "/file={path}"`` and the older ``"/file/{path}"``).
FILE_ROUTE_PREFIXES = ("/gradio_api/file=", "/gradio_api/file/")
#: gradio's upload route (answers a JSON list of the stored files' paths).
UPLOAD_ROUTE = "/gradio_api/upload"
#: The list of owners kept in the folder of an uploaded file.
UPLOAD_OWNERS_NAME = ".tts_app_owners"
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{22,64}$")


def new_browser_token() -> str:
    """A fresh cookie value (128 random bits, URL-safe)."""
    return secrets.token_urlsafe(16)


def owner_key(token: str | None) -> str:
    """The owner (and folder name) of the browser holding cookie value ``token`` ("anonymous" without one)."""
    if not token:
        return "anonymous"
    return hashlib.sha256(token.encode()).hexdigest()[:32]


def key_owner(api_key: str) -> str:
    """The owner of an API client that sends ``api_key`` ("key-" + a SHA-256 prefix, never the key itself)."""
    return "key-" + hashlib.sha256(api_key.encode()).hexdigest()[:28]


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


def request_owner(headers, api_keys: tuple[str, ...] = ()) -> str:
    """Who a request comes from: ``key_owner`` of its API key when it sends one of ``api_keys`` (``Authorization:
    Bearer KEY`` or ``X-API-Key``), else ``owner_key`` of its browser cookie.

    Args:
        headers: the request's headers (any mapping with ``get``; names in lower case).
        api_keys: the server's API keys (``ServerConfig.api_keys``); empty: cookies only.
    """
    from tts_app.server.security import bearer_from_headers

    given = bearer_from_headers(headers) if api_keys else None
    if given is not None and any(hmac.compare_digest(given.encode(), key.encode()) for key in api_keys):
        return key_owner(given)
    return owner_key(browser_token(headers.get("cookie")))


def read_upload_owners(folder: Path) -> set[str] | None:
    """The owners recorded for an upload folder, or None when it has no record (not an upload)."""
    try:
        return set((folder / UPLOAD_OWNERS_NAME).read_text(encoding="utf-8").split())
    except OSError:
        return None


def record_upload_owner(folder: Path, owner: str) -> None:
    """Add ``owner`` to an upload folder's owners (atomically: a reader sees the old or the new list)."""
    owners = read_upload_owners(folder) or set()
    if owner in owners:
        return
    tmp = folder / f"{UPLOAD_OWNERS_NAME}.{secrets.token_hex(4)}.tmp"
    tmp.write_text("\n".join(sorted(owners | {owner})) + "\n", encoding="utf-8")
    os.replace(tmp, folder / UPLOAD_OWNERS_NAME)


class BrowserSessions:
    """ASGI middleware: gives every client a browser cookie, refuses files that are not the caller's, and records
    who uploaded what (module docstring).

    Args:
        app: the app behind it (the whole server).
        output_root: the web UI's output folder.
        api_keys: the server's API keys (an API client sending one is that key's owner).
    """

    def __init__(self, app: ASGIApp, output_root: Path, api_keys: tuple[str, ...] = ()):
        self.app = app
        self.root = Path(os.path.realpath(output_root))
        self.api_keys = tuple(api_keys)

    def _allowed(self, path_text: str, owner: str) -> bool:
        """May ``owner`` fetch the file at ``path_text`` (as gradio resolves it: relative to the working folder)?
        Files outside the guarded areas are left to gradio's own checks."""
        target = Path(os.path.realpath(path_text))
        try:
            parts = target.relative_to(self.root).parts
        except ValueError:
            parts = None
        if parts is not None and parts:
            if parts[0] == SESSIONS_DIR:
                return len(parts) > 1 and parts[1] == owner
            if parts[0] == LEGACY_REFERENCES_DIR:
                return False
            if parts[0] == "jobs":
                return len(parts) > 1 and _job_owner(self.root, parts[1]) == owner
            return True
        owners = read_upload_owners(target.parent)
        return owners is None or owner in owners

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
        owner = request_owner(headers, self.api_keys)
        path = scope.get("path", "")
        for prefix in FILE_ROUTE_PREFIXES:
            if path.startswith(prefix) and not self._allowed(path[len(prefix):], owner):
                response = JSONResponse({"detail": "this file belongs to another browser session"}, status_code=403)
                await response(scope, receive, send)
                return
        uploading = path == UPLOAD_ROUTE and scope.get("method") == "POST"
        started: dict = {}
        body: list[bytes] = []

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                if issued is not None:
                    out = MutableHeaders(scope=message)
                    out.append("set-cookie", f"{COOKIE_NAME}={issued}; Path=/; Max-Age={COOKIE_MAX_AGE_S}; "
                                             "HttpOnly; SameSite=Lax")
                if uploading:  # held back until the body says which files were stored
                    started.update(message)
                    return
            elif uploading and message["type"] == "http.response.body":
                body.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                self._record_upload(started, b"".join(body), owner)
                await send(started)
                await send({"type": "http.response.body", "body": b"".join(body)})
                return
            await send(message)

        await self.app(scope, receive, send_with_cookie)

    @staticmethod
    def _record_upload(start: dict, body: bytes, owner: str) -> None:
        """Note ``owner`` in the folder of every file an upload stored (before the client learns the paths)."""
        if start.get("status") != 200:
            return
        try:
            paths = json.loads(body)
        except ValueError:
            return
        for path in paths if isinstance(paths, list) else []:
            if not isinstance(path, str):
                continue
            folder = Path(os.path.realpath(path)).parent
            try:
                if folder.is_dir():
                    record_upload_owner(folder, owner)
            except OSError as exc:  # the upload still works; only its guard is missing
                logger.warning("could not record the owner of upload %s: %s", folder.name, exc)


def _job_owner(root: Path, job_id: str) -> str | None:
    """The owner in ``<root>/jobs/<job_id>/job.json``, or None (no such job, unreadable, or nobody's)."""
    from tts_app.jobs.store import JobStore

    try:
        state = JobStore(root).load(job_id)
    except Exception:  # noqa: BLE001 - not a job id (InputError), or anything odd: nobody's
        return None
    return None if state is None else state.owner
