"""IndexTTS 2: how often the model ends speech at once (no codes) with the default settings (3 beams sampled,
length_penalty 0), here and in the package's own ``IndexTTS2.infer`` on the same checkpoint, text, voice and seeds.

    OMP_NUM_THREADS=1 python3 bench/indextts2_early_end.py [--seeds 30] [--text "Hello there, how are you?"]
        [--model DIR] [--max-codes 40]

Without ``--model`` the tiny random checkpoint is built in a temporary folder (nothing is downloaded). For each seed
it prints the number of codes the adapter made and the number ``infer`` made (its stop code left out), whether the
codes are equal, and the error ``infer`` raised (on no codes it fails inside s2mel). The upstream side runs in a child
process with the checkpoint's hub cache, offline, its text normaliser reduced to its punctuation map and its GPT's
draws seeded as the adapter's (as tests/indextts2_upstream.py does for the equality tests).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def upstream_child(checkpoint: str, cases_path: str, out_path: str) -> None:
    """``infer`` on every case; the GPT's codes recorded even when ``infer`` fails after them."""
    import torch

    torch.set_num_threads(1)
    import indextts.infer_v2 as infer_v2

    class PunctuationOnlyNormalizer(infer_v2.TextNormalizer):
        def load(self):  # no NeMo grammars
            pass

        def normalize(self, text):
            text = re.sub(self.ENGLISH_CONTRACTION_PATTERN, r"\1 is", text, flags=re.IGNORECASE)
            rep_map = self.zh_char_rep_map if self.use_chinese(text) else self.char_rep_map
            pattern = re.compile("|".join(re.escape(p) for p in rep_map))
            return pattern.sub(lambda m: rep_map[m.group()], text)

    infer_v2.TextNormalizer = PunctuationOnlyNormalizer
    tts = infer_v2.IndexTTS2(model_dir=checkpoint, device="cpu")
    captured: dict = {}
    inference_speech = tts.gpt.inference_speech

    def spy_codes(*args, **kwargs):
        torch.manual_seed(captured["seed"])  # = the adapter's per-request generator seeded with the seed
        codes, latent = inference_speech(*args, **kwargs)
        captured["codes"] = codes[0].tolist()
        return codes, latent

    tts.gpt.inference_speech = spy_codes
    results = []
    for case in json.loads(Path(cases_path).read_text(encoding="utf-8")):
        captured.clear()
        captured["seed"] = case["seed"]
        error = None
        try:
            tts.infer(case["reference"], case["text"], None, max_mel_tokens=case["max_codes"])
        except Exception as exc:  # noqa: BLE001 - what infer raises is what is reported
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:90]}"
        results.append({"seed": case["seed"], "codes": captured.get("codes"), "error": error})
    Path(out_path).write_text(json.dumps(results), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=30, help="seeds 0..N-1")
    parser.add_argument("--text", default="Hello there, how are you?")
    parser.add_argument("--model", default=None, help="IndexTTS 2 checkpoint folder (default: the tiny one, built)")
    parser.add_argument("--max-codes", type=int, default=40, help="decode-step cap (max_mel_tokens)")
    args = parser.parse_args()

    import soundfile as sf

    from tests.adapter_helpers import load_reference
    from tts_app.adapters import adapter_class
    from tts_app.adapters.base import AdapterRow
    from tts_app.request import SynthesisParams

    work = Path(tempfile.mkdtemp(prefix="idx-early-end-"))
    model = Path(args.model) if args.model else Path(adapter_class("indextts2").make_tiny_checkpoint(work / "tiny"))
    adapter = adapter_class("indextts2").from_pretrained(model, device="cpu", dtype="float32")
    voice = load_reference("zh_female_1.wav", adapter.facts.sampling_rate, 1.6)[0]
    sf.write(work / "voice.wav", voice, adapter.facts.sampling_rate, subtype="FLOAT")
    stop = adapter.model.gpt.stop_mel_token
    ours = []
    for seed in range(args.seeds):
        rows = [AdapterRow(args.text, voice, None, seed=seed)]
        params = SynthesisParams(max_new_tokens=args.max_codes)  # the defaults: 3 beams sampled, length_penalty 0
        outputs = adapter.generate(adapter.preprocess(rows, params), params)
        ours.append(outputs.codes[0, :int(outputs.code_lengths[0])].tolist())
    cases = [{"reference": str(work / "voice.wav"), "text": args.text, "seed": s, "max_codes": args.max_codes}
             for s in range(args.seeds)]
    (work / "cases.json").write_text(json.dumps(cases), encoding="utf-8")
    env = dict(os.environ, HF_HUB_CACHE=str(model / "hf_cache"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, __file__, "--upstream-child", str(model), str(work / "cases.json"),
                    str(work / "upstream.json")], check=True, env=env, cwd=ROOT)
    upstream = json.loads((work / "upstream.json").read_text(encoding="utf-8"))

    print(f"text {args.text!r}, voice zh_female_1.wav (1.6 s), cap {args.max_codes} codes, model {model}")
    print(f"{'seed':>4} {'ours':>5} {'infer':>5} {'equal':>5}  infer's error")
    equal = empty_ours = empty_upstream = 0
    for seed, (mine, theirs) in enumerate(zip(ours, upstream)):
        codes = theirs["codes"] or []
        codes = codes[:-1] if codes and codes[-1] == stop else codes
        same = codes == mine
        equal += same
        empty_ours += not mine
        empty_upstream += not codes
        print(f"{seed:>4} {len(mine):>5} {len(codes):>5} {str(same):>5}  {theirs['error'] or ''}")
    print(f"equal codes: {equal}/{args.seeds}; no codes: here {empty_ours}, infer {empty_upstream}")


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--upstream-child":
        upstream_child(*sys.argv[2:])
    else:
        main()
