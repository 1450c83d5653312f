"""Upload limits enforced while the body streams in, and the per-owner disk quota (issue 25, Build 5).

``UploadLimits`` (ASGI middleware) sits in front of the routes that take uploaded files, gradio's
``/gradio_api/upload`` and ``POST /v1/audio/voices``. It reads the multipart body as the server receives it, with
``python_multipart``'s streaming parser (the parser gradio and Starlette use), counts each file part's bytes against
its kind's limit and the whole body against what the caller's disk quota has left, and refuses with 413 (JSON
``{"detail": ...}`` in the caller's language) **as soon as a limit is passed**: a ``Content-Length`` over the limit
before a byte is read, else at the first chunk past it. The app behind it is then handed the end of a malformed
multipart body, so gradio's and Starlette's own parsers fail, delete the part they were writing, and answer
nothing that reaches the client. Nothing past the limit is written to disk.

Kinds (``UploadConfig``): a file named ``*.zip`` is an audio ZIP (``max_zip_upload_bytes``), any other file on the
page a reference audio, job file or default voice (``max_upload_bytes``); ``/v1/audio/voices`` takes one clip
(``ServerConfig.max_voice_upload_bytes``). The page's upload boxes already refuse larger files before sending them
(``max_file_size``, the largest of the kinds); this is for clients that send them anyway.

Quota (``UploadConfig.max_owner_bytes``): ``DiskQuota.used_bytes(owner)`` = the owner's job folders (``job.json``
names the owner) + the upload folders whose ``.tts_app_owners`` names it (gradio's cache; each counted whole for
every owner that uploaded the same content). Uploads and new jobs that would pass it are refused.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tts_app.metrics import HTTP_REJECTIONS

logger = logging.getLogger(__name__)

#: Room for a multipart body's own bytes (boundaries, part headers, a form's small text fields) on top of the file
#: limit when only ``Content-Length`` is known, in bytes.
FORM_OVERHEAD_BYTES = 64 * 1024
#: The refusals of this module, in the caller's language (``Accept-Language``: zh first, else English).
MESSAGES = {
    "en": {"upload_too_large": "{name} is larger than {limit}, the most accepted for {kind}; upload a smaller file",
           "quota_full": "your files on this server (jobs and uploads) take {used} of the {limit} each user may "
                         "keep; {more} more does not fit. Delete old jobs or wait until they are removed",
           "kind_zip": "an audio ZIP", "kind_file": "a reference audio, job file or voice",
           "kind_voice": "a voice clip"},
    "zh": {"upload_too_large": "{name} 超过 {limit}，即{kind}最多接受的大小；请上传更小的文件",
           "quota_full": "你在本服务器上的文件（任务和上传）已占用 {used}，每位用户最多保留 {limit}；再加 {more} "
                         "放不下。请删除旧任务，或等待它们被自动清理",
           "kind_zip": "音频 ZIP", "kind_file": "参考音频、任务文件或音色", "kind_voice": "音色音频"},
}


def lang_of(headers) -> str:
    """"zh" when the request's ``Accept-Language`` starts with zh, else "en"."""
    return "zh" if (headers.get("accept-language") or "").lower().lstrip().startswith("zh") else "en"


def message(lang: str, key: str, **values) -> str:
    """``MESSAGES[lang][key]`` filled in (``lang`` "zh" or "en")."""
    return MESSAGES[lang][key].format(**values)


def format_bytes(size_bytes: int | float) -> str:
    """``size_bytes`` in decimal units as the upload limits are given (``100 MB``, ``1.5 GB``, ``300 KB``)."""
    for unit, scale in (("GB", 1000**3), ("MB", 1000**2), ("KB", 1000)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:.3g} {unit}"
    return f"{int(size_bytes)} B"


def folder_bytes(folder: Path) -> int:
    """Bytes of the regular files under ``folder`` (0 when it is gone; files vanishing meanwhile are skipped)."""
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total


