"""Engine v2 (issue 26): what one user's long request costs everyone else. Ratios measured side by side in one run,
never thresholds.

    OMP_NUM_THREADS=1 python3 bench/engine_v2_bench.py [--quick]

The model is the model-free fake step adapter (tests/fakes.py: a row's audio is noise that depends only on its text
and seed) paced like speech: ~15 characters per second of audio (``tts_app.speaking_rate.OTHER_CHAR_S``), 0.1 s of
audio per decode step, a fixed pause per step. Everything else is the real engine: scheduler, output processor,
streams, and the real post-processing (``tts_app.audio.effects``: tempo, loudness).

1. post         worst latency (submit -> result) of short interactive requests sent one after another while a ~100 s
                request with ``speed=1.2, loudness_lufs=-16`` finishes, over their worst latency while the same request
                without them finishes; with the output processor (post-processing on its own threads) and with every
                output task run inline on the model worker's thread (the engine before issue 26), side by side.
2. fairness     time to first audio of a short request (``你好。``) submitted while another user's 2,000-character
                request fills the batch, over its time alone; fair turns (round-robin by request, rule e) vs oldest
                segment first (``fair=False``, the engine before issue 26; preemption on in both).
2b. (--tiny)    measure 2 on the tiny random VibeVoice checkpoint on CPU (its stop decision following the text's
                expected length, as bench/continuous_bench.py does).
3. underruns    a streamed ~25 s answer while another user's 2,000-character request runs, the model near real time
                per row: underruns its client hears (real-time playback from the first chunk) and the longest
                silence; fair vs oldest segment first.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (pins threads before torch loads)

common.setup(num_threads=1)

import numpy as np  # noqa: E402

from common import Table, ratio  # noqa: E402
from tests.fakes import FakeStepAdapter, fake_facts  # noqa: E402
from tts_app.config import EngineConfig  # noqa: E402
from tts_app.engine import Engine  # noqa: E402
from tts_app.engine import scheduler as scheduler_module  # noqa: E402
from tts_app import speaking_rate  # noqa: E402
from tts_app.request import Priority, ReferenceAudio, SynthesisParams, SynthesisRequest  # noqa: E402

SAMPLING_RATE = 16000
SAMPLES_PER_CHAR = round(SAMPLING_RATE * speaking_rate.OTHER_CHAR_S)  # ~15 characters per second of audio
FRAME_SAMPLES = SAMPLING_RATE // 10  # 0.1 s of audio per decode step
REF = ReferenceAudio(samples=np.linspace(-0.3, 0.3, SAMPLING_RATE, dtype=np.float32), sampling_rate=SAMPLING_RATE,
                     key="ref")


class InlineOutput:
    """Every output task run at once in the thread that posts it (the model worker): the engine before issue 26."""

    def post(self, request_id, task):
        task()

    def join(self, timeout=None):
        return True


def text_of(num_chars: int, seed: int = 0) -> str:
    """About ``num_chars`` characters of English sentences (``seed`` varies the words)."""
    sentence = f"The quick brown fox number {seed} jumps over the lazy dog near the river bank. "
    return (sentence * (num_chars // len(sentence) + 1))[:num_chars].rsplit(" ", 1)[0] + "."


def make_engine(step_delay_s: float, cap: int, *, fair: bool = True, inline_output: bool = False) -> Engine:
    adapter = FakeStepAdapter(fake_facts(max_segment_chars=120, default_max_new_tokens=4000),
                              samples_per_char=SAMPLES_PER_CHAR, frame_samples=FRAME_SAMPLES,
                              step_delay_s=step_delay_s)
    engine = Engine(adapter, EngineConfig(max_batch_size=cap, wait_window_ms=0), fair=fair)
    if inline_output:
        engine._output = InlineOutput()
    return engine.start()


def request(text: str, seed: int = 0, priority=Priority.INTERACTIVE, **params) -> SynthesisRequest:
    return SynthesisRequest(text=text, reference_audio=REF, priority=priority,
                            params=SynthesisParams(seed=seed, **params))


def latency_s(engine: Engine, text: str, seed: int) -> float:
    t0 = time.perf_counter()
    assert engine.submit(request(text, seed)).result(timeout=600).ok
    return time.perf_counter() - t0


def first_audio_s(engine: Engine, text: str, seed: int) -> tuple[float, float]:
    """(submit -> first streamed chunk, submit -> result) in seconds."""
    heard = threading.Event()
    t0 = time.perf_counter()
    marks = {}

    def on_audio(chunk):
        if not heard.is_set():
            marks["first"] = time.perf_counter() - t0
            heard.set()

    handle = engine.submit(request(text, seed), on_audio=on_audio)
    assert handle.result(timeout=600).ok
    return marks["first"], time.perf_counter() - t0


def warm_up() -> None:
    """One-off costs (imports, the Chinese front end's dictionaries, the effects' filters) paid before any timing:
    they would land on whichever request comes first."""
    engine = make_engine(0.0, 4)
    assert engine.submit(request("你好。 Hello there.", 0, speed=1.2, loudness_lufs=-16)).result(timeout=600).ok
    first_audio_s(engine, "你好。", 1)
    engine.shutdown()


def measure_post(quick: bool) -> Table:
    table = Table("post", "1. short request latency while a ~100 s request finishes, with vs without tempo + loudness",
                  ["output", "plain_worst_ms", "effects_worst_ms", "ratio", "median_ratio", "long_post_s", "runs"],
                  ["plain_worst_ms", "effects_worst_ms", "ratio", "median_ratio"])
    long_text = text_of(1500)  # ~100 s of audio at ~15 characters per second
    import tts_app.audio.effects as effects

    real = effects.apply_request_effects
    post_s = {}

    def timed(audio, spans, sampling_rate, **kwargs):
        t0 = time.perf_counter()
        out = real(audio, spans, sampling_rate, **kwargs)
        if kwargs.get("speed") not in (None, 1.0):
            post_s["long"] = time.perf_counter() - t0
        return out

    def worst_while(engine, long_params, num_short: int | None = None) -> tuple[float, int]:
        """Worst latency of short requests sent one after another from the long request's submit until it is done
        and three more (or ``num_short`` of them: the same number of samples for both settings)."""
        long = engine.submit(request(long_text, 1, **long_params))
        latencies, after = [], 0
        while (not long.done() or after < 3) if num_short is None else len(latencies) < num_short:
            latencies.append(latency_s(engine, "Hi there.", 100 + len(latencies)))
            after += 1 if long.done() else 0
        assert long.result().ok
        return max(latencies), len(latencies)

    effects.apply_request_effects = timed
    try:
        for label, inline in (("own threads", False), ("inline (before)", True)):
            engine = make_engine(0.002, 8, inline_output=inline)
            pairs = []  # (worst with effects, worst without) per run, interleaved so load swings hit both alike
            for _ in range(2 if quick else 6):
                worst, n = worst_while(engine, {"speed": 1.2, "loudness_lufs": -16})
                pairs.append((worst, worst_while(engine, {}, n)[0]))
            engine.shutdown()
            worst, plain = max(w for w, _ in pairs), max(p for _, p in pairs)
            table.rows.append({"output": label, "plain_worst_ms": 1000 * plain, "effects_worst_ms": 1000 * worst,
                               "ratio": ratio(worst, plain),
                               "median_ratio": statistics.median(ratio(w, p) for w, p in pairs),
                               "long_post_s": post_s.get("long"), "runs": len(pairs)})
    finally:
        effects.apply_request_effects = real
    table.notes.append("ratio = worst with speed 1.2 + loudness -16 on the long request / worst without, over the "
                       "same number of short requests, over all runs; median_ratio = the median of that ratio per "
                       "run (a shared machine's stalls land in either; issue 26 asks <= 1.5, it measured 45 before); "
                       "long_post_s = the long request's tempo + loudness, last run")
    return table


def measure_fairness(quick: bool) -> Table:
    table = Table("fairness", "2. first audio of a short request behind another user's 2,000-character request",
                  ["order", "alone_first_ms", "behind_long_first_ms", "ratio", "behind_long_done_ms"],
                  ["alone_first_ms", "behind_long_first_ms", "ratio"])
    long_text = text_of(2000)
    for label, fair in (("fair turns", True), ("oldest first (before)", False)):
        engine = make_engine(0.01, 4, fair=fair)
        alone = statistics.median(first_audio_s(engine, "你好。", i)[0] for i in range(3 if quick else 5))
        long = engine.submit(request(long_text, 1))
        while engine.scheduler.num_running < 4:  # its rows fill the batch
            time.sleep(0.005)
        time.sleep(0.5)  # a moment into the long request, as a second user would arrive
        first, done = first_audio_s(engine, "你好。", 50)
        long.cancel()
        engine.shutdown()
        table.rows.append({"order": label, "alone_first_ms": 1000 * alone, "behind_long_first_ms": 1000 * first,
                           "ratio": ratio(first, alone), "behind_long_done_ms": 1000 * done})
    table.notes.append("ratio = first audio behind the long request / alone (issue 26 asks <= 3; 18-35 s vs "
                       "0.4-0.6 s before on the tiny model)")
    return table


def measure_fairness_tiny(quick: bool) -> Table:
    """Measure 2 on the tiny random VibeVoice checkpoint (CPU), its stop decision following the text's expected length
    (bench/continuous_bench.py ``length_driven``), a 3 s real reference, the engine's default batch size."""
    import tempfile

    from continuous_bench import length_driven
    from tts_app.config import EngineConfig as Config

    table = Table("fairness_tiny", "2b. the same on the tiny VibeVoice checkpoint (CPU, default max batch size)",
                  ["order", "alone_first_s", "behind_long_first_s", "ratio", "long_segments"],
                  ["alone_first_s", "behind_long_first_s", "ratio"])
    with tempfile.TemporaryDirectory() as work_dir:
        tiny = common.load_tiny_adapter("vibevoice", Path(work_dir))
        adapter, _ = length_driven(tiny, max_frames=tiny.facts.default_max_new_tokens)
        sr = adapter.facts.sampling_rate
        ref = ReferenceAudio(common.reference_clip("en_female_1.wav", sr, 3.0)[0], sr)

        def tiny_request(text: str, seed: int) -> SynthesisRequest:
            return SynthesisRequest(text=text, reference_audio=ref, params=SynthesisParams(seed=seed))

        def first(engine, text: str, seed: int) -> float:
            t0, marks = time.perf_counter(), {}
            handle = engine.submit(tiny_request(text, seed), on_audio=lambda c: marks.setdefault(
                "first", time.perf_counter() - t0))
            assert handle.result(timeout=600).ok
            return marks["first"]

        for label, fair in (("fair turns", True), ("oldest first (before)", False)):
            engine = Engine(adapter, Config(), fair=fair).start()
            first(engine, "你好。 Warm up.", 0)
            alone = statistics.median(first(engine, "你好。", i) for i in range(2 if quick else 3))
            long = engine.submit(tiny_request(text_of(2000), 1))
            while engine.scheduler.num_running == 0:
                time.sleep(0.005)
            time.sleep(3.0)  # the case: sent 3 s after the other client's request
            behind = first(engine, "你好。", 50)
            segments = engine._requests[long.request_id].num_segments if long.request_id in engine._requests else 0
            long.cancel()
            engine.shutdown()
            table.rows.append({"order": label, "alone_first_s": alone, "behind_long_first_s": behind,
                               "ratio": ratio(behind, alone), "long_segments": segments})
    table.notes.append("issue 26: 18-35 s behind the long request vs 0.4-0.6 s alone before; asks <= 3x")
    return table


