"""``python app.py [model and engine flags] [--host] [--port] [--share] [--lang zh|en] [--output-dir DIR]
[--max-upload-size SIZE] [--max-zip-size SIZE]``: load the model once, build the runtime (engine + reference
preparer), the job manager and the UI, launch.

The model and engine flags are the ones ``synth`` and ``batch`` take (``tts_app.cli.args.add_engine_args``); a bad
value is a one-line usage error with exit status 2. If the model cannot be loaded (not cached and the hub
unreachable, say), the app still starts and the page says how to point ``--model`` at a local folder.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from tts_app.cli.args import (CliParser, EngineArgs, add_engine_args, add_voice_args, check_device_available,
                              check_output_dir, engine_args_from, file_size, parse_cli, positive_int, usage_error)
from tts_app.config import UploadConfig
from tts_app.errors import InputError, TTSAppError

log = logging.getLogger("tts_app")
PROG = "python app.py"


def build_parser() -> argparse.ArgumentParser:
    p = CliParser(prog=PROG, description="tts_app web UI")
    add_engine_args(p)
    g = p.add_argument_group("web server")
    g.add_argument("--host", default="127.0.0.1", help="use 0.0.0.0 to serve the local network")
    g.add_argument("--port", type=positive_int, default=None, help="default: gradio's (7860 or the next free one)")
    g.add_argument("--share", action="store_true", help="create a public gradio.live link")
    g.add_argument("--lang", choices=["zh", "en"], default=None, help="interface language (default: browser's)")
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
    add_voice_args(p)
    return p


def upload_config_from(args: argparse.Namespace) -> UploadConfig:
    """``UploadConfig`` with the flags that were given (None = not given, the dataclass default applies)."""
    given = {"max_upload_bytes": args.max_upload_size, "max_zip_upload_bytes": args.max_zip_size}
    return UploadConfig(**{k: v for k, v in given.items() if v is not None})


def build_context(args: argparse.Namespace, engine_args: EngineArgs):
    """Load the model (printing progress) and start the runtime; on failure keep the error for the page."""
    import threading
    from pathlib import Path

    from tts_app.frontend import warm_up
    from tts_app.runtime import Runtime
    from tts_app.ui.context import AppContext

    ctx = AppContext(model_config=engine_args.model, engine_config=engine_args.engine, lang=args.lang,
                     output_root=Path(args.output_dir) if args.output_dir is not None else None,
                     voices_dir=Path(args.voices_dir) if args.voices_dir is not None else None,
                     asr_model=args.asr_model, upload_config=upload_config_from(args))
    # Load the front end's dictionaries in the background so the first keystroke's preview is fast.
    threading.Thread(target=warm_up, name="frontend-warm-up", daemon=True).start()
    try:
        ctx.runtime = Runtime.load(engine_args.model, engine_args.engine, ctx.reference_config,
                                   on_status=lambda line: print(line, flush=True))
    except TTSAppError as exc:
        ctx.load_error = str(exc)
        print(f"error: {exc}", file=sys.stderr, flush=True)
    ctx.start_jobs()
    return ctx


def main(argv: list[str]) -> int:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    args = parse_cli(build_parser(), argv)
    if isinstance(args, int):
        return args
    try:
        engine_args = engine_args_from(args)
        check_device_available(engine_args.model)
        if args.voices_dir is not None:
            check_output_dir(args.voices_dir, "--voices-dir")
    except InputError as exc:
        return usage_error(PROG, exc)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ctx = build_context(args, engine_args)
    from tts_app.ui.layout import CSS, build_demo, page_js

    print(f"Generated files and jobs go to {ctx.output_root}", flush=True)
    print(f"Saved voices go to {ctx.voices.root}", flush=True)
    demo, i18n = build_demo(ctx)
    demo.queue(default_concurrency_limit=8)
    # SIGTERM (e.g. from a service manager) ends like Ctrl-C: jobs stop "interrupted", the engine stops.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    limits = ctx.upload_config
    try:
        # max_file_size: gradio refuses bigger uploads while they stream in (HTTP 413), before they fill a disk.
        demo.launch(server_name=args.host, server_port=args.port, share=args.share, i18n=i18n, css=CSS,
                    js=page_js(ctx.lang),
                    allowed_paths=[str(ctx.output_root)],  # voices' files are served as copies from there
                    max_file_size=max(limits.max_upload_bytes, limits.max_zip_upload_bytes))
    finally:
        ctx.close()
    return 0
