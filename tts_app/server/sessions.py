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

What a request may name as a file input (gradio takes a file input as a path, ``{"path": ..., "meta": ...}``, and
reads whatever path it is given, even ``/etc/passwd``, unless the app was ``launch()``-ed, which a mounted app never
is; see ``tts_app.ui.launch.compose_ui``): ``BrowserSessions`` reads the JSON body of every call to the gradio app
(``/gradio_api/queue/join``, ``run/``, ``call/``, ``api/``, ``stream/``, ...) before gradio does, and answers 403 in
words unless every ``path`` in it is

* one of the caller's own uploads: in gradio's upload folder, its folder's ``.tts_app_owners`` naming the caller;
* a file the page gave the caller: under ``<output root>/single/<caller>/`` or a job folder the caller owns;
* a bundled example voice (``tts_app.voices.BUNDLED_VOICES_DIR``).

A URL, another owner's upload, gradio's cached copy of someone's output or any other server path is refused.

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
from pathlib import Path

from starlette.datastructures import MutableHeaders
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tts_app.metrics import HTTP_REJECTIONS

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
#: Routes whose body holds uploaded files (multipart), not paths: left to the upload bookkeeping.
UPLOAD_BODY_ROUTES = (UPLOAD_ROUTE, "/gradio_api/process_recording")
#: The server's own routes (not the gradio app's): their bodies name no files.
SERVER_ROUTE_PREFIXES = ("/v1/", "/metrics")
#: Largest body of a call to the gradio app that is read to check its file inputs, in bytes (larger gets 413; the
#: longest text a request may carry, ``tts_app.config.RequestLimits``, fits many times over).
MAX_CALL_BODY_BYTES = 4 * 1024**2
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
#: The refusals of this module, in the caller's language (``Accept-Language``: zh first, else English).
MESSAGES = {
    "en": {"not_yours": "this file belongs to another browser session",
           "file_input": "the file input {name!r} was refused: only a file you uploaded on this page (or a file the "
                         "page gave you) can be used; upload the file first",
           "body_too_large": "the request is larger than {max_bytes} bytes, the most that is read (shorten the text, "
                             "or send audio as an upload)",
           "bad_body": "the request body is not valid JSON ({reason})"},
    "zh": {"not_yours": "该文件属于另一个浏览器会话",
           "file_input": "文件输入 {name!r} 被拒绝：只能使用你在本页面上传的文件（或页面给你的文件）；请先上传该文件",
           "body_too_large": "请求超过 {max_bytes} 字节，即最多读取的大小（请缩短文本，或以上传方式发送音频）",
           "bad_body": "请求体不是有效的 JSON（{reason}）"},
}
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{22,64}$")


def message(headers, key: str, **values) -> str:
    """``MESSAGES[lang][key]`` filled in, ``lang`` from the request's ``Accept-Language`` (zh first, else en)."""
    lang = "zh" if (headers.get("accept-language") or "").lower().lstrip().startswith("zh") else "en"
    return MESSAGES[lang][key].format(**values)


