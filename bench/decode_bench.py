"""Decode bench (issue 27): the pooled decode path (``tts_app/adapters/kv_pool.py``: KV in fixed slots, one host
sync per step) against the eager path as it was (``DecodeSettings(pooled=False)``: ``DynamicCache`` merged by
concatenation, IndexTTS 2 choosing codes row by row), side by side in one run, printed as ratios.

    python bench/decode_bench.py [--batch 8] [--steps 40] [--layers 4] [--json OUT]

Measures (CPU, one thread; random weights built in code, nothing downloaded):

1. stream   A mid-size Qwen2 decoder (VibeVoice's LM family: ``--layers`` layers, hidden 512, 8 query / 2 KV heads of
            64) as one running-batch stream: ``--batch`` rows of mixed prompt lengths (40-160 positions) join, decode
            ``--steps`` steps, then one row joins and one leaves. Printed: KV bytes copied by a one-row join (eager:
            the ``torch.cat`` of every layer's whole cache, O(batch); pooled: the new row's positions, O(row)), KV
            bytes copied per decode step (eager: ``DynamicCache`` concatenates each layer's cache with the new
            position; pooled: the new column), KV bytes held / live-token KV bytes after the run (eager: left padding
            to the longest row; pooled: slot width), and the step time split into inside / outside the model forward.
2. indextts2 IndexTTS 2's running batch (``IndexTTS2DecodeBatch``, codes only) with a ``--layers``-layer GPT of the
            real width (1280, 20 heads: s2mel hard-codes it), ``--batch`` rows, sampled with one beam: host time
            per decode step outside the GPT forward (the per-row host syncs of the eager path are there), whole step
            time and codes per second, eager vs pooled, plus the codes' equality.
With ``--compiled``, measure 1 also runs the pooled stream through ``torch.compile`` (inductor on the CPU: static
shapes, the slot bucket and the pool's whole width): seconds to compile and the per-step ratio to eager / pooled.

Timings on a shared machine are noisy: compare the ratios within one run; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (pins threads before torch loads)

common.setup(num_threads=1)

import torch  # noqa: E402

from common import ratio  # noqa: E402
from tts_app.adapters.decode_stream import DecoderStream  # noqa: E402
from tts_app.adapters.kv_pool import DecodeSettings, KVPool, PooledStream  # noqa: E402


class Table:
    """A plain-text table: a title, named columns, rows of cells."""

    def __init__(self, title: str, columns: list[str]):
        self.title, self.columns, self.rows = title, columns, []

    def add(self, *cells) -> None:
        self.rows.append([f"{c:,}" if isinstance(c, int) else str(c) for c in cells])

    def print(self) -> None:
        widths = [max(len(r[i]) for r in [self.columns] + self.rows) for i in range(len(self.columns))]
        print(f"== {self.title}")
        for r in [self.columns] + self.rows:
            print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))


class ForwardClock:
    """Seconds spent inside a module's forward calls (pre/post hooks)."""

    def __init__(self, module):
        self.seconds = 0.0
        self.calls = 0
        self._start = 0.0
        self._handles = [module.register_forward_pre_hook(self._pre), module.register_forward_hook(self._post)]

    def remove(self) -> None:
        """Stop timing (before compiling the module: dynamo would trace the hooks' clock reads)."""
        for handle in self._handles:
            handle.remove()

    def _pre(self, *_):
        self._start = time.perf_counter()

    def _post(self, *_):
        self.seconds += time.perf_counter() - self._start
        self.calls += 1


def kv_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def eager_cache_bytes(stream: DecoderStream) -> int:
    layers = [layer for layer in stream.cache.layers if layer.is_initialized]
    return kv_bytes([t for layer in layers for t in (layer.keys, layer.values)])


# -- 1. stream -------------------------------------------------------------------------------------------------------
def build_qwen2(layers: int):
    from transformers import Qwen2Config, Qwen2Model

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=512, intermediate_size=1536, num_hidden_layers=layers,
                         num_attention_heads=8, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096)
    return Qwen2Model(config).eval()


def prompt_stream(model, lengths, seed):
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    embeds = torch.randn((len(lengths), width, 512), generator=g) * 0.1
    mask = torch.stack([torch.cat([torch.zeros(width - n, dtype=torch.long), torch.ones(n, dtype=torch.long)])
                        for n in lengths])
    stream = DecoderStream(model, 512, torch.device("cpu"), torch.float32, True)
    stream.forward(embeds, mask)
    return stream


