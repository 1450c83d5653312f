"""``python app.py [model and engine flags] [web server flags] [--lang zh|en] [--output-dir DIR]
[--max-upload-size SIZE] [--max-zip-size SIZE] [--ray [ADDRESS|auto|local] [--num-workers N] [--gpus-per-worker G]]``:
start the one HTTP server (``tts_app.server``: the OpenAI-compatible API and ``/metrics``), load the model once, build
the runtime (engine + reference preparer), the job manager and the UI, and mount the UI on that server, so the web
page and the API share one engine (their requests batch together). This module is the composition root (vLLM's
``entrypoints/``): it alone starts the server, the model, the jobs and the warm-up; ``tts_app.ui`` builds the page
(``tts_app.ui.mount.compose_ui``) and nothing else.

Order: the server listens first (API clients get 503 while the model loads, browsers a page that reloads itself),
then the model loads, then the gradio app is built and mounted at ``/`` (``gradio.mount_gradio_app``; its log-in is
``--auth``). The address comes from ``--host``/``--port``, else gradio's ``GRADIO_SERVER_NAME``/``GRADIO_SERVER_PORT``
(Hugging Face Spaces sets them), else 127.0.0.1 and 7860 or the next free port. Flags in ``$TTS_APP_ARGS`` come
before those of the command line (a Space's way to pass flags).

With ``--ray`` (the flags ``batch`` takes, ``tts_app.cli.args.add_cluster_args``) the Batch tab's jobs run on Ray
workers that each load the model (``tts_app.jobs.cluster``), started after the local model; the single-synthesis tab
and the API keep this process's engine. A cluster that cannot be used stops the start with exit status 2.

The model and engine flags are the ones ``synth`` and ``batch`` take (``tts_app.cli.args.add_engine_args``); a bad
value is a one-line usage error with exit status 2. If the model cannot be loaded (not cached and the hub
unreachable, say), the app still starts and the page says how to point ``--model`` at a local folder.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from tts_app.cli.args import (DEFAULT_PORT, CliParser, EngineArgs, add_cluster_args, add_engine_args, add_lang_arg,
                              add_server_args,
                              add_voice_args, check_output_dir, cluster_config_from,
                              engine_args_from, file_size, parse_cli, server_address, server_config_from, usage_error)
from tts_app.config import ClusterConfig, ReferenceConfig, UploadConfig, check_device_available
from tts_app.errors import InputError, TTSAppError

log = logging.getLogger("tts_app")
PROG = "python app.py"
#: Ports tried after 7860 when no port is given (gradio's own range: 7860-7959).
PORT_SEARCH = 100


def build_parser() -> argparse.ArgumentParser:
    p = CliParser(prog=PROG, description="tts_app web UI and OpenAI-compatible speech API")
    add_engine_args(p)
    add_server_args(p)
    add_cluster_args(p)
    g = p.add_argument_group("web page")
    add_lang_arg(g, help="interface language: zh or en (default: each browser's)")
    g.add_argument("--output-dir", default=None,
                   help="where generated files, jobs and saved voices are kept (default: $XDG_DATA_HOME/tts_app, "
                        "else ~/.local/share/tts_app); jobs there survive a restart")
    defaults = UploadConfig()
    g.add_argument("--max-upload-size", type=file_size, default=None, metavar="SIZE",
                   help=f"largest reference audio or job file a browser may upload, e.g. 100MB (default "
                        f"{defaults.max_upload_bytes // 1000**2} MB)")
    g.add_argument("--max-zip-size", type=file_size, default=None, metavar="SIZE",
                   help=f"largest ZIP of reference audio for a job, e.g. 1GB (default "
                        f"{defaults.max_zip_upload_bytes // 1000**3} GB)")
    from tts_app.history import DEFAULT_HISTORY_SIZE, MAX_HISTORY_SIZE

    g.add_argument("--history-size", type=int, default=DEFAULT_HISTORY_SIZE, metavar="N",
                   help=f"past generations listed per browser in the Single tab, kept in OUTPUT_DIR/single/<browser>/"
                        f"_history (default {DEFAULT_HISTORY_SIZE}, at most {MAX_HISTORY_SIZE}; 0 = off)")
    add_voice_args(p)
    return p


def upload_config_from(args: argparse.Namespace) -> UploadConfig:
    """``UploadConfig`` with the flags that were given (None = not given, the dataclass default applies)."""
    given = {"max_upload_bytes": args.max_upload_size, "max_zip_upload_bytes": args.max_zip_size}
    return UploadConfig(**{k: v for k, v in given.items() if v is not None})


def start_pool(engine_args: EngineArgs, cluster: ClusterConfig, reference_config: ReferenceConfig):
    """The Ray workers of ``app.py --ray`` (each loads the model; printing progress): the Batch tab's jobs run on
    them, the Memory tab lists them.

    Raises:
        ClusterError: Ray missing, the cluster unreachable or too small, a worker could not load the model.
    """
    from tts_app.jobs.cluster import WorkerPool

    return WorkerPool.start(engine_args, reference_config, cluster, on_status=lambda line: print(line, flush=True))


def build_context(args: argparse.Namespace, engine_args: EngineArgs, api_keys: tuple[str, ...] = ()):
    """The app state, without a model yet (``load_model`` fills it in); ``api_keys``: the HTTP API's keys (a
    client sending one owns its jobs by it)."""
    from tts_app.ui.context import AppContext, AppSettings
    from tts_app.warmup import warm_up_in_background

    ctx = AppContext(AppSettings(
        model_config=engine_args.model, engine_config=engine_args.engine, lang=args.lang,
        output_root=Path(args.output_dir) if args.output_dir is not None else None,
        voices_dir=Path(args.voices_dir) if args.voices_dir is not None else None,
        asr_model=args.asr_model, upload_config=upload_config_from(args), api_keys=tuple(api_keys),
        history_size=args.history_size))
    # The front end's dictionaries, the effects' and encoders' imports, loaded while the model loads: the first
    # keystroke's preview and the first request do not wait for them (the start-up log says how long it took).
    warm_up_in_background(log)
    return ctx


def load_model(ctx, engine_args: EngineArgs) -> None:
    """Load the model (printing progress) into ``ctx.runtime``; on failure keep the error for the page and API."""
    from tts_app.runtime import Runtime

    try:
        ctx.runtime = Runtime.load(engine_args.model, engine_args.engine, ctx.reference_config,
                                   on_status=lambda line: print(line, flush=True))
    except TTSAppError as exc:
        ctx.load_error = str(exc)
        print(f"error: {exc}", file=sys.stderr, flush=True)
    ctx.start_jobs()  # after the model: jobs a stopped server left running come back "interrupted"
    ctx.memory_sampler()  # the gauge's history from now on, whether or not a page shows it (one thread per app)


def bind_socket(host: str, port: int | None) -> socket.socket:
    """A listening TCP socket on ``host``: ``port``, or (None) the first free one of 7860-7959, as gradio does.

    Raises:
        OSError: the port (or every port of the range) is taken, or the address is not this machine's.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    candidates = [port] if port is not None else list(range(DEFAULT_PORT, DEFAULT_PORT + PORT_SEARCH))
    last_error: OSError | None = None
    for candidate in candidates:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, candidate))
        except OSError as exc:
            sock.close()
            last_error = exc
            continue
        sock.listen(2048)
        sock.set_inheritable(True)
        return sock
    assert last_error is not None
    raise last_error


