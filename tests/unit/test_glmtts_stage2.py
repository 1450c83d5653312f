"""GLM-TTS second stage (DiT flow, HiFT 24 kHz, Vocos2D 32 kHz) on tiny random weights: equal to upstream's own code,
and a batch equal to its rows run alone.

Golden file `tests/data/glmtts/stage2_golden.npz` (47 KB): upstream's own code on the tiny weights. Recipe:
1. Weights: `tts_app.adapters.glmtts.tiny_stage2.write_tiny_stage2(CKPT, seed=0)` (the same call the fixture makes).
2. Upstream zai-org/GLM-TTS (commit c5dc7ae) `flow/`, `cosyvoice/`, `utils/` in a scratch folder outside the repo, run
   in a scratch venv (system torch 2.14.1 CPU + x_transformers 1.42.26, einops 0.8.1, HyperPyYAML 1.2.2 as upstream's
   requirements.txt pins, ruamel.yaml 0.18.6, einx, loguru):
   - flow: `load_hyperpyyaml(CKPT/flow/config.yaml)["flow"]` builds upstream's `Flow`; its `estimator` is replaced by
     upstream's `flow.dit.DiT(trans_dim=64, depth=2, heads=2, ff_mult=2, text_emb_dim=16, conv_layers=2, mel_dim=80,
     text_vocab_size=32768, condition_dim=80, spkr_emb_adaLN=True)` (upstream hard-codes 768/1024-wide presets in
     `Flow.__init__`), then `load_state_dict(torch.load(flow.pt), strict=True)` — which also proves the file layout.
   - HiFT: upstream `HiFTGenerator` + `ConvRNNF0Predictor` with `utils/hift_util.py`'s parameters except
     base_channels=16, cond_channels=16; `load_state_dict(torch.load(hift.pt), strict=True)`.
   - Vocos2D: upstream `utils/vocos_util.Vocos2DInference(CKPT/vocos2d/generator_jit.ckpt)` on our tiny scripted file.
   - Inputs from `torch.Generator().manual_seed(1234)`: per row `randint(0, 32768, (n,))` tokens,
     `randint(0, 32768, (p,))` prompt tokens, `randn(m, 80) * 2 - 5` prompt mel, `randn(192)` speaker embedding; rows
     (n, p, m, seed) = (5, 6, 12, 11), (9, 4, 9, 22). Per row `torch.manual_seed(seed)` then upstream's
     `Token2Wav.token2wav_with_cache(tokens, prompt_token, prompt_feat, embedding)` (10 steps, global generator) with
     HiFT as its vocoder; row 0's mel also through `Vocos2DInference`. Stored: inputs, mel (float32), waves (float16).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("x_transformers")

from tts_app.adapters.glmtts.flow import load_flow  # noqa: E402
from tts_app.adapters.glmtts.tiny_stage2 import write_tiny_stage2  # noqa: E402
from tts_app.adapters.glmtts.vocoder import load_vocoder  # noqa: E402
from tts_app.errors import ModelLoadError  # noqa: E402

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "glmtts" / "stage2_golden.npz"
MEL_ATOL = 2e-4
HIFT_WAVE_ATOL = 5e-4  # golden waves are float16: spacing 2^-14 near 0.1, 2^-10 near 1
VOCOS_WAVE_ATOL = 1e-3


@pytest.fixture(scope="module")
def stage2(tmp_path_factory):
    ckpt = tmp_path_factory.mktemp("glmtts_ckpt")
    write_tiny_stage2(ckpt, seed=0)
    return ckpt, load_flow(ckpt / "flow"), load_vocoder(ckpt, 24000), load_vocoder(ckpt, 32000)


@pytest.fixture(scope="module")
def golden():
    data = np.load(GOLDEN)
    return [{key: torch.from_numpy(np.asarray(data[f"{key}_{i}"])) for key in
             ("tokens", "prompt_tokens", "prompt_mel", "embedding", "seed", "mel", "wave24k")} | (
                {"wave32k": torch.from_numpy(data["wave32k_0"])} if i == 0 else {}) for i in range(2)]


def _batch(rows):
    """Pad rows of (tokens, prompt tokens, prompt mel, embedding) into token_to_mel's arguments."""
    def pad(tensors, *trailing):
        out = torch.zeros(len(tensors), max(t.shape[0] for t in tensors), *trailing, dtype=tensors[0].dtype)
        for i, t in enumerate(tensors):
            out[i, : t.shape[0]] = t
        return out, torch.tensor([t.shape[0] for t in tensors])

    tokens, token_lengths = pad([r["tokens"].long() for r in rows])
    prompt_tokens, prompt_lengths = pad([r["prompt_tokens"].long() for r in rows])
    prompt_mel, prompt_mel_lengths = pad([r["prompt_mel"] for r in rows], 80)
    speaker = torch.stack([r["embedding"] for r in rows])
    return tokens, token_lengths, prompt_tokens, prompt_lengths, prompt_mel, prompt_mel_lengths, speaker


def _generators(rows):
    return [torch.Generator().manual_seed(int(r["seed"])) for r in rows]


