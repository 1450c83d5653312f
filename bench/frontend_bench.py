"""Text front end: default G2P accuracy on the polyphone test set, and how fast preview/prepare are.

    OMP_NUM_THREADS=1 python3 bench/frontend_bench.py [--tsv tests/data/polyphones_zh.tsv]

Prints: accuracy of the default G2P (pypinyin + phrase dictionary, as used by ``prepare_text``) on the target
polyphone of each sentence, with every miss; the same for g2pM (a small numpy BiLSTM polyphone model that ships its
weights in its PyPI wheel) when it is installed, for comparison; then the time of ``preview_pronunciation`` per
keystroke while "typing" a mixed text, and of ``prepare_text`` on a long text, as ratios to a 100 ms keystroke budget
and to the text's length.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing


def load_rows(path: Path) -> list[tuple[str, str, int, str]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    rows = [line.split("\t") for line in lines if line and not line.startswith("#")]
    return [(s, c, int(n), r) for s, c, n, r in rows[1:]]


def target_index(sentence: str, char: str, occurrence: int) -> int:
    return [i for i, c in enumerate(sentence) if c == char][occurrence - 1]


def score(name: str, rows, read) -> float:
    """``read(sentence) -> {index: TONE3}``; prints misses and returns accuracy."""
    misses = []
    t0 = time.perf_counter()
    for sentence, char, occurrence, expected in rows:
        idx = target_index(sentence, char, occurrence)
        got = read(sentence).get(idx, "")
        if got != expected:
            misses.append(f"    {sentence}  {char}#{occurrence}: expected {expected}, got {got}")
    elapsed = time.perf_counter() - t0
    accuracy = 1 - len(misses) / len(rows)
    print(f"{name}: {len(rows) - len(misses)}/{len(rows)} correct = {accuracy:.1%}  "
          f"({elapsed / len(rows) * 1000:.2f} ms per sentence)")
    print("\n".join(misses))
    return accuracy


TYPED = "他先去银行(yin2 hang2)找行长，2024年3月5日下午3:30回家。Then he paid $5 for coffee.[pause:500ms]我还没还钱。"


def preview_ms_per_keystroke(typed: str = TYPED) -> float:
    """Mean ms of ``preview_pronunciation`` per keystroke while "typing" ``typed`` one character at a time."""
    from tts_app.frontend import preview_pronunciation

    t0 = time.perf_counter()
    for end in range(1, len(typed) + 1):
        preview_pronunciation(typed[:end])
    return (time.perf_counter() - t0) / len(typed) * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tsv", type=Path, default=ROOT / "tests/data/polyphones_zh.tsv")
    args = ap.parse_args()
    rows = load_rows(args.tsv)

    from tts_app.frontend import prepare_text

    t0 = time.perf_counter()
    prepare_text("预热：加载词典，共3个。Warm up 2 normalisers.(zhong4)重")
    print(f"first call (loads pypinyin's and wetext's zh+en dictionaries, homophone table): "
          f"{time.perf_counter() - t0:.2f} s")

    def read_default(sentence: str) -> dict[int, str]:
        return {r.position: r.pinyin for r in prepare_text(sentence).readings}

    base = score("default G2P (pypinyin, phrase dictionary)", rows, read_default)

    try:
        from g2pM import G2pM
    except ImportError:
        print("g2pM not installed (pip install g2pM==0.1.2.5 to compare)")
    else:
        model = G2pM()

        def read_g2pm(sentence: str) -> dict[int, str]:
            out = model(sentence, tone=True, char_split=True)
            return {i: p.lower().replace("u:", "v") for i, p in enumerate(out)}

        other = score("g2pM 0.1.2.5", rows, read_g2pm)
        print(f"g2pM / default accuracy ratio: {other / base:.2f}")

    per_key_ms = preview_ms_per_keystroke()
    print(f"preview per keystroke: {per_key_ms:.2f} ms = {per_key_ms / 100:.3f} of a 100 ms keystroke budget")

    # Distinct numbers in every sentence so the per-sentence caches do not help.
    long_text = "".join(f"第{i}天他先去银行找行长，{i}点{i % 60}分回家。Day {i}: he paid ${i}.{i % 100} for coffee. "
                        for i in range(60))
    t0 = time.perf_counter()
    prepared = prepare_text(long_text)
    elapsed = time.perf_counter() - t0
    print(f"prepare_text on {len(long_text)} chars: {elapsed * 1000:.0f} ms "
          f"({elapsed / len(long_text) * 1e6:.0f} us per char, {len(prepared.segments)} segments)")


if __name__ == "__main__":
    main()
