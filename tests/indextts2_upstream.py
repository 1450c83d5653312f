"""Run the package's own ``IndexTTS2.infer`` (indextts2-inference) on a checkpoint, for the upstream-equality test.

    HF_HUB_CACHE=CKPT/hf_cache HF_HUB_OFFLINE=1 python -m tests.indextts2_upstream CKPT CASES.json OUT.npz

Run in a child process so the hub cache is the checkpoint's own (``HF_HUB_CACHE`` is read when huggingface_hub is
imported), exactly as a user would point the package at a local cache. Each case of CASES.json is a dict:
``reference`` (WAV path), ``text``, ``seed``, ``max_mel_tokens`` and optional ``emo_audio_prompt``, ``emo_vector``,
``emo_alpha``, ``generation`` (keyword arguments of ``infer``'s generation, e.g. ``{}`` for its defaults: beam
sampling with 3 beams). Without ``generation``, greedy decoding is requested the only way ``infer`` offers it:
``top_k=1, num_beams=1`` (it always samples). For case ``i`` the npz holds ``codes_i`` (the GPT's codes, stop code included) and ``audio_i`` (the vocoder
output clamped to [-1, 1], float32, before ``infer`` rounds it to 16-bit PCM).

Two things are pinned down so the comparison is about the model, not about inputs:

* The NeMo text normaliser is replaced by the first and last steps of the package's own
  ``TextNormalizer.normalize`` (its English contraction rule and its punctuation map): tts_app normalises text in its front end, and the test texts hold nothing NeMo would rewrite.
* The GPT's sampling draws (``torch.multinomial`` in transformers' ``generate``) come from the global RNG; it is
  seeded with the case's seed right before ``generate``, which gives the adapter's per-row
  ``torch.Generator().manual_seed(seed)`` stream.
* The flow-matching noise: ``BASECFM.inference`` draws it from the global RNG; the global RNG is seeded with the
  case's seed right before, which gives the same numbers as the adapter's ``torch.Generator().manual_seed(seed)``.
"""

from __future__ import annotations

import json
import re
import sys

import numpy as np


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
    vocoder_forward = tts.bigvgan.forward
    cfm_inference = flow_matching.BASECFM.inference

    def spy_codes(*args, **kwargs):
        torch.manual_seed(captured["seed"])
        codes, latent = inference_speech(*args, **kwargs)
        captured["codes"] = codes.detach().cpu().numpy()
        return codes, latent

    def spy_audio(mel):
        wav = vocoder_forward(mel)
        captured["audio"] = torch.clamp(wav.squeeze(), -1.0, 1.0).float().cpu().numpy().reshape(-1)
        return wav

    def seeded_cfm(self, *args, **kwargs):
        torch.manual_seed(captured["seed"])
        return cfm_inference(self, *args, **kwargs)

    tts.gpt.inference_speech = spy_codes
    tts.bigvgan.forward = spy_audio
    flow_matching.BASECFM.inference = seeded_cfm
    results = {}
    for i, case in enumerate(cases):
        captured.clear()
        captured["seed"] = int(case["seed"])
        kwargs = {k: case[k] for k in ("emo_audio_prompt", "emo_vector", "emo_alpha") if k in case}
        generation = case.get("generation", {"top_k": 1, "num_beams": 1})
        tts.infer(case["reference"], case["text"], None, max_mel_tokens=int(case["max_mel_tokens"]), **generation,
                  **kwargs)
        results[f"codes_{i}"] = captured["codes"]
        results[f"audio_{i}"] = captured["audio"]
    np.savez(out_path, **results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
