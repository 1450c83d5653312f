"""Show that transformers' own ``VibeVoiceForConditionalGeneration.generate`` is wrong with ``use_cache=False``
(the reason ``tts_app/adapters/vibevoice.py`` runs its own decode loop).

    OMP_NUM_THREADS=1 python bench/vibevoice_upstream_use_cache_bug.py

On the tiny checkpoint, greedy ``generate`` with ``use_cache=True`` and ``use_cache=False`` should give the same
tokens. Batch 1: the token lists differ. Batch 3: ``use_cache=False`` raises a shape error. Then the adapter's loop
on the same rows: equal. (``<audio_bos>`` is suppressed in the upstream call so the tiny model makes frames.)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402  (bench/common.py; pins threads before torch loads)

common.setup()

import torch  # noqa: E402

from batch_vs_single import workload_rows  # noqa: E402  (the rows of the batch benchmark)
from tts_app.adapters.base import AdapterRow  # noqa: E402
from tts_app.request import SynthesisParams  # noqa: E402


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        adapter = common.load_tiny_adapter("vibevoice", Path(tmp))
    model, processor = adapter.model, adapter.processor
    sr = adapter.facts.sampling_rate
    workload = workload_rows(sr)
    texts = [row.text for row in workload]
    refs = [row.reference_audio for row in workload]
    for n in (1, 3):
        prompts = [adapter._prompt(t, 1) for t in texts[:n]]
        for use_cache in (True, False):
            inputs = processor(text=prompts, audio=refs[:n], sampling_rate=sr, padding=True, return_tensors="pt")
            torch.manual_seed(0)
            try:
                out = model.generate(**inputs, use_cache=use_cache, max_new_tokens=8, do_sample=False, sample=False,
                                     return_dict_in_generate=True, suppress_tokens=[model.config.audio_bos_token_id])
                print(f"transformers generate, batch {n}, use_cache={use_cache}: "
                      f"{out.sequences[:, inputs['input_ids'].shape[1]:].tolist()}")
            except Exception as exc:  # the bug being shown
                print(f"transformers generate, batch {n}, use_cache={use_cache}: {type(exc).__name__}: {exc}")
        rows = [AdapterRow(t, r, None, seed=0) for t, r in zip(texts[:n], refs[:n])]
        for use_cache in (True, False):
            params = SynthesisParams(greedy=True, max_new_tokens=8, use_cache=use_cache)
            tokens = adapter.generate(adapter.preprocess(rows, params), params).token_ids
            print(f"tts_app adapter,        batch {n}, use_cache={use_cache}: {[t.tolist() for t in tokens]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
