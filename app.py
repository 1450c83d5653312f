"""Entry point of the web app: parse CLI -> config -> build ONE engine -> build UI -> launch.

Nothing happens at import time. The UI issue fills in the full app; see README.md.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from tts_app.ui.launch import main as launch_main

    return launch_main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