class DiskQuota:
    """Disk one owner holds on the server: job folders and uploads (module docstring).

    Args:
        output_root: the web UI's output folder (jobs under ``jobs/``).
        upload_folder: gradio's upload folder; None = no uploads counted.
        max_owner_bytes: ``UploadConfig.max_owner_bytes``.
    """

    def __init__(self, output_root: Path, upload_folder: Path | None, max_owner_bytes: int):
        self.output_root = Path(output_root)
        self.upload_folder = None if upload_folder is None else Path(upload_folder)
        self.max_owner_bytes = int(max_owner_bytes)

    def used_bytes(self, owner: str) -> int:
        """Bytes of ``owner``'s job folders and upload folders now."""
        from tts_app.jobs.store import JobStore
        from tts_app.server.sessions import read_upload_owners

        store = JobStore(self.output_root)
        total = sum(folder_bytes(store.folder(state.job_id)) for state in store.list(owner=owner, limit=10**9))
        if self.upload_folder is not None and self.upload_folder.is_dir():
            for folder in self.upload_folder.iterdir():
                owners = read_upload_owners(folder) if folder.is_dir() else None
                if owners is not None and owner in owners:
                    total += folder_bytes(folder)
        return total

    def left_bytes(self, owner: str) -> int:
        """Bytes ``owner`` may still add (0 when at or over the quota)."""
        return max(0, self.max_owner_bytes - self.used_bytes(owner))

    def refusal(self, owner: str, more_bytes: int, lang: str) -> str | None:
        """The message refusing ``more_bytes`` more for ``owner`` in ``lang``, or None when they fit."""
        used = self.used_bytes(owner)
        if used + more_bytes <= self.max_owner_bytes:
            return None
        return message(lang, "quota_full", used=format_bytes(used), limit=format_bytes(self.max_owner_bytes),
                       more=format_bytes(more_bytes))


@dataclass(frozen=True)
class UploadRoute:
    """One route taking uploads: ``limit_of(file name) -> (limit in bytes, kind message key)`` per file part;
    ``api_param``: the form field of an HTTP API route, whose refusal is an OpenAI error naming it
    (``tts_app.server.errors``), else None (``{"detail": ...}``, as gradio's routes answer)."""

    path: str
    limit_of: Callable[[str], tuple[int, str]]
    api_param: str | None = None

    @property
    def max_part_bytes(self) -> int:
        return max(self.limit_of("a.zip")[0], self.limit_of("a.wav")[0])


def page_upload_limit(max_upload_bytes: int, max_zip_upload_bytes: int) -> Callable[[str], tuple[int, str]]:
    """The page's per-kind rule (module docstring): ``*.zip`` -> the ZIP limit, anything else -> the file limit."""

    def limit_of(filename: str) -> tuple[int, str]:
        if filename.lower().endswith(".zip"):
            return max_zip_upload_bytes, "kind_zip"
        return max_upload_bytes, "kind_file"

    return limit_of


class _Refused(Exception):
    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


