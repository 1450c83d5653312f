"""Text front end: polyphone accuracy before/after (pypinyin alone vs our G2P), load time, ms per request.

    OMP_NUM_THREADS=1 python3 bench/frontend_bench.py [--tsv FILE ...] [--misses]

Prints, side by side in one run:

* accuracy on each polyphone set (default: tests/data/polyphones_zh.tsv and tests/data/polyphones_zh_heldout.tsv)
  of **before** = pypinyin 0.55 alone (``lazy_pinyin`` per run of Chinese characters, its phrase dictionary with
  forward maximum matching: the front end's G2P until issue 13) and **after** = ``tts_app.frontend.g2p.read_text``
  (jieba segmentation over the merged lexicon + grammar rules), with the misses of "after" (``--misses``);
* load time in fresh processes: the lexicon built from the packages (no cache), then read from its cache, then the
  whole ``warm_up`` (lexicon + wetext + homophone table);
* ms per request of ``prepare_text`` on 200-character texts (distinct texts, so no cache helps) and of
  ``preview_pronunciation`` per keystroke, as ratios to the issue's 5 ms budget and a 100 ms keystroke budget.

Two set formats are read: ``sentence, char, occurrence, reading`` (tests/data/polyphones_zh.tsv) and
``sentence, char_index, char, pinyin`` (the held-out set, 0-based index).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

DEFAULT_SETS = [ROOT / "tests/data/polyphones_zh.tsv", ROOT / "tests/data/polyphones_zh_heldout.tsv"]


def load_rows(path: Path) -> list[tuple[str, int, str, str]]:
    """``[(sentence, char index, char, TONE3)]`` from either set format."""
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")]
    header = [h.strip() for h in lines[0].replace(",", "\t").split("\t")]
    rows = []
    for line in lines[1:]:
        cols = line.split("\t")
        if header[:2] == ["sentence", "char"]:
            sentence, char, occurrence, reading = cols
            index = [i for i, c in enumerate(sentence) if c == char][int(occurrence) - 1]
        else:
            sentence, index, char, reading = cols[0], int(cols[1]), cols[2], cols[3]
        rows.append((sentence, index, char, reading.strip().lower().replace("ü", "v").replace("u:", "v")))
    return rows


def read_before(sentence: str) -> dict[int, str]:
    """pypinyin alone, as the front end read before issue 13."""
    from pypinyin import Style, lazy_pinyin

    from tts_app.frontend.g2p import HANZI_RUN_RE

    out = {}
    for m in HANZI_RUN_RE.finditer(sentence):
        readings = lazy_pinyin(m.group(), style=Style.TONE3, neutral_tone_with_five=True,
                               errors=lambda x: [""] * len(x))
        out.update((m.start() + i, r) for i, r in enumerate(readings))
    return out


def read_after(sentence: str) -> dict[int, str]:
    from tts_app.frontend.g2p import read_text

    return {r.position: r.reading for r in read_text(sentence)}


def accuracy(rows, read) -> tuple[float, list[str]]:
    misses = []
    for sentence, index, char, expected in rows:
        got = read(sentence).get(index, "")
        if got != expected:
            misses.append(f"    {sentence}  [{index}]{char}: expected {expected}, got {got}")
    return 1 - len(misses) / len(rows), misses


def fresh_process_s(code: str, tmpdir: str | None = None) -> float:
    """Seconds a fresh interpreter takes to run ``code`` (imports included), measured inside it; ``tmpdir``: its
    temporary folder (where the lexicon cache lives), default the usual one."""
    script = f"import time, sys; sys.path.insert(0, {str(ROOT)!r}); t = time.perf_counter()\n{code}\n" \
             "print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                         env={**os.environ, "OMP_NUM_THREADS": "1", **({"TMPDIR": tmpdir} if tmpdir else {})})
    return float(out.stdout.strip().splitlines()[-1])


def request_texts(n: int, chars: int = 200) -> list[str]:
    """``n`` distinct texts of ``chars`` characters with two numbers each (different in every text, so no cache of
    wetext's windows helps), polyphones, punctuation."""
    texts = []
    for i in range(n):
        text = (f"第{i + 3}次，他先去银行找行长，还没还钱就走了。这条河很长，他长得很高。我们一行五人去了北京，"
                f"看了三场比赛，共花了{i * 37 + 11}元。他慢慢地走着，觉得这件事得早点办，为大家服务。")
        filler = "他们说这种花很香，我们都很喜欢，孩子们在院子里玩得很开心，老师慢慢地讲着故事。"
        text = text + filler * (chars // len(filler) + 1)
        texts.append(text[:chars - 1] + "。")
    return texts


def before_ms_per_request(checkout: Path, texts: list[str]) -> float:
    """ms per request of ``prepare_text`` of another checkout (e.g. main before issue 13), in a fresh process."""
    code = ("import json, sys, time\n"
            "from tts_app.frontend import prepare_text, warm_up\n"
            "warm_up()\n"
            "texts = json.loads(sys.stdin.read())\n"
            "t = time.perf_counter()\n"
            "for x in texts: prepare_text(x)\n"
            "print((time.perf_counter() - t) / len(texts) * 1000)")
    import json

    out = subprocess.run([sys.executable, "-c", code], input=json.dumps(texts), capture_output=True, text=True,
                         check=True, cwd=checkout, env={**os.environ, "OMP_NUM_THREADS": "1",
                                                         "PYTHONPATH": str(checkout)})
    return float(out.stdout.strip().splitlines()[-1])


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
    ap.add_argument("--tsv", type=Path, nargs="*", default=[p for p in DEFAULT_SETS if p.exists()])
    ap.add_argument("--misses", action="store_true", help="list the misses of the new G2P")
    ap.add_argument("--before-checkout", type=Path, default=None,
                    help="a checkout of the front end before issue 13 (e.g. a worktree of an older commit): its "
                         "prepare_text is timed on the same requests, in a fresh process")
    args = ap.parse_args()

    import tempfile

    with tempfile.TemporaryDirectory() as empty:  # no cache there: the build (and the first cached load) is timed
        build_s = fresh_process_s("from tts_app.frontend.lexicon import load_lexicon; load_lexicon()", empty)
        cached_s = fresh_process_s("from tts_app.frontend.lexicon import load_lexicon; load_lexicon()", empty)
    warm_s = fresh_process_s("from tts_app.frontend import warm_up; warm_up()")
    print(f"load (fresh process): lexicon built {build_s:.2f} s, from cache {cached_s:.2f} s; whole warm_up "
          f"{warm_s:.2f} s = {warm_s / 3:.2f} of the 3 s start-up budget")

    from tts_app.frontend import prepare_text, warm_up

    warm_up()
    for path in args.tsv:
        rows = load_rows(path)
        before, _ = accuracy(rows, read_before)
        after, misses = accuracy(rows, read_after)
        print(f"{path.name} ({len(rows)} targets): before (pypinyin alone) {before:.1%}, after {after:.1%} "
              f"({after - before:+.1%})")
        if args.misses:
            print("\n".join(misses))

    texts = request_texts(40)
    t0 = time.perf_counter()
    for text in texts:
        prepare_text(text)
    per_request_ms = (time.perf_counter() - t0) / len(texts) * 1000
    print(f"prepare_text, 200-character request: {per_request_ms:.2f} ms = {per_request_ms / 5:.2f} of the 5 ms "
          "budget")
    if args.before_checkout is not None:
        before_ms = before_ms_per_request(args.before_checkout, texts)
        print(f"  before ({args.before_checkout}): {before_ms:.2f} ms; after / before = {per_request_ms / before_ms:.2f}")
    per_key_ms = preview_ms_per_keystroke()
    print(f"preview per keystroke: {per_key_ms:.2f} ms = {per_key_ms / 100:.3f} of a 100 ms keystroke budget")


if __name__ == "__main__":
    main()
