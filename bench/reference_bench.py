"""Seconds to clean 30 s of reference audio (decode excluded and included), printed, not asserted.

Usage: OMP_NUM_THREADS=1 python bench/reference_bench.py [--repeats N] [--seconds S]

The input is the first S seconds of tests/data/en_female_1__long_45s.wav (real speech with pauses, 24 kHz). Each
stage is timed separately so a slow run shows where the time goes. Wall time and process CPU time are both
printed: on a shared machine the CPU time is the steadier number.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "en_female_1__long_45s.wav"


def stage_timings(seconds: float = 30.0, repeats: int = 5, sampling_rate: int = 24000) -> tuple[float, dict]:
    """Median wall and CPU seconds of each cleanup stage on the first ``seconds`` of the long test clip.

    Returns (audio seconds, ``{stage label: (wall_s, cpu_s)}``); a warm-up call (Silero model load) comes first.
    """
    import soundfile as sf
    import torch
    import torchaudio.functional as AF

    from tts_app.audio.decode import load_audio
    from tts_app.audio.post import encode_wav
    from tts_app.audio.reference import prepare_reference
    from tts_app.audio.vad import speech_probabilities

    samples, rate = sf.read(DATA, dtype="float32")
    clip = samples[: int(seconds * rate)]
    wav_bytes = encode_wav(clip, rate)
    audio_s = len(clip) / rate
    prepare_reference((clip, rate), target_sampling_rate=sampling_rate)  # warm-up: model load, JIT profiling

    def timed(fn) -> tuple[float, float]:
        walls, cpus = [], []
        for _ in range(repeats):
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
        return statistics.median(walls), statistics.median(cpus)

    wave = torch.from_numpy(clip)
    wave_16k = AF.resample(wave, rate, 16000).numpy()
    stages = {
        "decode WAV bytes": lambda: load_audio(wav_bytes),
        "high-pass 50 Hz": lambda: AF.highpass_biquad(wave * 0.5, rate, 50.0),
        f"resample {rate} -> 16000 Hz": lambda: AF.resample(wave, rate, 16000),
        "Silero VAD probabilities": lambda: speech_probabilities(wave_16k),
        "prepare_reference (array)": lambda: prepare_reference((clip, rate), target_sampling_rate=sampling_rate),
        "prepare_reference (WAV bytes)": lambda: prepare_reference(wav_bytes, target_sampling_rate=sampling_rate),
    }
    return audio_s, {label: timed(fn) for label, fn in stages.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--sampling-rate", type=int, default=24000, help="target sampling rate (Hz)")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(1)
    audio_s, timings = stage_timings(args.seconds, args.repeats, args.sampling_rate)
    print(f"reference bench: {audio_s:.1f} s of speech audio at 24000 Hz -> {args.sampling_rate} Hz, "
          f"torch threads {torch.get_num_threads()}, median of {args.repeats}")
    print(f"{'stage':34s} {'wall s':>8s} {'cpu s':>8s} {'x real time':>12s}")
    for label, (wall, cpu) in timings.items():
        print(f"{label:34s} {wall:8.3f} {cpu:8.3f} {audio_s / max(wall, 1e-9):11.0f}x")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average (1 min) during the run: {load:.1f} on {os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