def test_flow_and_hift_equal_upstream_per_row(stage2, golden):
    _, flow, hift, _ = stage2
    for row in golden:
        generators = _generators([row])
        mel, mel_lengths = flow.token_to_mel(*_batch([row]), generators=generators)
        assert mel.shape == row["mel"][None].shape
        torch.testing.assert_close(mel[0], row["mel"], atol=MEL_ATOL, rtol=1e-4)
        wave, wave_lengths = hift(mel, mel_lengths, generators)
        assert int(wave_lengths[0]) == row["wave24k"].numel() == mel.shape[-1] * 480
        torch.testing.assert_close(wave[0], row["wave24k"].float(), atol=HIFT_WAVE_ATOL, rtol=0)


def test_vocos2d_equals_upstream_wrapper(stage2, golden):
    _, _, _, vocos = stage2
    row = golden[0]
    wave, wave_lengths = vocos(row["mel"][None], torch.tensor([row["mel"].shape[-1]]))
    assert int(wave_lengths[0]) == row["wave32k"].numel() == row["mel"].shape[-1] * 640
    torch.testing.assert_close(wave[0], row["wave32k"].float(), atol=VOCOS_WAVE_ATOL, rtol=0)


def test_batch_equals_rows_alone(stage2, golden):
    """Rows of different lengths in one batch (3 rows: the two goldens and a longer one) give each row's own mel and
    waveform, with each row's generator drawn as if alone."""
    _, flow, hift, vocos = stage2
    g = torch.Generator().manual_seed(7)
    longer = {"tokens": torch.randint(0, 32768, (14,), generator=g),
              "prompt_tokens": torch.randint(0, 32768, (5,), generator=g),
              "prompt_mel": torch.randn(10, 80, generator=g) - 4, "embedding": torch.randn(192, generator=g),
              "seed": torch.tensor(33)}
    rows = [golden[1], longer, golden[0]]
    generators_b = _generators(rows)  # the flow draws first, the vocoder goes on from there (as one row does)
    mel_b, mel_len_b = flow.token_to_mel(*_batch(rows), generators=generators_b)
    wave_b, wave_len_b = hift(mel_b, mel_len_b, generators_b)
    vocos_b, vocos_len_b = vocos(mel_b, mel_len_b)
    assert len(set(mel_len_b.tolist())) == 3
    for i, row in enumerate(rows):
        generators = _generators([row])
        mel, mel_len = flow.token_to_mel(*_batch([row]), generators=generators)
        wave, wave_len = hift(mel, mel_len, generators)
        n = int(mel_len[0])
        assert int(mel_len_b[i]) == n and int(wave_len_b[i]) == int(wave_len[0])
        torch.testing.assert_close(mel_b[i, :, :n], mel[0], atol=1e-4, rtol=1e-4)
        assert torch.all(mel_b[i, :, n:] == 0)
        torch.testing.assert_close(wave_b[i, : int(wave_len[0])], wave[0], atol=1e-4, rtol=1e-4)
        vocos_alone, _ = vocos(mel, mel_len)
        torch.testing.assert_close(vocos_b[i, : int(vocos_len_b[i])], vocos_alone[0], atol=1e-5, rtol=1e-5)


def test_missing_or_mismatched_files_name_the_fix(stage2, tmp_path):
    ckpt = stage2[0]
    with pytest.raises(ModelLoadError, match="lacks flow.pt"):
        (tmp_path / "flow").mkdir()
        (tmp_path / "flow" / "config.yaml").write_text((ckpt / "flow" / "config.yaml").read_text())
        load_flow(tmp_path / "flow")
    with pytest.raises(ModelLoadError, match="hift.pt not found"):
        load_vocoder(tmp_path, 24000)
    with pytest.raises(ValueError, match="24000"):
        load_vocoder(ckpt, 22050)


def test_flow_files_in_upstreams_other_accepted_forms(stage2, golden, tmp_path):
    """`{"model": state dict}` weights (upstream's load_flow_model accepts both) and HyperPyYAML `!ref` values load to
    the same model; a config that contradicts the weights is refused with the fix."""
    ckpt, flow, _, _ = stage2
    (tmp_path / "flow").mkdir()
    state = torch.load(ckpt / "flow" / "flow.pt", weights_only=True)
    state.pop("estimator.rotary_embed.inv_freq")  # not required: a fixed function of the head size
    torch.save({"model": dict(state)}, tmp_path / "flow" / "flow.pt")
    config = (ckpt / "flow" / "config.yaml").read_text().replace("    mel_dim: 80", "    mel_dim: !ref <num_mels>")
    (tmp_path / "flow" / "config.yaml").write_text("num_mels: 80\n" + config)
    other = load_flow(tmp_path / "flow")
    row = golden[0]
    mel, _ = other.token_to_mel(*_batch([row]), generators=_generators([row]))
    torch.testing.assert_close(mel[0], row["mel"], atol=MEL_ATOL, rtol=1e-4)

    (tmp_path / "flow" / "config.yaml").write_text(config.replace("remove_spkr_concat_condition: true",
                                                                  "remove_spkr_concat_condition: false"))
    with pytest.raises(ModelLoadError, match="do not match its config.yaml.*re-download"):
        load_flow(tmp_path / "flow")
