"""Run the package's own ``IndexTTS2.infer`` (indextts2-inference) on a checkpoint, for the upstream-equality test.

    HF_HUB_CACHE=CKPT/hf_cache HF_HUB_OFFLINE=1 python -m tests.indextts2_upstream CKPT CASES.json OUT.npz

Run in a child process so the hub cache is the checkpoint's own (``HF_HUB_CACHE`` is read when huggingface_hub is
imported), exactly as a user would point the package at a local cache. Each case of CASES.json is a dict:
``reference`` (WAV path), ``text``, ``seed`` and optional ``max_mel_tokens`` (left out: ``infer``'s default),
``emo_audio_prompt``, ``emo_vector``, ``emo_alpha``, ``generation`` (keyword arguments of ``infer``'s generation,
e.g. ``{}`` for its defaults: beam sampling with 3 beams). Without ``generation``, greedy decoding is requested the
only way ``infer`` offers it: ``top_k=1, num_beams=1`` (it always samples). For case ``i`` the npz holds
``codes_i`` (the GPT's codes of its first segment, stop code included), ``codes_i_k`` (those of segment ``k``),
``segments_i`` (how many segments ``infer`` cut the text into) and ``audio_i`` (the whole clip ``infer`` returns:
each segment's vocoder output clamped to [-1, 1], joined with its ``interval_silence``, float32, before ``infer``
rounds it to 16-bit PCM).

Two things are pinned down so the comparison is about the model, not about inputs:

* The NeMo text normaliser is replaced by the first and last steps of the package's own
  ``TextNormalizer.normalize`` (its English contraction rule and its punctuation map): tts_app normalises text in its front end, and the test texts hold nothing NeMo would rewrite.
* The GPT's sampling draws (``torch.multinomial`` in transformers' ``generate``) come from the global RNG; it is
  seeded with the segment's seed (the case's seed + the segment's index, as tts_app seeds segment ``k``) right
  before ``generate``, which gives the adapter's per-row ``torch.Generator().manual_seed(seed)`` stream.
* The flow-matching noise: ``BASECFM.inference`` draws it from the global RNG; the global RNG is seeded with the
  segment's seed right before, which gives the same numbers as the adapter's ``torch.Generator().manual_seed(seed)``.

``infer`` itself takes no seed: a user seeds the global RNG once and its draws run on across the GPT, s2mel and the
next segment. tts_app gives segment ``k`` its own generator seeded ``seed + k`` (so segments of one request batch
together and each is reproducible alone); the pinning above is that departure, applied on the upstream side.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np


def run_infer(work_dir: Path, checkpoint: Path, cases: list[dict]):
    """This module's ``main`` on ``cases`` in a child process (the checkpoint's hub cache, offline, one thread) ->
    its npz (``codes_i``, ``codes_i_k``, ``segments_i``, ``audio_i``). Files go to ``work_dir``."""
    import os
    import subprocess

    root = Path(__file__).resolve().parents[1]
    (work_dir / "cases.json").write_text(json.dumps(cases, ensure_ascii=False), encoding="utf-8")
    env = dict(os.environ, HF_HUB_CACHE=str(checkpoint / "hf_cache"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               PYTHONPATH=str(root))
    proc = subprocess.run([sys.executable, "-m", "tests.indextts2_upstream", str(checkpoint),
                           str(work_dir / "cases.json"), str(work_dir / "upstream.npz")],
                          cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return np.load(work_dir / "upstream.npz")


def main(argv: list[str]) -> int:
    checkpoint, cases_path, out_path = argv
    import torch

    torch.set_num_threads(1)
    import indextts.infer_v2 as infer_v2
    import indextts.s2mel.modules.flow_matching as flow_matching

    class PunctuationOnlyNormalizer(infer_v2.TextNormalizer):
        def load(self):  # no NeMo grammars
            pass

        def normalize(self, text):
            text = re.sub(self.ENGLISH_CONTRACTION_PATTERN, r"\1 is", text, flags=re.IGNORECASE)  # before NeMo
            rep_map = self.zh_char_rep_map if self.use_chinese(text) else self.char_rep_map
            pattern = re.compile("|".join(re.escape(p) for p in rep_map))
            return pattern.sub(lambda m: rep_map[m.group()], text)

    infer_v2.TextNormalizer = PunctuationOnlyNormalizer
    tts = infer_v2.IndexTTS2(model_dir=checkpoint, device="cpu")

    cases = json.loads(open(cases_path, encoding="utf-8").read())
    captured: dict[str, object] = {}
    inference_speech = tts.gpt.inference_speech
    cfm_inference = flow_matching.BASECFM.inference

    insert_silence = tts.insert_interval_silence

    def segment_seed() -> int:
        return captured["seed"] + len(captured["codes"]) - 1  # the segment whose codes were generated last

    def spy_codes(*args, **kwargs):
        torch.manual_seed(captured["seed"] + len(captured["codes"]))
        codes, latent = inference_speech(*args, **kwargs)
        captured["codes"].append(codes.detach().cpu().numpy())
        return codes, latent

    def spy_join(wavs, **kwargs):
        joined = insert_silence(wavs, **kwargs)
        captured["audio"] = torch.cat(joined, dim=1).float().cpu().numpy().reshape(-1)
        return joined

    def seeded_cfm(self, *args, **kwargs):
        torch.manual_seed(segment_seed())
        return cfm_inference(self, *args, **kwargs)

    tts.gpt.inference_speech = spy_codes
    tts.insert_interval_silence = spy_join
    flow_matching.BASECFM.inference = seeded_cfm
    results = {}
    for i, case in enumerate(cases):
        captured.clear()
        captured.update(seed=int(case["seed"]), codes=[])
        kwargs = {k: case[k] for k in ("emo_audio_prompt", "emo_vector", "emo_alpha") if k in case}
        if case.get("max_mel_tokens") is not None:
            kwargs["max_mel_tokens"] = int(case["max_mel_tokens"])
        generation = case.get("generation", {"top_k": 1, "num_beams": 1})
        tts.infer(case["reference"], case["text"], None, **generation, **kwargs)
        results[f"codes_{i}"] = captured["codes"][0]
        for k, codes in enumerate(captured["codes"]):
            results[f"codes_{i}_{k}"] = codes
        results[f"segments_{i}"] = np.array(len(captured["codes"]))
        results[f"audio_{i}"] = captured["audio"]
    np.savez(out_path, **results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
