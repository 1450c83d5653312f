"""The web page as an app to mount: ``compose_ui`` builds the gradio app (layout, handlers, file routes, log-in)
for a loaded ``AppContext``; the composition root (``tts_app.server.main``) attaches it at ``/`` of the running
server. Nothing here starts a server, loads a model or reads the command line.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

#: gradio's event stream of one ``/call`` API call: ``GET /gradio_api/call/<api name>/<event id>``
_CALL_STREAM = re.compile(r"^/gradio_api/call/[^/]+/(?P<event_id>[0-9a-f]{32})/?$")


class CallSessionReaper:
    """ASGI middleware on the gradio app's parent: once the event stream of a ``/gradio_api/call`` API call has
    ended, the session gradio made for that one call is dropped.

    Why: gradio keeps a ``SessionState`` per session hash (a copy of every component's config: ~250 KB for this
    page) until ``state_session_capacity`` (10,000) sessions exist, and a ``/call`` request without a session hash
    of its own is a new session named by its event id (``gradio.queueing.Event``), used by nothing after its event.
    So every API call kept ~0.25-0.65 MB (measured: RSS +660 KB per ``/call/synthesize`` over 150 calls, +31 KB
    once the session is dropped, less once its emptied message queue goes too), up to gigabytes. Page sessions (a browser tab, a ``gradio_client.Client``) are not touched.

    Args:
        gradio_app: gradio's ``App`` (its ``state_holder``).
    """

    def __init__(self, app, gradio_app):
        self.app = app
        self.gradio_app = gradio_app

    async def __call__(self, scope, receive, send) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            match = _CALL_STREAM.match(scope.get("path", "")) if scope.get("type") == "http" and \
                scope.get("method") == "GET" else None
            if match is not None:
                session = match["event_id"]
                holder = self.gradio_app.state_holder
                with holder.lock:
                    holder.session_data.pop(session, None)
                    holder.time_last_used.pop(session, None)
                queue = getattr(self.gradio_app.get_blocks(), "_queue", None)
                if queue is not None and not queue.pending_event_ids_session.get(session):
                    # the call's message queue, now read to its end
                    queue.pending_event_ids_session.pop(session, None)
                    queue.pending_messages_per_session.pop(session, None)


def compose_ui(ctx, server_config, policy=None):
    """The gradio app (a FastAPI app) for the loaded ``ctx``, ready to attach at ``/`` of the server
    (``tts_app.server.app.LateMount``); its file inputs are checked as a launched gradio app checks them.

    Args:
        policy: the server's ``tts_app.server.security.AccessPolicy`` (its log-in is gradio's form; it learns the
            gradio app's sessions here); None: one for ``server_config``.
    """
    import gradio as gr
    from fastapi import FastAPI

    from tts_app.output_layout import JOBS_DIR, SESSIONS_DIR
    from tts_app.server.app import add_cors
    from tts_app.server.security import AccessPolicy
    from tts_app.ui.layout import CSS, build_demo, page_js
    from tts_app.voices import BUNDLED_VOICES_DIR

    if policy is None:
        policy = AccessPolicy(server_config.api_keys, server_config.ui_auth)

    demo, i18n = build_demo(ctx)
    demo.queue(default_concurrency_limit=8)
    limits = ctx.upload_config
    # The browsers' own output folders and the job folders are served from where they are (not copied into gradio's
    # shared cache, whose files anyone with the URL could fetch), so ``tts_app.server.sessions.BrowserSessions`` can
    # keep each owner's files its own. The bundled example voices are public.
    gr.set_static_paths([str(ctx.output_root / SESSIONS_DIR), str(ctx.output_root / JOBS_DIR), str(BUNDLED_VOICES_DIR)])
    parent = FastAPI()
    add_cors(parent, server_config)  # gradio adds no CORS of its own under a parent that has Starlette's
    holder = gr.mount_gradio_app(parent, demo, path="/", auth=policy.gradio_auth(),
                                 i18n=i18n, css=CSS, js=page_js(ctx.lang),
                                 # voices' files are served as copies from there
                                 allowed_paths=[str(ctx.output_root), str(ctx.voices.root)],
                                 # gradio refuses bigger uploads while they stream in (HTTP 413), before they fill a disk
                                 max_file_size=max(limits.max_upload_bytes, limits.max_zip_upload_bytes),
                                 show_error=True)
    gradio_app = next(route.app for route in holder.routes if getattr(route, "app", None) is not None
                      and hasattr(route.app, "tokens"))
    holder.add_middleware(CallSessionReaper, gradio_app=gradio_app)
    # gradio checks a request's file inputs (``processing_utils._check_allowed``: only files in its upload folder,
    # never ``blocked_paths``) only once ``launch()`` has run; a mounted app never launches, so say it has. The
    # owner of each input file is checked before gradio sees the request (``tts_app.server.sessions``).
    demo.has_launched = True
    policy.attach_gradio(gradio_app)
    return holder


def upload_folder() -> Path:
    """gradio's upload folder (its ``App`` reads the same function, ``gradio.utils.get_upload_folder``): where the
    page's uploads land."""
    from gradio.utils import get_upload_folder

    return Path(get_upload_folder())


def share_tunnel(host: str, port: int) -> None:
    """``--share``: gradio's public-link tunnel (gradio.live) to ``host:port``; a failure is printed, the local
    server goes on."""
    import secrets

    from gradio import networking

    try:
        link = networking.setup_tunnel(local_host=host, local_port=port, share_token=secrets.token_urlsafe(32),
                                       share_server_address=None, share_server_tls_certificate=None)
        print(f"Running on public URL: {link}", flush=True)
    except Exception as exc:  # noqa: BLE001 - no network, blocked tunnel: the local server still works
        print(f"warning: could not create a share link: {exc}", file=sys.stderr, flush=True)
