"""``python -m tts_app <command> ...``: sub-commands, each owned by the module that implements it.

The table maps a command to ``module:function``; the function takes the remaining argv (list[str]) and returns an
exit status (0 ok, 1 some work failed, 2 usage error). Modules are imported only when their command runs, so
``python -m tts_app frontend ...`` never imports torch.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "synth": ("tts_app.cli.synth", "synthesise one text (segmented and batched) to a WAV file"),
    "batch": ("tts_app.cli.batch", "run a JSONL job: one audio file per line, results.jsonl, resume"),
    "frontend": ("tts_app.frontend.cli", "show normalised text, segments and per-character pinyin"),
    "reference": ("tts_app.audio.cli", "clean a reference audio file and print its quality report"),
    "score": ("tts_app.cli.score", "score a clip: ASR CER/WER against its text, speaker similarity, signal checks"),
    "make-tiny-model": ("tts_app.adapters.tiny", "write a tiny random checkpoint of a real architecture"),
}


def _usage() -> str:
    lines = ["usage: python -m tts_app <command> [options]", "", "commands:"]
    lines += [f"  {name:<16} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run `python -m tts_app <command> --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
