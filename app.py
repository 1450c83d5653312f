"""Entry point of the web app: parse CLI -> config -> build ONE engine -> build UI -> launch.

Nothing happens at import time. The UI issue fills in the full app; see README.md.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from tts_app.zerogpu import on_zero_gpu

    if on_zero_gpu():
        # ZeroGPU: the ``spaces`` package must be imported before torch initialises CUDA (it patches torch so the
        # model "moves" to the GPU at start-up and really runs there inside ``spaces.GPU`` calls).
        import spaces  # noqa: F401

    from tts_app.server.main import main as launch_main

    return launch_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
