"""Show that transformers' own ``VibeVoiceForConditionalGeneration.generate`` is wrong with ``use_cache=False``
(the reason ``tts_app/adapters/vibevoice.py`` runs its own decode loop).

    OMP_NUM_THREADS=1 python bench/vibevoice_upstream_use_cache_bug.py

On the tiny checkpoint, greedy ``generate`` with ``use_cache=True`` and ``use_cache=False`` should give the same
tokens. Batch 1: the token lists differ. Batch 3: ``use_cache=False`` raises a shape error. Then the adapter's loop
on the same rows: equal. (``<audio_bos>`` is suppressed in the upstream call so the tiny model makes frames.)
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import soundfile as sf  # noqa: E402
import torch  # noqa: E402
import torchaudio  # noqa: E402

from tts_app.adapters.base import AdapterRow  # noqa: E402
from tts_app.adapters.vibevoice import VibeVoiceAdapter  # noqa: E402
from tts_app.request import SynthesisParams  # noqa: E402

TEXTS = ["Hello there.", "A somewhat longer sentence to speak here.", "你好世界"]
CLIPS = ["en_female_1.wav", "en_male_1.wav", "zh_female_1.wav"]


def main() -> int:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        adapter = VibeVoiceAdapter.from_pretrained(VibeVoiceAdapter.make_tiny_checkpoint(Path(tmp) / "tiny"))
    model, processor = adapter.model, adapter.processor
    refs = []
    for name in CLIPS:
        samples, rate = sf.read(ROOT / "tests" / "data" / name, dtype="float32", always_2d=True)
        refs.append(torchaudio.functional.resample(torch.from_numpy(samples.mean(axis=1)), rate, 24000).numpy())
    for n in (1, 3):
        prompts = [adapter._prompt(t, 1) for t in TEXTS[:n]]
        for use_cache in (True, False):
            inputs = processor(text=prompts, audio=refs[:n], sampling_rate=24000, padding=True, return_tensors="pt")
            torch.manual_seed(0)
            try:
                out = model.generate(**inputs, use_cache=use_cache, max_new_tokens=8, do_sample=False, sample=False,
                                     return_dict_in_generate=True, suppress_tokens=[model.config.audio_bos_token_id])
                print(f"transformers generate, batch {n}, use_cache={use_cache}: "
                      f"{out.sequences[:, inputs['input_ids'].shape[1]:].tolist()}")
            except Exception as exc:  # the bug being shown
                print(f"transformers generate, batch {n}, use_cache={use_cache}: {type(exc).__name__}: {exc}")
        rows = [AdapterRow(t, r, None, seed=0) for t, r in zip(TEXTS[:n], refs[:n])]
        for use_cache in (True, False):
            params = SynthesisParams(greedy=True, max_new_tokens=8, use_cache=use_cache)
            tokens = adapter.generate(adapter.preprocess(rows, params), params).token_ids
            print(f"tts_app adapter,        batch {n}, use_cache={use_cache}: {[t.tolist() for t in tokens]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