def file_paths_in(value) -> list[str]:
    """Every ``path`` string of a decoded JSON value: the file inputs of a gradio call (``FileData`` dicts, with or
    without their ``meta``; gradio accepts both), wherever they sit (lists of files, nested values)."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("path"), str):
                found.append(item["path"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


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
    """The ``tts_app_browser`` value of a ``Cookie`` header, if well-formed (the first such cookie).

    The header is split on ``;`` and read pair by pair (RFC 6265 §5.4's ``cookie-string``), so another site's cookie
    that ``http.cookies.SimpleCookie`` cannot parse (a JSON value, say, from another app on the same host) leaves
    ours readable: such a browser keeps its own files rather than sharing the owner "anonymous" with every other.
    """
    if not cookie_header:
        return None
    for pair in cookie_header.split(";"):
        name, sep, value = pair.partition("=")
        if sep and name.strip() == COOKIE_NAME:
            value = value.strip().strip('"')
            if _TOKEN.match(value):
                return value
    return None


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
        upload_folder: gradio's upload folder (``GRADIO_TEMP_DIR``, else ``<temp dir>/gradio``), handed in by the
            composition root (``tts_app.ui.launch``), which alone imports gradio; None = a server without the web
            UI, where no upload can be a file input.
    """

    def __init__(self, app: ASGIApp, output_root: Path, api_keys: tuple[str, ...] = (),
                 max_body_bytes: int = MAX_CALL_BODY_BYTES, upload_folder: Path | None = None):
        self.app = app
        self.root = Path(os.path.realpath(output_root))
        self.uploads = None if upload_folder is None else Path(os.path.realpath(upload_folder))
        self.api_keys = tuple(api_keys)
        self.max_body_bytes = int(max_body_bytes)

    def _owned_output(self, parts: tuple[str, ...], owner: str) -> bool:
        """Is ``<output root>/<parts>`` in an area guarded per owner, and ``owner``'s?"""
        if parts[0] == SESSIONS_DIR:
            return len(parts) > 1 and parts[1] == owner
        if parts[0] == "jobs":
            return len(parts) > 1 and _job_owner(self.root, parts[1]) == owner
        return False

    def _allowed(self, path_text: str, owner: str) -> bool:
        """May ``owner`` fetch the file at ``path_text`` (as gradio resolves it: relative to the working folder)?
        Files outside the guarded areas are left to gradio's own checks."""
        target = Path(os.path.realpath(path_text))
        try:
            parts = target.relative_to(self.root).parts
        except ValueError:
            parts = None
        if parts is not None and parts:
            if parts[0] in (SESSIONS_DIR, "jobs"):
                return self._owned_output(parts, owner)
            if parts[0] == LEGACY_REFERENCES_DIR:
                return False
            return True
        owners = read_upload_owners(target.parent)
        return owners is None or owner in owners

    def input_allowed(self, path_text: str, owner: str) -> bool:
        """May ``owner`` name the file at ``path_text`` as an input of a gradio call (module docstring: its own
        upload, a file the page gave it, a bundled example voice)?"""
        from tts_app.voices import BUNDLED_VOICES_DIR

        if not path_text or _URL.match(path_text) or "\0" in path_text:
            return False
        target = Path(os.path.realpath(path_text))
        uploads = self.uploads
        if uploads is not None and target.is_relative_to(uploads):
            owners = read_upload_owners(target.parent)
            return target.parent.parent == uploads and owners is not None and owner in owners
        if target.is_relative_to(self.root) and target != self.root:
            return self._owned_output(target.relative_to(self.root).parts, owner)
        return target.is_relative_to(Path(os.path.realpath(BUNDLED_VOICES_DIR)))

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
                response = JSONResponse({"detail": message(headers, "not_yours")}, status_code=403)
                await response(scope, receive, send)
                return
        if _names_files(scope):
            refusal, receive = await self._check_file_inputs(receive, headers, owner)
            if refusal is not None:
                await refusal(scope, receive, send)
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

    async def _check_file_inputs(self, receive: Receive, headers, owner: str):
        """Read a gradio call's body and check every file it names (``input_allowed``). Returns (None, a
        ``receive`` that replays the body) when all are allowed, else (a 403/413/400 response, ``receive``)."""
        chunks: list[bytes] = []
        size_bytes = 0
        while True:
            msg = await receive()
            if msg["type"] != "http.request":  # the client left: nothing to check, nothing to run
                return JSONResponse({"detail": "client disconnected"}, status_code=400), receive
            chunks.append(msg.get("body", b""))
            size_bytes += len(chunks[-1])
            if size_bytes > self.max_body_bytes:
                HTTP_REJECTIONS.labels(reason="body_too_large").inc()
                detail = message(headers, "body_too_large", max_bytes=self.max_body_bytes)
                return JSONResponse({"detail": detail}, status_code=413), receive
            if not msg.get("more_body"):
                break
        body = b"".join(chunks)
        try:
            value = json.loads(body) if body.strip() else None
        except RecursionError:
            return JSONResponse({"detail": message(headers, "bad_body", reason="nested too deeply")},
                                status_code=400), receive
        except ValueError as exc:  # gradio could not read it either (the same json.loads): let it answer
            value = None
            logger.debug("gradio call body is not JSON: %s", exc)
        for path_text in file_paths_in(value):
            if not self.input_allowed(path_text, owner):
                HTTP_REJECTIONS.labels(reason="file_input_refused").inc()
                logger.warning("refused a gradio call naming a file that is not the caller's: %r", path_text)
                name = path_text.replace("\\", "/").rsplit("/", 1)[-1]
                return JSONResponse({"detail": message(headers, "file_input", name=name)}, status_code=403), receive
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return None, replay

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


def _names_files(scope: Scope) -> bool:
    """Can this request name files as inputs: a POST to the gradio app that is not an upload? (Whatever its
    content type says: a body that parses as JSON is checked.)"""
    path = scope.get("path", "").rstrip("/")
    return (scope.get("method") == "POST" and not path.startswith(SERVER_ROUTE_PREFIXES)
            and path not in UPLOAD_BODY_ROUTES)


def _job_owner(root: Path, job_id: str) -> str | None:
    """The owner in ``<root>/jobs/<job_id>/job.json``, or None (no such job, unreadable, or nobody's)."""
    from tts_app.jobs.store import JobStore

    try:
        state = JobStore(root).load(job_id)
    except Exception:  # noqa: BLE001 - not a job id (InputError), or anything odd: nobody's
        return None
    return None if state is None else state.owner