def measure_stream(batch: int, steps: int, layers: int, compiled: bool) -> dict:
    model = build_qwen2(layers)
    clock = ForwardClock(model)
    lengths = [40 + (120 * i) // max(1, batch - 1) for i in range(batch)]
    out = {}
    paths = ("eager", "pooled") + (("pooled+compiled",) if compiled else ())
    with torch.inference_mode():
        for name in paths:
            if name == "eager":
                stream = DecoderStream(model, 512, torch.device("cpu"), torch.float32, True)
                pool = None
            else:  # sized as the engine sizes it: its batch cap in rows, each slot for prompt + decode cap
                pool = KVPool(layers, 2, 64, torch.float32, torch.device("cpu"), initial_rows=batch + 1)
                stream = PooledStream(pool, model, 512, torch.device("cpu"), torch.float32, new_positions=steps + 1)
                stream.compiled = pool.static_addresses = name.endswith("compiled")
                if stream.compiled:
                    clock.remove()  # the compiled step is timed whole
            stream.commit(stream.prepare_merge(prompt_stream(model, lengths, seed=1)))
            x = torch.randn((batch, 1, 512), generator=torch.Generator().manual_seed(2)) * 0.1
            feed = torch.ones((batch, 1), dtype=torch.long)
            compile_s = 0.0
            if getattr(stream, "compiled", False):  # the first call compiles (inductor): timed apart
                t0 = time.perf_counter()
                stream.forward(x, feed)
                compile_s = time.perf_counter() - t0
            clock.seconds, total = 0.0, 0.0
            for _ in range(steps):
                t0 = time.perf_counter()
                stream.forward(x, feed)
                total += time.perf_counter() - t0
            inside = clock.seconds
            # per decode step, the eager DynamicCache concatenates each layer's whole cache with the new position
            step_copy = eager_cache_bytes(stream) if pool is None else batch * pool.bytes_per_position()
            before = eager_cache_bytes(stream) if pool is None else pool.bytes_copied
            joiner = prompt_stream(model, [100], seed=3)
            prepared = stream.prepare_merge(joiner)
            stream.commit(prepared)
            if pool is None:  # the merge built a new cache of every row: that is what it copied
                join_copy = eager_cache_bytes(stream)
                del before
            else:
                join_copy = pool.bytes_copied - before
            stream.keep_rows(torch.arange(1, batch + 1))  # the first row leaves
            if pool is None:
                mask = stream.attention_mask
                held = eager_cache_bytes(stream)
                live = held * int(mask.sum()) // max(1, mask.numel())
            else:
                stream.checkpoint()
                held, live = pool.held_bytes(), pool.live_bytes()
            used = held if pool is None else pool.num_used * pool.max_positions * pool.bytes_per_position()
            out[name] = {"step_s": total / steps, "forward_s": inside / steps,
                         "outside_s": (total - inside) / steps, "join_copy_bytes": join_copy,
                         "step_copy_bytes": step_copy, "held_bytes": held, "live_bytes": live,
                         "used_slot_bytes": used, "compile_s": compile_s}
    row_bytes = 100 * out["pooled"]["step_copy_bytes"] // batch  # the joining row's 100 positions
    out["row_kv_bytes"] = row_bytes
    return out


# -- 2. IndexTTS 2 ---------------------------------------------------------------------------------------------------
def build_indextts2(layers: int, work_dir: Path):
    from transformers import Wav2Vec2BertConfig

    from tts_app.adapters import indextts2 as it2

    config = it2._deep_update(it2.INDEXTTS2_CONFIG, it2.TINY_CONFIG_OVERRIDES)
    config["gpt"]["layers"] = layers
    config["gpt"]["max_mel_tokens"] = 600
    w2v = Wav2Vec2BertConfig(hidden_size=1024, num_hidden_layers=it2.W2V_BERT_LAYER, num_attention_heads=1,
                             intermediate_size=8, conv_depthwise_kernel_size=3, position_embeddings_type=None)
    adapter = it2.build_random_adapter(config, it2.TINY_BIGVGAN_CONFIG, work_dir=work_dir, w2v_config=w2v)
    with torch.no_grad():  # no stop code: every row makes exactly --steps codes
        adapter.model.gpt.mel_head.bias[int(adapter.model.gpt.stop_mel_token)] = -1e4
    return adapter


def measure_indextts2(batch: int, steps: int, layers: int, work_dir: Path) -> dict:
    from tts_app.adapters.base import AdapterRow
    from tts_app.request import SynthesisParams

    adapter = build_indextts2(layers, work_dir)
    clock = ForwardClock(adapter.model.gpt.gpt)
    sr = adapter.facts.sampling_rate
    clip = common.reference_clip("en_female_1.wav", sr, 1.5)[0]
    texts = ["Hello there, how are you today?", "今天天气很好。", "A somewhat longer line to speak aloud here.",
             "短句。"]
    rows = [AdapterRow(texts[i % len(texts)], clip, None, seed=10 + i) for i in range(batch)]
    params = SynthesisParams(num_beams=1, temperature=0.8, top_k=30, top_p=0.8, max_new_tokens=steps + 2)
    out = {}
    with torch.no_grad():
        inputs = adapter.preprocess(rows, adapter.resolve(params))
        for name, pooled in (("eager", False), ("pooled", True)):
            adapter.decode_settings = DecodeSettings(pooled=pooled)
            decode = adapter.start_decode(params)
            decode.make_audio = False
            decode.join(list(range(batch)), inputs)
            decode.decode_step()  # warm-up step (first-call allocations)
            clock.seconds, total = 0.0, 0.0
            for _ in range(steps - 1):
                t0 = time.perf_counter()
                decode.decode_step()
                total += time.perf_counter() - t0
            n = steps - 1
            out[name] = {"step_s": total / n, "forward_s": clock.seconds / n,
                         "outside_s": (total - clock.seconds) / n, "codes_per_s": batch * n / total,
                         "codes": [list(r.codes) for r in decode.rows]}
        adapter.decode_settings = DecodeSettings()
    out["codes_equal"] = out["eager"]["codes"] == out["pooled"]["codes"]
    for name in ("eager", "pooled"):
        del out[name]["codes"]
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--skip-indextts2", action="store_true", help="stream measure only")
    parser.add_argument("--compiled", action="store_true",
                        help="measure 1 also through torch.compile (inductor; compiling takes minutes on 2 cores)")
    parser.add_argument("--json", dest="json_out", default=None)
    args = parser.parse_args(argv)
    load = lambda: open("/proc/loadavg").read().split()[0] if os.path.exists("/proc/loadavg") else "?"  # noqa: E731
    report = {"batch": args.batch, "steps": args.steps, "layers": args.layers, "load_before": load()}

    s = measure_stream(args.batch, args.steps, args.layers, args.compiled)
    report["stream"] = s
    e, p = s["eager"], s["pooled"]
    t = Table(f"1. stream: Qwen2 {args.layers} layers x 512, batch {args.batch}, {args.steps} steps "
              f"(load {load()})", ["measure", "eager", "pooled", "eager / pooled"])
    t.add("KV bytes copied by a one-row join", e["join_copy_bytes"], p["join_copy_bytes"],
          f"{ratio(e['join_copy_bytes'], p['join_copy_bytes']):.1f}x")
    t.add("  (the joining row's own KV bytes)", s["row_kv_bytes"], s["row_kv_bytes"], "")
    t.add("KV bytes copied per decode step", e["step_copy_bytes"], p["step_copy_bytes"],
          f"{ratio(e['step_copy_bytes'], p['step_copy_bytes']):.0f}x")
    t.add("KV held / live-token KV (whole pool)", f"{ratio(e['held_bytes'], e['live_bytes']):.2f}",
          f"{ratio(p['held_bytes'], p['live_bytes']):.2f}", "")
    t.add("  used slots / live-token KV (slot waste)", f"{ratio(e['used_slot_bytes'], e['live_bytes']):.2f}",
          f"{ratio(p['used_slot_bytes'], p['live_bytes']):.2f}", "")
    for key, label in (("step_s", "step ms"), ("forward_s", "  inside the model forward, ms"),
                       ("outside_s", "  outside the model forward, ms")):
        t.add(label, f"{e[key] * 1e3:.2f}", f"{p[key] * 1e3:.2f}", f"{ratio(e[key], p[key]):.2f}x")
    t.print()
    if "pooled+compiled" in s:
        c = s["pooled+compiled"]
        print(f"   compiled (inductor): {c['step_s'] * 1e3:.2f} ms per step after {c['compile_s']:.0f} s of "
              f"compiling; eager / compiled {ratio(e['step_s'], c['step_s']):.2f}x, pooled / compiled "
              f"{ratio(p['step_s'], c['step_s']):.2f}x (steps per second ratio)")

    if not args.skip_indextts2:
        with tempfile.TemporaryDirectory() as tmp:
            r = measure_indextts2(args.batch, args.steps, args.layers, Path(tmp))
        report["indextts2"] = r
        e, p = r["eager"], r["pooled"]
        t = Table(f"2. IndexTTS 2 running batch: GPT {args.layers} layers x 1280, batch {args.batch}, sampled, "
                  f"one beam (load {load()})", ["measure", "eager", "pooled", "eager / pooled"])
        for key, label in (("outside_s", "host ms per step outside the GPT forward"),
                           ("forward_s", "ms per step inside the GPT forward"), ("step_s", "ms per step")):
            t.add(label, f"{e[key] * 1e3:.2f}", f"{p[key] * 1e3:.2f}", f"{ratio(e[key], p[key]):.2f}x")
        t.add("codes per second", f"{e['codes_per_s']:.1f}", f"{p['codes_per_s']:.1f}",
              f"{ratio(p['codes_per_s'], e['codes_per_s']):.2f}x (pooled / eager)")
        t.add("same codes", "", str(r["codes_equal"]), "")
        t.print()

    if not args.compiled:
        print("(the compiled step: --compiled; bench/gpu_check.py measures it with CUDA graphs on a GPU)")
    report["load_after"] = load()
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
