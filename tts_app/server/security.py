"""Who may call the HTTP API, and how often: API keys (``Authorization: Bearer KEY``, as the OpenAI clients send
it) and a per-client rate limit. The web page's own login is gradio's (``ServerConfig.ui_auth``).

The rate limit is a token bucket per client (the generic cell-rate idea: each client may burst ``burst`` requests,
then one more every ``60 / rate_per_min`` seconds); a client is its API key when keys are in use, else its network
address as the server sees it.
"""

from __future__ import annotations

import hmac
import threading
import time
from dataclasses import dataclass

from fastapi import Request

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


def bearer_token(request: Request) -> str | None:
    """``bearer_from_headers`` of a request."""
    return bearer_from_headers(request.headers)


def check_api_key(request: Request, api_keys: tuple[str, ...]) -> str | None:
    """The caller's key when ``api_keys`` is set and it matches one of them (compared in constant time), None when
    the API is open.

    Raises:
        APIError: 401 when keys are set and the request has none or a wrong one.
    """
    if not api_keys:
        return None
    given = bearer_token(request)
    if given is None:
        HTTP_REJECTIONS.labels(reason="missing_api_key").inc()
        raise APIError(401, "this API needs a key: send the header 'Authorization: Bearer YOUR_KEY' (the server's "
                            "--api-key or TTS_APP_API_KEY)", code="missing_api_key",
                       headers={"WWW-Authenticate": "Bearer"})
    matched = [key for key in api_keys if hmac.compare_digest(given.encode(), key.encode())]
    if not matched:
        HTTP_REJECTIONS.labels(reason="invalid_api_key").inc()
        raise APIError(401, "the API key is not valid; check the key you were given", code="invalid_api_key",
                       headers={"WWW-Authenticate": "Bearer"})
    return matched[0]


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