class Server:
    """uvicorn serving ``app`` on ``sock`` in a background thread with its own event loop.

    Args:
        forwarded_allow_ips: proxies trusted to name the client in ``X-Forwarded-For``
            (``ServerConfig.forwarded_allow_ips``); empty: uvicorn ignores the header (its default trusts
            127.0.0.1, so any local process could pick its own address and dodge the per-client rate limit).
    """

    def __init__(self, app, sock: socket.socket, forwarded_allow_ips: tuple[str, ...] = ()):
        import asyncio

        import uvicorn

        self.app = app
        self.sock = sock
        self.loop = asyncio.new_event_loop()
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5,
                                                    lifespan="on", proxy_headers=bool(forwarded_allow_ips),
                                                    forwarded_allow_ips=list(forwarded_allow_ips) or None))
        self.thread = threading.Thread(target=self._run, name="http-server", daemon=True)

    def _run(self) -> None:
        import asyncio

        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self.server.serve(sockets=[self.sock]))

    def start(self, timeout_s: float = 30.0) -> None:
        """Start serving and wait until uvicorn accepts connections.

        Raises:
            RuntimeError: it did not start (its log says why).
        """
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the web server did not start (see the messages above)")
            time.sleep(0.02)

    def wait(self) -> None:
        """Block until the server stops (Ctrl-C and SIGTERM reach the caller's thread)."""
        while self.thread.is_alive():
            self.thread.join(timeout=0.5)

    def stop(self) -> None:
        self.server.should_exit = True
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout=15)


