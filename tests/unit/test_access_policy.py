"""One access policy for every route (issue 25, Build 4; README "Access control"): the four configurations
(neither, ``--auth``, ``--api-key``, both) x every kind of route (the page, gradio's API and file routes, ``/v1``,
``/metrics``) x every kind of credential, on the composed server in-process (``tests/composed_app.py``)."""

from __future__ import annotations

import base64

import pytest

from tests.composed_app import Browser, composed_app
from tts_app.config import ServerConfig

KEY = "sk-policy-test"
LOGIN = ("mei", "s3cret")
CONFIGS = {"neither": {}, "auth": {"ui_auth": (LOGIN,)}, "api_key": {"api_keys": (KEY,)},
           "both": {"ui_auth": (LOGIN,), "api_keys": (KEY,)}}


@pytest.fixture(scope="module", params=list(CONFIGS))
def server(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"policy-{request.param}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRADIO_TEMP_DIR", str(root / "gradio"))
        config = ServerConfig(rate_limit_per_min=0, **CONFIGS[request.param])
        with composed_app(root / "out", config) as composed:
            composed.name = request.param
            yield composed


def _form_login(client, user: str, password: str) -> str | None:
    """The session cookies gradio's log-in form sets, as a Cookie header value (None: refused)."""
    response = client.post("/login", data={"username": user, "password": password}, follow_redirects=False)
    client.cookies.clear()
    if response.status_code != 200:
        return None
    return "; ".join(f"{c.name}={c.value}" for c in response.cookies.jar)


def _basic(user: str, password: str) -> dict:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def _credentials(server) -> dict[str, dict | None]:
    """name -> extra headers of each credential (None: the log-in form refused it)."""
    login = _form_login(server.client, *LOGIN)
    key_login = _form_login(server.client, "anyone", KEY)
    return {"none": {}, "wrong key": {"authorization": "Bearer sk-wrong"}, "key": {"authorization": f"Bearer {KEY}"},
            "x-api-key": {"x-api-key": KEY}, "form login": None if login is None else {"cookie-extra": login},
            "form login with the key": None if key_login is None else {"cookie-extra": key_login},
            "basic": _basic(*LOGIN), "wrong basic": _basic(LOGIN[0], "nope")}


def _admitted(config: str, credential: str) -> bool:
    """The README's table: with neither everything is open; else a key admits where keys are configured, a log-in
    (the form or HTTP Basic) where logins are; the form also takes a key as the password."""
    if config == "neither":
        return True
    keys, logins = config in ("api_key", "both"), config in ("auth", "both")
    return {"key": keys, "x-api-key": keys, "form login": logins, "basic": logins,
            "form login with the key": keys}.get(credential, False)


def _routes(server, upload: str):
    """(name, callable(headers) -> status) for routes of each kind."""
    c = server.client
    return [
        ("gradio info", lambda h: c.get("/gradio_api/info", headers=h).status_code),
        ("gradio config", lambda h: c.get("/config", headers=h).status_code),
        ("gradio upload", lambda h: c.post("/gradio_api/upload", headers=h,
                                           files={"files": ("a.txt", b"hello")}).status_code),
        ("gradio call", lambda h: c.post("/gradio_api/call/preview", headers=h, json={"data": ["你好"]}).status_code),
        ("gradio file route", lambda h: c.get(f"/gradio_api/file={upload}", headers=h).status_code),
        ("gradio cancel", lambda h: c.post("/gradio_api/cancel", headers=h,
                                           json={"event_id": "x", "session_hash": "y", "fn_index": 0}).status_code),
        ("v1 models", lambda h: c.get("/v1/models", headers=h).status_code),
        ("v1 delete voice", lambda h: c.delete("/v1/audio/voices/nobody-here", headers=h).status_code),
        ("metrics", lambda h: c.get("/metrics", headers=h).status_code),
    ]


