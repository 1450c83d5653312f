"""Who may use the server, and how often: one access policy for every route (``AccessPolicy``, enforced by the
``AccessGuard`` middleware in front of the whole server), API keys (``Authorization: Bearer KEY``, as the OpenAI
clients send it) and a per-client rate limit.

The policy (README, "Access control"): with neither ``--auth`` nor ``--api-key`` everything is open. Otherwise every
route (the web page's gradio API and file routes, ``/v1``, ``/metrics``) needs one credential, and either kind
admits when both are configured:

* an API key (``--api-key``): ``Authorization: Bearer KEY`` or ``X-API-Key: KEY``;
* a log-in (``--auth USER:PASSWORD``): gradio's log-in form (its session cookie; ``gradio_client.Client(url,
  auth=(user, pw))``), or HTTP Basic ``USER:PASSWORD`` from a script. With keys and no ``--auth``, the form takes
  any user name and a key as the password, so a browser can reach the page at all.

Only what the log-in form itself needs is public (``PUBLIC_PATHS``). A request the guard admits with a key or HTTP
Basic gets a gradio session for that credential (gradio's own ``tokens``), so gradio's log-in check lets
``gradio_client.Client(url, headers={"Authorization": "Bearer KEY"})`` in too.

The rate limit is a token bucket per client (the generic cell-rate idea: each client may burst ``burst`` requests,
then one more every ``60 / rate_per_min`` seconds); a client is its API key when keys are in use, else its network
address as the server sees it.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tts_app.metrics import HTTP_REJECTIONS
from tts_app.server.errors import APIError

#: Buckets kept at most; the least recently used are dropped beyond this (a client then starts with a full bucket).
MAX_TRACKED_CLIENTS = 10_000


def bearer_from_headers(headers) -> str | None:
    """The key of an ``Authorization: Bearer KEY`` header (also ``X-API-Key: KEY``), or None. ``headers``: any
    mapping with ``get`` and lower-case names (Starlette's, gradio's request headers)."""
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return headers.get("x-api-key") or None


def client_id(request: Request, api_key: str | None) -> str:
    """The rate limit's notion of a client: its API key (hashed, so keys never sit in memory twice), else its
    address."""
    if api_key is not None:
        import hashlib

        return "key:" + hashlib.sha256(api_key.encode()).hexdigest()[:16]
    host = request.client.host if request.client is not None else "unknown"
    return f"addr:{host}"


@dataclass
class _Bucket:
    tokens: float
    updated_s: float


class RateLimiter:
    """Token buckets per client (module docstring). Thread-safe.

    Args:
        rate_per_min: requests per minute a client may average; 0 = no limit.
        burst: requests a client may make at once (the bucket size), >= 1.
        clock: seconds, monotonic (injectable for tests).
    """

    def __init__(self, rate_per_min: float, burst: int, clock=time.monotonic):
        self.rate_per_s = float(rate_per_min) / 60.0
        self.burst = int(burst)
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def acquire(self, client: str) -> float:
        """Take one request from ``client``'s bucket. Returns 0.0 when allowed, else the seconds until the next
        request would be (nothing is taken then)."""
        if self.rate_per_s <= 0:
            return 0.0
        now = self._clock()
        with self._lock:
            bucket = self._buckets.pop(client, None) or _Bucket(float(self.burst), now)
            bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.updated_s) * self.rate_per_s)
            bucket.updated_s = now
            self._buckets[client] = bucket  # re-inserted: dict order = least recently used first
            while len(self._buckets) > MAX_TRACKED_CLIENTS:
                self._buckets.pop(next(iter(self._buckets)))
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return 0.0
            return (1.0 - bucket.tokens) / self.rate_per_s

    def check(self, client: str) -> None:
        """``acquire`` or refuse.

        Raises:
            APIError: 429 with ``Retry-After`` when the client is over its rate.
        """
        wait_s = self.acquire(client)
        if wait_s > 0:
            HTTP_REJECTIONS.labels(reason="rate_limited").inc()
            retry = max(1, int(wait_s + 0.999))
            raise APIError(429, f"too many requests from this client: at most {self.rate_per_s * 60:g} per minute "
                                f"(bursts of {self.burst}); retry in {retry} s", code="rate_limit_exceeded",
                           headers={"Retry-After": str(retry)})


#: Paths the log-in form needs before anyone has logged in (gradio's page, which shows the form, its log-in and
#: log-out routes, and its scripts, styles and icons). ``/config`` and ``login_check`` answer gradio's own 401.
PUBLIC_PATHS = frozenset({"/", "/login", "/login/", "/logout", "/logout/", "/config", "/config/", "/favicon.ico",
                          "/theme.css", "/robots.txt", "/manifest.json", "/gradio_api/login_check",
                          "/gradio_api/login_check/", "/gradio_api/app_id", "/gradio_api/app_id/"})
PUBLIC_PREFIXES = ("/assets/", "/static/", "/svelte/", "/pwa_icon")
#: The server's own routes (the OpenAI-style API and metrics); their refusals use the OpenAI error shape.
API_PREFIXES = ("/v1/", "/v1", "/metrics")


def _constant_time_in(given: str, choices) -> str | None:
    """The element of ``choices`` equal to ``given`` (compared in constant time each), or None."""
    found = None
    for choice in choices:
        if hmac.compare_digest(given.encode(), choice.encode()):
            found = choice
    return found


def _cookies(header: str | None) -> dict[str, str]:
    """The name -> value pairs of a ``Cookie`` header, read pair by pair (one unreadable cookie spoils nothing)."""
    out: dict[str, str] = {}
    for pair in (header or "").split(";"):
        name, sep, value = pair.partition("=")
        if sep and name.strip() and name.strip() not in out:
            out[name.strip()] = value.strip()
    return out


class AccessPolicy:
    """The one access policy of the server (module docstring).

    Args:
        api_keys: ``ServerConfig.api_keys``.
        ui_auth: ``ServerConfig.ui_auth``, (user, password) pairs.
    """

    def __init__(self, api_keys: tuple[str, ...] = (), ui_auth: tuple[tuple[str, str], ...] = ()):
        self.api_keys = tuple(api_keys)
        self.ui_auth = tuple((str(u), str(p)) for u, p in ui_auth)
        self._gradio: Any = None
        self._minted: dict[str, str] = {}
        self._lock = threading.Lock()

    @property
    def open(self) -> bool:
        """No credential configured: every route is open."""
        return not self.api_keys and not self.ui_auth

    def login_ok(self, user: str, password: str) -> bool:
        """Does a log-in (gradio's form, HTTP Basic) hold: one of ``ui_auth``, or any user name with one of the API
        keys as the password (so with keys and no ``ui_auth`` a browser can reach the page at all)?"""
        ok = False
        for known_user, known_password in self.ui_auth:
            ok |= hmac.compare_digest(user.encode(), known_user.encode()) & hmac.compare_digest(
                password.encode(), known_password.encode())
        return bool(ok) or (bool(self.api_keys) and _constant_time_in(password, self.api_keys) is not None)

    def gradio_auth(self):
        """What ``gradio.mount_gradio_app(auth=...)`` gets: None (open), else ``login_ok``."""
        return None if self.open else self.login_ok

    def attach_gradio(self, gradio_app: Any) -> None:
        """Note the mounted gradio ``App`` (its session ``tokens`` and ``cookie_id``)."""
        self._gradio = gradio_app

    def api_key(self, headers) -> str | None:
        """The request's API key when it is one of ``api_keys``, else None."""
        given = bearer_from_headers(headers) if self.api_keys else None
        return None if given is None else _constant_time_in(given, self.api_keys)

    def _basic_user(self, headers) -> str | None:
        scheme, _, encoded = (headers.get("authorization") or "").partition(" ")
        if scheme.lower() != "basic" or not encoded.strip():
            return None
        try:
            user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
        return user if sep and self.login_ok(user, password) else None

    def _gradio_user(self, headers) -> str | None:
        app = self._gradio
        if app is None:
            return None
        cookies = _cookies(headers.get("cookie"))
        token = cookies.get(f"access-token-{app.cookie_id}") or cookies.get(f"access-token-unsecure-{app.cookie_id}")
        return app.tokens.get(token) if token else None

    def principal(self, headers) -> str | None:
        """Who the request is by its credential: ``"key:<sha256 prefix>"``, ``"login:<user>"``, or None (none
        valid)."""
        key = self.api_key(headers)
        if key is not None:
            import hashlib

            return "key:" + hashlib.sha256(key.encode()).hexdigest()[:16]
        user = self._gradio_user(headers)
        if user is None:
            user = self._basic_user(headers)
        return None if user is None else f"login:{user}"

    def gradio_session(self, headers, principal: str) -> tuple[str, str] | None:
        """(cookie name, value) of a gradio session to add to a request admitted by a key or HTTP Basic (so gradio's
        own log-in check admits it too); None when it already has one or gradio is not mounted. One session per
        principal, kept for the server's life."""
        app = self._gradio
        if app is None or self._gradio_user(headers) is not None:
            return None
        with self._lock:
            token = self._minted.get(principal)
            if token is None or token not in app.tokens:
                token = self._minted[principal] = secrets.token_urlsafe(16)
                app.tokens[token] = principal
        return f"access-token-unsecure-{app.cookie_id}", token


def is_public(path: str) -> bool:
    """Does the log-in form need ``path`` before anyone has logged in (``PUBLIC_PATHS``)?"""
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


class AccessGuard:
    """ASGI middleware in front of the whole server: ``AccessPolicy`` for every HTTP request (401 without a valid
    credential, in the OpenAI error shape on ``/v1`` and ``/metrics``)."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy):
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.policy.open:
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        principal = self.policy.principal(Headers(scope=scope))
        if scope["type"] == "websocket":
            if principal is None:
                await send({"type": "websocket.close", "code": 1008})  # policy violation
            else:
                await self.app(scope, receive, send)
            return
        if principal is None:
            if is_public(path):
                await self.app(scope, receive, send)
                return
            await self._refuse(scope, receive, send, path)
            return
        session = self.policy.gradio_session(Headers(scope=scope), principal)
        if session is not None and not path.startswith(API_PREFIXES):
            headers = MutableHeaders(scope=scope)
            pair = f"{session[0]}={session[1]}"
            headers["cookie"] = f"{headers['cookie']}; {pair}" if headers.get("cookie") else pair
        await self.app(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        kinds = []
        if self.policy.api_keys:
            kinds.append("an API key ('Authorization: Bearer KEY')")
        if self.policy.ui_auth:
            kinds.append("a log-in (the web page's form, or HTTP Basic USER:PASSWORD)")
        text = f"this server needs {' or '.join(kinds)}"
        headers = Headers(scope=scope)
        if self.policy.api_keys and bearer_from_headers(headers) is not None:
            reason, text = "invalid_api_key", "the API key is not valid; check the key you were given"
        else:
            reason = "missing_api_key" if self.policy.api_keys and not self.policy.ui_auth else "not_logged_in"
        HTTP_REJECTIONS.labels(reason=reason).inc()
        if path.startswith(API_PREFIXES):
            # (no Basic challenge on the page's routes: a browser would pop up its own log-in box over gradio's)
            challenge = ", ".join((["Bearer"] if self.policy.api_keys else [])
                                  + (['Basic realm="tts_app"'] if self.policy.ui_auth else []))
            response = APIError(401, text, code=reason, headers={"WWW-Authenticate": challenge}).response()
        else:
            response = JSONResponse({"detail": text}, status_code=401)
        await response(scope, receive, send)