def mount_ui(ctx, server_config, server: Server, ui) -> None:
    """Build the web page's gradio app for the loaded ``ctx`` (``tts_app.ui.mount.compose_ui``) and attach it at
    ``/`` of the running server."""
    from tts_app.server.app import attach_ui
    from tts_app.ui.mount import compose_ui

    attach_ui(server.loop, ui, compose_ui(ctx, server_config, server.app.state.access_policy))


#: Extra command-line flags read from the environment, before the real ones (a Hugging Face Space runs
#: ``python app.py`` with no arguments; its variables can hold e.g. ``--model nari-labs/Dia-1.6B-0626``).
ARGS_ENV = "TTS_APP_ARGS"


def main(argv: list[str]) -> int:
    import shlex

    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    try:
        env_args = shlex.split(os.environ.get(ARGS_ENV, ""))
    except ValueError as exc:
        print(f"{PROG}: error: {ARGS_ENV}: {exc}", file=sys.stderr)
        return 2
    args = parse_cli(build_parser(), [*env_args, *argv])
    if isinstance(args, int):
        return args
    try:
        engine_args = engine_args_from(args)
        cluster = cluster_config_from(args)
        server_config = server_config_from(args)
        host, port = server_address(args)
        check_device_available(engine_args.model)
        if args.voices_dir is not None:
            check_output_dir(args.voices_dir, "--voices-dir")
        from tts_app.history import check_history_size

        check_history_size(args.history_size)
    except InputError as exc:
        return usage_error(PROG, exc)
    if cluster is not None:  # before the model loads: Ray missing is a set-up error, said at once
        from tts_app.jobs.cluster import require_ray

        try:
            require_ray()
        except TTSAppError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        sock = bind_socket(host, port)
    except OSError as exc:
        where = f"{host}:{port}" if port is not None else f"{host} (ports {DEFAULT_PORT}-{DEFAULT_PORT + PORT_SEARCH - 1})"
        print(f"{PROG}: error: cannot listen on {where}: {exc.strerror or exc}; choose another --host/--port",
              file=sys.stderr)
        return 2
    from tts_app.server.app import build_app
    from tts_app.ui.mount import upload_folder

    ctx = build_context(args, engine_args, server_config.api_keys)
    # the page's upload folder: file inputs and the disk quota look there
    app, ui = build_app(ctx, server_config, upload_folder=upload_folder(), uploads=ctx.upload_config)
    server = Server(app, sock, server_config.forwarded_allow_ips)
    # SIGTERM (e.g. from a service manager) ends like Ctrl-C: jobs stop "interrupted", the engine stops.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.start()
        bound_host, bound_port = sock.getsockname()[:2]
        url_host = "127.0.0.1" if bound_host in ("0.0.0.0", "::") else bound_host
        url = f"http://{url_host}:{bound_port}"
        print(f"Serving on {url} (web page /, OpenAI-compatible API {url}/v1, metrics {url}/metrics); "
              "loading the model ...", flush=True)
        if not server_config.api_keys and host not in ("127.0.0.1", "localhost", "::1"):
            print("warning: the HTTP API is open to anyone who can reach this address; give --api-key or "
                  "TTS_APP_API_KEY", file=sys.stderr, flush=True)
        load_model(ctx, engine_args)
        if cluster is not None and ctx.runtime is not None:
            try:
                ctx.pool = start_pool(engine_args, cluster, ctx.reference_config)
            except TTSAppError as exc:
                print(f"error: {exc}", file=sys.stderr, flush=True)
                return 2
            ctx.start_jobs()  # the job manager again, now running its jobs on the workers
        print(f"Generated files and jobs go to {ctx.output_root}", flush=True)
        print(f"Saved voices go to {ctx.voices.root}", flush=True)
        from tts_app.ui.audio import media_programs_line

        print(media_programs_line(), flush=True)  # the page needs no ffmpeg program: say what there is
        mount_ui(ctx, server_config, server, ui)
        print(f"Running on local URL:  {url}/", flush=True)
        if args.share:
            from tts_app.ui.mount import share_tunnel

            share_tunnel(url_host, bound_port)
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        ctx.close()
        if ctx.pool is not None:
            ctx.pool.close()  # after the jobs stopped: the workers' engines, then the actors
    return 0