class _BodyMeter:
    """Counts a multipart body as it streams: each file part against its kind's limit, the whole against
    ``max_total_bytes``; raises ``_Refused`` at the first byte past either."""

    def __init__(self, route: UploadRoute, boundary: bytes | None, max_total_bytes: int | None,
                 refuse_total: Callable[[int], str], lang: str):
        self.route = route
        self.lang = lang
        self.max_total_bytes = max_total_bytes
        self.refuse_total = refuse_total
        self.total_bytes = 0
        self._header_name = b""
        self._header_value = b""
        self._disposition = b""
        self._part_bytes = 0
        self._limit: tuple[int, str] | None = None
        self._filename = ""
        self._parser = None
        if boundary is not None:
            from python_multipart.multipart import MultipartParser

            self._parser = MultipartParser(boundary, {
                "on_part_begin": self._part_begin, "on_header_field": self._header_field,
                "on_header_value": self._header_value_cb, "on_header_end": self._header_end,
                "on_headers_finished": self._headers_finished, "on_part_data": self._part_data})

    def _part_begin(self) -> None:
        self._disposition, self._part_bytes, self._limit, self._filename = b"", 0, None, ""

    def _header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def _header_value_cb(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _header_end(self) -> None:
        if self._header_name.lower() == b"content-disposition":
            self._disposition = self._header_value
        self._header_name, self._header_value = b"", b""

    def _headers_finished(self) -> None:
        from python_multipart.multipart import parse_options_header

        _, options = parse_options_header(self._disposition)
        if b"filename" in options:
            self._filename = options[b"filename"].decode("utf-8", "replace").replace("\\", "/").rsplit("/", 1)[-1]
            self._limit = self.route.limit_of(self._filename)

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._limit is None:
            return
        self._part_bytes += end - start
        limit, kind = self._limit
        if self._part_bytes > limit:
            raise _Refused(message(self.lang, "upload_too_large", name=self._filename or "the file",
                                   limit=format_bytes(limit), kind=MESSAGES[self.lang][kind]))

    def feed(self, chunk: bytes) -> None:
        self.total_bytes += len(chunk)
        if self.max_total_bytes is not None and self.total_bytes > self.max_total_bytes:
            raise _Refused(self.refuse_total(self.total_bytes))
        if self._parser is not None and chunk:
            try:
                self._parser.write(chunk)
            except _Refused:
                raise
            except Exception as exc:  # noqa: BLE001 - a malformed body: the app's own parser answers it
                logger.debug("upload body does not parse: %s", exc)
                self._parser = None


class UploadLimits:
    """ASGI middleware: per-kind upload limits and the owner's disk quota on the upload routes, while the body
    streams in (module docstring).

    Args:
        app: the app behind it.
        routes: the guarded routes (POST only).
        quota: the per-owner disk quota; None = none.
        api_keys: the server's API keys (a client sending one is that key's owner: ``request_owner``).
    """

    def __init__(self, app: ASGIApp, routes: tuple[UploadRoute, ...], quota: DiskQuota | None = None,
                 api_keys: tuple[str, ...] = ()):
        self.app = app
        self.routes = {route.path: route for route in routes}
        self.quota = quota
        self.api_keys = tuple(api_keys)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = self.routes.get(scope.get("path", "")) if scope["type"] == "http" else None
        if route is None or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        from python_multipart.multipart import parse_options_header

        from tts_app.server.sessions import request_owner

        headers = Headers(scope=scope)
        lang = lang_of(headers)
        owner = request_owner(headers, self.api_keys)
        content_type, options = parse_options_header(headers.get("content-type", ""))
        boundary = options.get(b"boundary") if content_type == b"multipart/form-data" else None
        left = None if self.quota is None else self.quota.left_bytes(owner)
        try:
            declared = int(headers.get("content-length", ""))
        except ValueError:
            declared = None

        def refuse_total(size_bytes: int) -> str:
            if left is not None and size_bytes > left:
                return self.quota.refusal(owner, size_bytes, lang) or ""
            return message(lang, "upload_too_large", name="the upload", limit=format_bytes(max_total),
                           kind=MESSAGES[lang][route.limit_of("a.wav")[1]])

        # a body past every part's limit plus the form's own bytes, or past the quota, is refused unread
        max_total = (route.max_part_bytes + FORM_OVERHEAD_BYTES if boundary is None
                     else route.max_part_bytes * 8 + FORM_OVERHEAD_BYTES)
        if left is not None:
            max_total = min(max_total, left)
        if declared is not None and declared > max_total:
            await self._refuse(scope, receive, send, refuse_total(declared), route)
            return
        meter = _BodyMeter(route, boundary, max_total, refuse_total, lang)
        refused: list[str] = []
        poisoned = False

        async def metered_receive() -> Message:
            nonlocal poisoned
            if refused:
                if poisoned:
                    return {"type": "http.disconnect"}
                poisoned = True
                # ends the part being written and opens a part with a header no parser accepts: gradio's and
                # Starlette's parsers raise, close and delete their temporary files
                tail = b"\r\n--" + boundary + b"\r\n\x00\r\n\r\n" if boundary else b""
                return {"type": "http.request", "body": tail, "more_body": False}
            msg = await receive()
            if msg["type"] == "http.request":
                try:
                    meter.feed(msg.get("body", b""))
                except _Refused as exc:
                    refused.append(exc.detail)
                    return await metered_receive()
            return msg

        async def guarded_send(msg: Message) -> None:
            if not refused:
                await send(msg)

        try:
            await self.app(scope, metered_receive, guarded_send)
        except Exception:  # noqa: BLE001 - the app's parser failing on the poisoned body; anything else re-raised
            if not refused:
                raise
        if refused:
            await self._refuse(scope, receive, send, refused[0], route)

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, detail: str, route: UploadRoute) -> None:
        HTTP_REJECTIONS.labels(reason="upload_too_large").inc()
        logger.info("refused an upload to %s: %s", scope.get("path"), detail)
        if route.api_param is not None:
            from tts_app.server.errors import APIError

            response = APIError(413, detail, code="file_too_large", param=route.api_param,
                                headers={"Connection": "close"}).response()
        else:
            response = JSONResponse({"detail": detail}, status_code=413, headers={"Connection": "close"})
        await response(scope, receive, send)
