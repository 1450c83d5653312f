"""Command-line argument checks shared by ``synth`` and ``batch``: argparse ``type=`` parsers and output-path
checks that run before any model is loaded (so a typo costs a second, not a model load plus a synthesis).

Everything here is pure Python (no torch); errors are ``argparse.ArgumentTypeError`` (argparse turns them into
``usage: ... error: argument --flag: <message>`` and exit status 2) or ``InputError`` naming the flag and the fix.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from tts_app.errors import InputError

# "-5MB", "-0.5GiB", "-3": values that argparse would otherwise take for an unknown option (it only accepts plain
# negative numbers such as "-3" as values, and only when no option looks like one).
_NEGATIVE_VALUE = re.compile(r"^-\d")


def positive_int(text: str) -> int:
    """argparse ``type=``: a whole number >= 1.

    Raises:
        argparse.ArgumentTypeError: not a whole number, or < 1.
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def memory_budget(text: str) -> int:
    """argparse ``type=``: a memory budget such as ``2GiB`` or ``512MB`` -> bytes (> 0). Units: see
    ``tts_app.engine.memory.parse_size``.

    Raises:
        argparse.ArgumentTypeError: negative, zero, or not a size.
    """
    from tts_app.engine.memory import parse_size  # pure Python; torch stays unimported

    if str(text).strip().startswith("-"):
        raise argparse.ArgumentTypeError(f"memory budget must be positive, got {text!r}; write e.g. 2GiB or 512MB")
    try:
        value = parse_size(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"memory budget must be positive, got {text!r}; write e.g. 2GiB or 512MB")
    return value


def join_negative_values(argv: list[str], flags: tuple[str, ...]) -> list[str]:
    """``["--memory-budget", "-5MB"]`` -> ``["--memory-budget=-5MB"]`` for the given flags, so the flag's ``type=``
    reports what is wrong with the value instead of argparse saying "expected one argument"."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in flags and i + 1 < len(argv) and _NEGATIVE_VALUE.match(argv[i + 1]):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def _nearest_existing(path: Path) -> Path:
    """``path`` itself or its closest ancestor that exists (``path`` is absolute)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(path.anchor)


def _check_creatable_in(folder: Path, flag: str, value: str) -> None:
    """``folder`` (the folder ``value`` goes in) exists and is writable, or can be created."""
    existing = _nearest_existing(folder.absolute())
    if not existing.is_dir():
        raise InputError(f"{flag} {value!r}: {str(existing)!r} is a file, not a folder, so nothing can be written "
                         "below it; choose another path")
    if not os.access(existing, os.W_OK | os.X_OK):
        action = "write into" if existing == folder.absolute() else "create folders in"
        raise InputError(f"{flag} {value!r}: no permission to {action} {str(existing)!r}; choose a writable "
                         "folder")


def check_output_file(value: str, flag: str, example_name: str = "out.wav") -> None:
    """Fail fast when an output file cannot be written: it is a folder, or its folder is not writable / cannot be
    created (a file stands in the way, no permission).

    Raises:
        InputError: naming the flag, the path and the fix.
    """
    path = Path(value)
    if path.is_dir():
        raise InputError(f"{flag} {value!r} is a folder; give a file name, e.g. {str(path / example_name)!r}")
    _check_creatable_in(path.parent, flag, value)


def check_output_dir(value: str, flag: str) -> None:
    """Fail fast when an output folder cannot be used: it is a file, or it is not writable / cannot be created.

    Raises:
        InputError: naming the flag, the path and the fix.
    """
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise InputError(f"{flag} {value!r} is a file, not a folder; give a folder (it is created if missing)")
    _check_creatable_in(path, flag, value)
