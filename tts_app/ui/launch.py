"""``python app.py [--model ID_OR_DIR] [--device] [--dtype] [--host] [--port] [--share] [--memory-budget SIZE]
[--max-batch-size N] [--lang zh|en]``: load the model once, build the engine and the UI, launch.

If the model cannot be loaded (not cached and the hub unreachable, say), the app still starts and the page says how
to point ``--model`` at a local folder.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time

from tts_app.config import DEFAULT_MODEL_ID, EngineConfig, ModelConfig
from tts_app.errors import TTSAppError

log = logging.getLogger("tts_app")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python app.py", description="tts_app web UI")
    p.add_argument("--model", default=DEFAULT_MODEL_ID,
                   help="hub id or local checkpoint folder (default %(default)s); "
                        "`python -m tts_app make-tiny-model` writes a tiny offline one")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"])
    p.add_argument("--host", default="127.0.0.1", help="use 0.0.0.0 to serve the local network")
    p.add_argument("--port", type=int, default=None, help="default: gradio's (7860 or the next free one)")
    p.add_argument("--share", action="store_true", help="create a public gradio.live link")
    p.add_argument("--memory-budget", default=None,
                   help="memory for KV cache + activations, e.g. 6GiB (default: derived from free GPU memory)")
    p.add_argument("--max-batch-size", type=int, default=None, help="rows per forward call (default 8)")
    p.add_argument("--lang", choices=["zh", "en"], default=None, help="interface language (default: browser's)")
    p.add_argument("--output-dir", default=None, help="where generated files are kept (default: a temp folder)")
    return p.parse_args(argv)


def build_context(args: argparse.Namespace):
    """Load the model (printing progress) and start the engine; on failure keep the error for the page."""
    from pathlib import Path

    from tts_app.ui.context import AppContext

    engine_kwargs = {}
    if args.max_batch_size is not None:
        engine_kwargs["max_batch_size"] = args.max_batch_size
    if args.memory_budget is not None:
        from tts_app.engine import parse_size

        engine_kwargs["memory_budget_bytes"] = parse_size(args.memory_budget)
    model_config = ModelConfig(model_id=args.model, device=args.device, dtype=args.dtype)
    engine_config = EngineConfig(**engine_kwargs)
    ctx = AppContext(model_config=model_config, engine_config=engine_config, lang=args.lang,
                     output_root=Path(args.output_dir) if args.output_dir is not None else None)
    import threading

    from tts_app.frontend import warm_up

    # Load the front end's dictionaries in the background so the first keystroke's preview is fast.
    threading.Thread(target=warm_up, name="frontend-warm-up", daemon=True).start()
    try:
        from tts_app.adapters import load_adapter
        from tts_app.audio.reference import ReferenceCache
        from tts_app.engine import Engine

        started = time.perf_counter()
        print(f"Loading model {args.model} (hub downloads show their own progress bars) ...", flush=True)
        adapter = load_adapter(args.model, device=args.device, dtype=args.dtype)
        print(f"Loaded {adapter.facts.family} in {time.perf_counter() - started:.1f} s", flush=True)
        ctx.engine = Engine(adapter, engine_config).start()
        ctx.reference_cache = ReferenceCache(ctx.reference_config.cache_entries)
    except TTSAppError as exc:
        ctx.load_error = str(exc)
        print(f"error: {exc}", file=sys.stderr, flush=True)
    return ctx


def main(argv: list[str]) -> int:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    ctx = build_context(args)
    from tts_app.ui.layout import CSS, build_demo

    print(f"Generated files go to {ctx.output_root}"
          + (" (temporary; removed when the app stops)" if ctx.owns_output_root else ""), flush=True)
    demo, i18n = build_demo(ctx)
    demo.queue(default_concurrency_limit=8)
    # SIGTERM (e.g. from a service manager) ends like Ctrl-C, so the engine stops and temporary files go.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        demo.launch(server_name=args.host, server_port=args.port, share=args.share, i18n=i18n, css=CSS,
                    allowed_paths=[str(ctx.output_root)])
    finally:
        ctx.close()
    return 0