def _headers(browser: Browser, extra: dict) -> dict:
    headers = dict(browser.headers)
    extra = dict(extra)
    if "cookie-extra" in extra:
        headers["cookie"] += "; " + extra.pop("cookie-extra")
    return {**headers, **extra}


def test_every_route_admits_exactly_the_configured_credentials(server):
    creds = _credentials(server)
    browser = Browser(server.client)
    admin = _headers(browser, creds["key"] if server.name in ("api_key", "both") else (creds["form login"] or {}))
    response = server.client.post("/gradio_api/upload", headers=admin, files={"files": ("a.wav", b"RIFF....")})
    assert response.status_code == 200, response.text
    upload = response.json()[0]
    failures = []
    for cred_name, extra in creds.items():
        if extra is None:
            # the form refused it (without a log-in configured gradio has no form: everything is open anyway)
            assert server.name == "neither" or not _admitted(server.name, cred_name), (server.name, cred_name)
            continue
        headers = _headers(browser, extra)
        for route, status_of in _routes(server, upload):
            status = status_of(headers)
            admitted = status != 401  # (403: admitted, but the file is another owner's)
            if admitted != _admitted(server.name, cred_name):
                failures.append((server.name, cred_name, route, status))
    assert failures == []


def test_the_login_page_itself_is_always_reachable(server):
    page = server.client.get("/", headers=Browser(server.client).headers)
    assert page.status_code == 200 and "<html" in page.text.lower()


def test_a_refusal_says_which_credential_is_needed(server):
    if server.name == "neither":
        pytest.skip("nothing is refused")
    response = server.client.get("/v1/models", headers=Browser(server.client).headers)
    assert response.status_code == 401
    message = response.json()["error"]["message"]
    assert ("API key" in message) == (server.name in ("api_key", "both"))
    assert ("log-in" in message) == (server.name in ("auth", "both"))
    call = server.client.post("/gradio_api/call/preview", headers=Browser(server.client).headers,
                              json={"data": ["你好"]})
    assert call.status_code == 401 and "this server needs" in call.json()["detail"]


def test_no_cors_headers_for_another_origin_unless_configured(server):
    for origin in ("http://localhost:9999", "https://evil.example"):
        response = server.client.get("/", headers={**Browser(server.client).headers, "origin": origin})
        assert "access-control-allow-origin" not in response.headers, origin
        assert "access-control-allow-credentials" not in response.headers, origin


@pytest.mark.parametrize("trusted, seen", [((), "127.0.0.1"), (("127.0.0.1",), "203.0.113.7")])
def test_x_forwarded_for_names_the_client_only_from_a_trusted_proxy(trusted, seen):
    """The rate limit's client is the peer address, unless ``--forwarded-allow-ips`` trusts the peer as a proxy."""
    import httpx
    from starlette.responses import PlainTextResponse

    from tts_app.server.main import Server, bind_socket

    async def echo_client(scope, receive, send):
        if scope["type"] == "http":
            await PlainTextResponse(scope["client"][0])(scope, receive, send)

    sock = bind_socket("127.0.0.1", 0)
    server = Server(echo_client, sock, trusted)
    server.start()
    try:
        port = sock.getsockname()[1]
        response = httpx.get(f"http://127.0.0.1:{port}/", headers={"x-forwarded-for": "203.0.113.7"}, timeout=30)
        assert response.text == seen
    finally:
        server.stop()


def test_the_pages_config_does_not_show_server_paths(tmp_path):
    """``/config`` (what every visitor's page loads) names a local checkpoint by its folder's name only."""
    from tts_app.config import ModelConfig

    model_dir = tmp_path / "secret-place" / "tiny-vibevoice"
    model_dir.mkdir(parents=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRADIO_TEMP_DIR", str(tmp_path / "gradio"))
        with composed_app(tmp_path / "out", model_config=ModelConfig(model_id=str(model_dir))) as composed:
            config = composed.client.get("/config", headers=Browser(composed.client).headers).text
    assert "tiny-vibevoice" in config
    assert "secret-place" not in config and str(tmp_path / "out") not in config
