"""Text front end: polyphone accuracy before/after (pypinyin alone vs our G2P), load time, ms per request.

    OMP_NUM_THREADS=1 python3 bench/frontend_bench.py [--tsv FILE ...] [--misses] [--before-checkout DIR ...]
        [--cpp DIR]

Prints, side by side in one run:

* accuracy on each polyphone set (default: tests/data/polyphones_zh.tsv, polyphones_zh_heldout.tsv, _heldout2.tsv, _heldout3.tsv)
  of **before** = pypinyin 0.55 alone (``lazy_pinyin`` per run of Chinese characters, its phrase dictionary with
  forward maximum matching: the front end's G2P until issue 13) and **after** = ``tts_app.frontend.g2p.read_text``
  (jieba segmentation over the merged lexicon + grammar rules), with the misses of "after" (``--misses``);
  (and of each ``--before-checkout``, e.g. main before a change), each as two scores, raw and under the
  citation-tone convention (below);
* with ``--cpp DIR``: the same two scores on the CPP dev set (Park & Lee 2020, "g2pM: A Neural Grapheme-to-Phoneme
  Conversion Package for Mandarin Chinese", 9,893 Wikipedia sentences with one labelled polyphone each; DIR holds its
  ``dev.sent`` and ``dev.lb``, from github.com/kakaobrain/g2pM ``data/``, Apache-2.0; not in this repository), for
  this checkout and each ``--before-checkout``;
* load time in fresh processes: the lexicon built from the packages (no cache), then read from its cache;
* start-up (import + ``warm_up``: lexicon, wetext, OpenCC, homophone table) and ms per request of ``prepare_text`` on
  200-character texts (distinct texts, so no cache helps), of this checkout and each ``--before-checkout``, in fresh
  processes alternating over ``--rounds`` rounds, as wall-clock and CPU time, with the load average (other engineers
  share the CPUs: CPU time is the steadier figure), as ratios to the issue's 5 ms / 3 s budgets;
* ``preview_pronunciation`` per keystroke, as a ratio to a 100 ms keystroke budget.

Two set formats are read: ``sentence, char, occurrence, reading`` (tests/data/polyphones_zh.tsv) and
``sentence, char_index, char, pinyin`` (the held-out sets, 0-based index).

The citation-tone convention. The front end gives citation (dictionary) tones on polyphones, as issue 13 asks:
商量 shāng liáng, 认识 rèn shí (neutral tones only on one-reading characters, 早上 zǎoshang, and 东西 "things"
dōngxi, issue 23: ``tts_app.frontend.lexicon``). A set's author may have written the neutral tone of speech instead (shāngliang, rènshi,
dōngxi). The second score counts such a target as matched: an expected tone 5 on a character that is *not* one of the
always-neutral particles and suffixes (``ALWAYS_NEUTRAL``: 的 地 得 as structural particles, 了 着 过 as aspect
particles, sentence-final 吗 呢 吧 啊 嘛 啦, the suffixes 子 们 么 头; a tone 5 expected on them is the particle's own
dictionary reading, so a full tone there stays a miss) is matched when our syllable is the expected syllable and our
tone is a full tone (1-4) that pypinyin's heteronyms list for that character with that syllable (识: shí, shì; so 认识
rèn shí matches rènshi, but rèn zhì would not). Every other target is scored as in the raw score, which is kept.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

DEFAULT_SETS = [ROOT / "tests/data/polyphones_zh.tsv", ROOT / "tests/data/polyphones_zh_heldout.tsv",
                ROOT / "tests/data/polyphones_zh_heldout2.tsv", ROOT / "tests/data/polyphones_zh_heldout3.tsv"]


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


def load_cpp(folder: Path, split: str = "dev") -> list[tuple[str, int, str, str]]:
    """The CPP set's ``split`` (``{split}.sent``: one sentence a line, the labelled character between two ``\u2581``
    marks; ``{split}.lb``: its TONE3 label, ü as ``u:``) as ``[(sentence, char index, char, TONE3)]``."""
    sentences = (folder / f"{split}.sent").read_text(encoding="utf-8").splitlines()
    labels = (folder / f"{split}.lb").read_text(encoding="utf-8").splitlines()
    rows = []
    for marked, label in zip(sentences, labels, strict=True):
        index = marked.index("\u2581")
        sentence = marked.replace("\u2581", "")
        rows.append((sentence, index, sentence[index], label.strip().lower().replace("u:", "v")))
    return rows


# Characters whose expected tone 5 is the particle's or suffix's own dictionary reading (module docstring).
ALWAYS_NEUTRAL = frozenset("的地得了着过吗呢吧啊嘛啦子们么头")


def citation_match(char: str, expected: str, got: str) -> bool:
    """True when ``got`` counts as ``expected`` under the citation-tone convention (module docstring): equal, or an
    expected neutral tone on a character outside ``ALWAYS_NEUTRAL`` where ``got`` has the same syllable and a full
    tone that pypinyin lists for ``char``."""
    if got == expected:
        return True
    if not expected.endswith("5") or char in ALWAYS_NEUTRAL or got[-1:] not in ("1", "2", "3", "4"):
        return False
    from tts_app.frontend.g2p import char_candidates

    return got[:-1] == expected[:-1] and got in char_candidates(char)


@dataclass(frozen=True)
class Score:
    """Accuracy on one set: ``raw`` (exact TONE3), ``citation`` (the citation-tone convention), ``misses`` (raw,
    one line each)."""

    raw: float
    citation: float
    misses: list[str]

    def __str__(self) -> str:
        return f"{self.raw:.1%} / {self.citation:.1%}"


def score_readings(rows, readings: list[str]) -> Score:
    """Score ``readings`` (ours, one per row of ``rows``, "" when none)."""
    misses, citation = [], 0
    for (sentence, index, char, expected), got in zip(rows, readings, strict=True):
        if got != expected:
            misses.append(f"    {sentence}  [{index}]{char}: expected {expected}, got {got}")
        citation += citation_match(char, expected, got)
    return Score(1 - len(misses) / len(rows), citation / len(rows), misses)


def accuracy(rows, read) -> Score:
    return score_readings(rows, [read(sentence).get(index, "") for sentence, index, _, _ in rows])


_READ_CODE = """
import json, sys
from tts_app.frontend.g2p import read_text
rows = json.loads(sys.stdin.read())
print(json.dumps([{r.position: r.reading for r in read_text(s)}.get(i, "") for s, i, _, _ in rows]))
"""


def score_checkout(checkout: Path, rows) -> Score:
    """Accuracy of the default G2P of another checkout (its ``read_text``, imported from there alone) on ``rows``;
    scored here, so both scores use this checkout's definition."""
    import json

    out = subprocess.run([sys.executable, "-c", _READ_CODE], input=json.dumps(rows), capture_output=True,
                         text=True, check=True, cwd=checkout,
                         env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(checkout)})
    return score_readings(rows, json.loads(out.stdout.strip().splitlines()[-1]))


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