def measure_underruns(quick: bool) -> Table:
    table = Table("underruns", "3. a streamed ~25 s answer while another user's 2,000-character request runs",
                  ["order", "step_s", "first_audio_s", "stream_audio_s", "underruns", "max_silence_s",
                   "total_silence_s", "wall_s"],
                  ["stream_audio_s", "underruns", "max_silence_s"])
    answer = " ".join(f"Sentence {i} of the streamed answer goes on a while." for i in range(5 if quick else 9))
    # 0.08 s per 0.1 s of audio: faster than real time per row; 0.12 s: slower (a loaded CPU), where only more rows
    # for the stream keep its client fed
    for (label, fair), step_s in itertools.product((("fair turns", True), ("oldest first (before)", False)),
                                                   (0.08, 0.12)):
        engine = make_engine(step_s, 4, fair=fair)
        other = engine.submit(request(text_of(2000), 10))
        while engine.scheduler.num_running < 4:
            time.sleep(0.005)
        t0, t0_monotonic = time.perf_counter(), time.monotonic()
        handle = engine.submit(request(answer, 5), stream=True)
        chunks = list(handle.stream(timeout=600))
        wall = time.perf_counter() - t0
        stream = handle._audio_stream
        other.cancel()
        engine.shutdown()
        table.rows.append({"order": label, "step_s": step_s, "first_audio_s": stream.first_audio_s - t0_monotonic,
                           "stream_audio_s": sum(c.duration_s for c in chunks),
                           "underruns": len(stream.underruns_s), "max_silence_s": max(stream.underruns_s, default=0.0),
                           "total_silence_s": sum(stream.underruns_s), "wall_s": wall})
    table.notes.append("issue 26 asks for no silence longer than 1 s beyond real time; an underrun is a chunk that "
                       "came after everything sent before it had played")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--tiny", action="store_true", help="also measure 2 on the tiny VibeVoice checkpoint")
    args = parser.parse_args()
    warm_up()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    measures = [measure_post, measure_fairness] + ([measure_fairness_tiny] if args.tiny else []) + [measure_underruns]
    for measure in measures:
        print(measure(args.quick).render())
        print(f"load average: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
