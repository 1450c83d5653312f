"""Segment context's cost (issue 29 item 4): the same long requests with ``segment_context`` off and on, side by
side in one run, on a tiny random checkpoint (CSM or Higgs Audio v2, the families that offer it).

    python3 bench/segment_context_bench.py                       # higgs, 4 requests of 4 segments
    python3 bench/segment_context_bench.py --family csm --requests 2

Off, every segment of every request can share one batch; on, a request's segments run one after another (each
prompt also longer by the earlier segments), batched only with other requests' rows. Printed: wall seconds of
each run, the ratio on / off, and the prompt positions of the last segment's row in each (the context it heard).
Tiny models: the ratio shows the scheduling (fewer rows per batch, longer prompts), not a real model's speed. No
thresholds.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

TEXT = ("The first part of the story starts here. Then the second part follows it. "
        "A third part comes after that one. And the fourth part ends the story.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="higgs", choices=("higgs", "csm"))
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=30)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from tts_app.adapters import adapter_class
    from tts_app.config import EngineConfig
    from tts_app.engine import Engine
    from tts_app.request import ReferenceAudio, SynthesisParams, SynthesisRequest

    folder = adapter_class(args.family).make_tiny_checkpoint(tempfile.mkdtemp(prefix="bench-context-"))
    adapter = adapter_class(args.family).from_pretrained(folder, device="cpu", dtype="float32")
    rate = adapter.facts.sampling_rate
    t = np.arange(rate) / rate
    ref = ReferenceAudio(samples=(0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32), sampling_rate=rate,
                         key="tone")
    prompt_lengths: list[int] = []
    real = adapter.preprocess

    def preprocess(rows, params):  # the prompt positions of each row (attention mask sums)
        inputs = real(rows, params)
        mask = inputs["batch"]["attention_mask"] if isinstance(inputs, dict) else inputs.attention_mask
        prompt_lengths.extend(int(n) for n in mask.sum(dim=-1).tolist())
        return inputs

    adapter.preprocess = preprocess
    warm = Engine(adapter, EngineConfig())  # first calls pay one-time costs (codec caches, kernels): not measured
    warm.start()
    warm.submit(SynthesisRequest(text="Warm up.", reference_audio=ref, reference_text="A tone.",
                                 params=SynthesisParams(greedy=True, max_new_tokens=args.max_new_tokens))).result(600)
    warm.shutdown()
    results = {}
    for context in (False, True):
        prompt_lengths.clear()
        engine = Engine(adapter, EngineConfig(max_batch_size=16, wait_window_ms=20))
        params = [SynthesisParams(seed=i, greedy=True, max_new_tokens=args.max_new_tokens, max_segment_chars=45,
                                  segment_context=context) for i in range(args.requests)]
        engine.start()
        started = time.perf_counter()
        handles = [engine.submit(SynthesisRequest(text=TEXT, reference_audio=ref, reference_text="A tone.",
                                                  params=p)) for p in params]
        done = [h.result(timeout=600) for h in handles]
        results[context] = (time.perf_counter() - started, max(prompt_lengths), len(done[0].segments))
        engine.shutdown()
    (off_s, off_len, segments), (on_s, on_len, _) = results[False], results[True]
    print(f"{args.family}: {args.requests} requests x {segments} segments, load {os.getloadavg()[0]:.2f}")
    print(f"  off: {off_s:7.2f} s   longest prompt {off_len} positions")
    print(f"  on:  {on_s:7.2f} s   longest prompt {on_len} positions")
    print(f"  on / off wall time: {on_s / off_s:.2f}x")


if __name__ == "__main__":
    main()
