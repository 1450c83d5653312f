"""The whole web server of ``python app.py`` in-process (``tts_app.server.app.build_app`` + the gradio app of
``tts_app.ui.mount.compose_ui``, attached as the launched app attaches it) on a model-free ``FakeAdapter``, for
Starlette's ``TestClient``: every route (gradio's, ``/v1``, ``/metrics``, the file routes) behind the same
middleware as in production, without a subprocess (a launch costs ~35 s; this ~10 s, mostly imports)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from types import SimpleNamespace

from tts_app.server.sessions import COOKIE_NAME, new_browser_token, owner_key

FILE_DATA_META = {"_type": "gradio.FileData"}


def _context(output_root: Path, config, runtime, context_args: dict):
    from tests.fakes import FakeAdapter
    from tts_app.config import EngineConfig, ModelConfig
    from tts_app.runtime import Runtime
    from tts_app.ui.context import AppContext, AppSettings

    engine = EngineConfig(wait_window_ms=1)
    settings = AppSettings(model_config=context_args.pop("model_config", ModelConfig()), engine_config=engine,
                           output_root=output_root, api_keys=config.api_keys, **context_args)
    return AppContext(settings, runtime=runtime or Runtime.from_adapter(FakeAdapter(), "fake", engine))


@contextlib.contextmanager
def composed_app(output_root: Path, server_config=None, runtime=None, **context_args):
    """Yields ``SimpleNamespace(client, ctx, config)``: a ``TestClient`` (lifespan running, gradio attached) on the
    composed server. ``runtime``: the model's ``Runtime`` (default: a ``FakeAdapter``'s); ``context_args``: extra
    ``AppSettings`` fields (``upload_config``, ``lang``...)."""
    from starlette.testclient import TestClient

    from tts_app.config import ServerConfig
    from tts_app.server.app import build_app
    from tts_app.ui.mount import compose_ui

    config = server_config or ServerConfig()
    ctx = _context(output_root, config, runtime, context_args)
    try:
        ctx.start_jobs()
        from gradio.utils import get_upload_folder

        app, ui = build_app(ctx, config, upload_folder=Path(get_upload_folder()), uploads=ctx.upload_config)
        gradio_app = compose_ui(ctx, config, app.state.access_policy)
        with TestClient(app) as client:
            client.portal.call(ui.attach, gradio_app)
            try:
                yield SimpleNamespace(client=client, ctx=ctx, config=config, app=app)
            finally:
                client.portal.call(ui.close)
    finally:
        ctx.close()


@contextlib.contextmanager
def composed_app_at(root: Path, server_config=None, runtime=None, **context_args):
    """``composed_app`` whose gradio upload folder (``GRADIO_TEMP_DIR``) is ``root / "gradio"`` and outputs are under
    ``root / "out"``: a test module's uploads in a folder of its own."""
    import pytest

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRADIO_TEMP_DIR", str(root / "gradio"))
        with composed_app(root / "out", server_config, runtime, **context_args) as composed:
            yield composed


@contextlib.contextmanager
def served_app(output_root: Path, server_config=None, runtime=None, **context_args):
    """The composed server behind a real socket (uvicorn in a thread of this process, as ``python app.py`` runs
    it), for what ``TestClient`` cannot show (a client that closes its connection). Yields
    ``SimpleNamespace(url, ctx, config, app)``; ``runtime`` and ``context_args`` as ``composed_app``."""
    from gradio.utils import get_upload_folder

    from tts_app.config import ServerConfig
    from tts_app.server.app import attach_ui, build_app
    from tts_app.server.main import Server, bind_socket
    from tts_app.ui.mount import compose_ui

    config = server_config or ServerConfig()
    ctx = _context(output_root, config, runtime, context_args)
    server = ui = None
    try:
        ctx.start_jobs()
        app, ui = build_app(ctx, config, upload_folder=Path(get_upload_folder()), uploads=ctx.upload_config)
        sock = bind_socket("127.0.0.1", 0)
        server = Server(app, sock)
        server.start()
        attach_ui(server.loop, ui, compose_ui(ctx, config, app.state.access_policy))
        yield SimpleNamespace(url=f"http://127.0.0.1:{sock.getsockname()[1]}", ctx=ctx, config=config, app=app)
    finally:
        if server is not None:
            if ui is not None:  # gradio's lifespan shutdown, in the server's loop
                asyncio.run_coroutine_threadsafe(ui.close(), server.loop).result(timeout=15)
            server.stop()
        ctx.close()


class Browser:
    """One browser (its own ``tts_app_browser`` cookie, sent with every request) on a composed app's client."""

    def __init__(self, client, token: str | None = None, **headers: str):
        self.client = client
        self.token = token or new_browser_token()
        self.owner = owner_key(self.token)
        self.headers = {"cookie": f"{COOKIE_NAME}={self.token}", **headers}

    def upload(self, path: Path) -> str:
        """Upload ``path`` through gradio's upload route; returns the stored file's path on the server."""
        with open(path, "rb") as f:
            response = self.client.post("/gradio_api/upload", headers=self.headers, files={"files": (path.name, f)})
        assert response.status_code == 200, response.text
        return response.json()[0]

    def call(self, api_name: str, data: list):
        """``POST /gradio_api/call/<api_name>``: the response (200 with an event id when gradio took the call)."""
        return self.client.post(f"/gradio_api/call/{api_name}", headers=self.headers, json={"data": data})

    def result(self, api_name: str, event_id: str) -> str:
        """The event stream of a call, as text (``event: complete`` / ``event: error`` and their data)."""
        return self.client.get(f"/gradio_api/call/{api_name}/{event_id}", headers=self.headers).text


def file_data(path: str | Path, meta: bool = True) -> dict:
    """A gradio file input naming ``path`` (``meta=False``: the older form without ``meta``, which gradio also
    takes)."""
    return {"path": str(path), **({"meta": FILE_DATA_META} if meta else {})}
