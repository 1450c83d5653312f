"""GLM-TTS language-model stage: 8 rows decoded as one batch (the engine's step interface) vs the same rows one by one.

    python3 bench/glmtts_lm_bench.py                       # tiny checkpoint (built in a temp folder), "small" LM, CPU
    python3 bench/glmtts_lm_bench.py --lm checkpoint --model DIR --device cuda

The prompts (reference transcript + text + the reference clip's speech tokens) come from a GLM-TTS checkpoint (by
default the tiny one ``make-tiny-model --family glmtts`` writes); the LM is the checkpoint's own (``--lm checkpoint``)
or a random Llama of the same vocabulary (``--lm small``: 512 wide x 6 layers, seconds on 2 CPU cores; ``--lm full``:
1536 x 28, for a GPU), so batching has work to share. Greedy decoding, ``--max-new-tokens`` per row, each row its own
text. Printed: wall time of each run, the ratio one-by-one / batched, whether both runs gave the same tokens (they
must), and the load average (other processes share the CPU: prefer the ratio). One run, no thresholds.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

TEXTS = ("今天天气很好，我们一起去公园散步。", "Hello there, how are you today?", "晚上回家做饭。",
         "The quick brown fox jumps over the lazy dog.", "明天上午九点，请准时到会议室开会。", "Short line.",
         "他的重要讲话让大家都很受鼓舞。", "One more line in another voice, a little longer than the others.")
LM_SIZES = {"small": dict(hidden_size=512, intermediate_size=1408, num_hidden_layers=6, num_attention_heads=8,
                          num_key_value_heads=2),
            "full": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="GLM-TTS checkpoint folder (default: a tiny one, built now)")
    parser.add_argument("--lm", choices=["checkpoint", *LM_SIZES], default="small")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)

    import numpy as np
    import torch

    from tests.adapter_helpers import load_reference
    from tts_app.adapters.base import AdapterRow
    from tts_app.adapters.glmtts import GLMTTSAdapter
    from tts_app.request import SynthesisParams

    with tempfile.TemporaryDirectory() as tmp:
        folder = args.model or GLMTTSAdapter.make_tiny_checkpoint(Path(tmp) / "tiny")
        adapter = GLMTTSAdapter.from_pretrained(folder, device=args.device)
    if args.lm != "checkpoint":
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(vocab_size=adapter.model.config.vocab_size, max_position_embeddings=4096,
                             **LM_SIZES[args.lm])
        torch.manual_seed(0)
        adapter.model = LlamaForCausalLM(config).to(args.device).eval()
    ref, _ = load_reference("zh_female_1.wav", adapter.facts.sampling_rate, 3.0)
    rows = [AdapterRow(TEXTS[i % len(TEXTS)], ref, "银行门口排起了长队，行长说还得再等十分钟才能办理业务。", seed=i)
            for i in range(args.rows)]
    params = SynthesisParams(greedy=True, max_new_tokens=args.max_new_tokens)
    prompts = adapter.preprocess(rows, params).prompts
    adapter.speech_tokens(prompts[:1], SynthesisParams(greedy=True, max_new_tokens=4))  # warm-up

    def timed(fn):
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        return out, time.perf_counter() - t0

    batched, batched_s = timed(lambda: adapter.speech_tokens(prompts, params).speech_tokens)
    alone, alone_s = timed(lambda: [adapter.speech_tokens([p], params).speech_tokens[0] for p in prompts])
    tokens = sum(len(t) for t in batched)
    print(f"GLM-TTS LM stage, {args.rows} rows, LM {args.lm} ({adapter.model.config.hidden_size} x "
          f"{adapter.model.config.num_hidden_layers}), {args.device}, {tokens} speech tokens, greedy")
    print(f"  batched     {batched_s:8.2f} s  ({tokens / batched_s:7.1f} tokens/s)")
    print(f"  one by one  {alone_s:8.2f} s  ({tokens / alone_s:7.1f} tokens/s)")
    print(f"  ratio one-by-one / batched: {alone_s / batched_s:.2f}x; same tokens: {batched == alone}; "
          f"load average {os.getloadavg()[0]:.2f}")
    return 0 if batched == alone and np.isfinite(alone_s) else 1


if __name__ == "__main__":
    sys.exit(main())