_TIMING_CODE = """
import json, sys, time
t, c = time.perf_counter(), time.process_time()
from tts_app.frontend import prepare_text, warm_up
warm_up()
warm = (time.perf_counter() - t, time.process_time() - c)
texts = json.loads(sys.stdin.read())
prepare_text(texts[0])
t, c = time.perf_counter(), time.process_time()
for x in texts[1:]:
    prepare_text(x)
n = len(texts) - 1
print(json.dumps({"warm_up_wall_s": warm[0], "warm_up_cpu_s": warm[1],
                  "request_wall_ms": (time.perf_counter() - t) / n * 1000,
                  "request_cpu_ms": (time.process_time() - c) / n * 1000}))
"""


def time_checkout(checkout: Path, texts: list[str]) -> dict[str, float]:
    """Start-up (import + ``warm_up``, lexicon cache present) and ms per request of ``prepare_text`` of the front
    end in ``checkout``, in a fresh process: wall-clock and CPU time (the process's own, which other engineers'
    load inflates far less than the wall clock)."""
    import json

    out = subprocess.run([sys.executable, "-c", _TIMING_CODE], input=json.dumps(texts), capture_output=True,
                         text=True, check=True, cwd=checkout,
                         env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(checkout)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def compare_checkouts(checkouts: dict[str, Path], texts: list[str], rounds: int) -> dict[str, dict[str, float]]:
    """``time_checkout`` of every checkout, alternating in ``rounds`` rounds (so a change of load hits all alike),
    median per measure."""
    import statistics

    runs: dict[str, list[dict[str, float]]] = {name: [] for name in checkouts}
    for _ in range(rounds):
        for name, path in checkouts.items():
            runs[name].append(time_checkout(path, texts))
    return {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in runs.items()}


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
    ap.add_argument("--before-checkout", type=Path, nargs="*", default=[],
                    help="checkouts of an older front end (e.g. `git worktree add /tmp/old main`): their warm_up and "
                         "prepare_text are timed on the same requests, alternating with this checkout's")
    ap.add_argument("--rounds", type=int, default=3, help="alternating fresh processes per checkout (median)")
    ap.add_argument("--cpp", type=Path, default=None,
                    help="folder with the CPP set's dev.sent and dev.lb (github.com/kakaobrain/g2pM data/): score it too")
    args = ap.parse_args()

    import tempfile

    with tempfile.TemporaryDirectory() as empty:  # no cache there: the build (and the first cached load) is timed
        build_s = fresh_process_s("from tts_app.frontend.lexicon import load_lexicon; load_lexicon()", empty)
        cached_s = fresh_process_s("from tts_app.frontend.lexicon import load_lexicon; load_lexicon()", empty)
    print(f"load (fresh process, wall clock): lexicon built {build_s:.2f} s, from its cache {cached_s:.2f} s")

    from tts_app.frontend import warm_up

    warm_up()
    checkouts = {"this checkout": ROOT, **{str(p): p for p in args.before_checkout}}
    sets = [(path.name, load_rows(path)) for path in args.tsv]
    if args.cpp is not None:
        sets.append(("CPP dev", load_cpp(args.cpp)))
    columns = ["pypinyin alone", *(str(p)[-24:] for p in args.before_checkout), "this checkout"]
    print("polyphone accuracy, raw / citation-tone convention (module docstring):")
    print(f"{'set':<28} {'targets':>7}" + "".join(f" {c:>24}" for c in columns))
    all_misses = []
    for name, rows in sets:
        before = accuracy(rows, read_before)
        others = [score_checkout(p, rows) for p in args.before_checkout]
        after = accuracy(rows, read_after)
        print(f"{name:<28} {len(rows):>7}" + "".join(f" {str(x):>24}" for x in (before, *others, after)))
        all_misses.append((name, after.misses))
    if args.misses:
        for name, misses in all_misses:
            print(f"misses of this checkout on {name} (raw):")
            print("\n".join(misses))

    texts = request_texts(41)
    print(f"load average before timing: {' '.join(f'{x:.1f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    timed = compare_checkouts(checkouts, texts, args.rounds)
    print(f"load average after timing:  {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    ours = timed["this checkout"]
    print(f"{'front end':<40} {'warm_up wall s':>14} {'cpu s':>6} {'request wall ms':>16} {'cpu ms':>7}   "
          f"(median of {args.rounds} alternating fresh processes, 200-character requests)")
    for name, t in timed.items():
        print(f"{name[-40:]:<40} {t['warm_up_wall_s']:>14.2f} {t['warm_up_cpu_s']:>6.2f} {t['request_wall_ms']:>16.2f} "
              f"{t['request_cpu_ms']:>7.2f}")
    print(f"this checkout: request {ours['request_cpu_ms'] / 5:.2f} (cpu) / {ours['request_wall_ms'] / 5:.2f} (wall) of "
          f"the 5 ms budget; warm_up {ours['warm_up_cpu_s'] / 3:.2f} (cpu) / {ours['warm_up_wall_s'] / 3:.2f} (wall) "
          "of the 3 s budget")
    for name, t in timed.items():
        if name != "this checkout":
            print(f"  this / {name}: request cpu {ours['request_cpu_ms'] / t['request_cpu_ms']:.2f}, wall "
                  f"{ours['request_wall_ms'] / t['request_wall_ms']:.2f}; warm_up cpu "
                  f"{ours['warm_up_cpu_s'] / t['warm_up_cpu_s']:.2f}, wall {ours['warm_up_wall_s'] / t['warm_up_wall_s']:.2f}")
    per_key_ms = preview_ms_per_keystroke()
    print(f"preview per keystroke: {per_key_ms:.2f} ms = {per_key_ms / 100:.3f} of a 100 ms keystroke budget")


if __name__ == "__main__":
    main()
