"""The HTTP API under load: N concurrent ``POST /v1/audio/speech`` clients vs the same requests one after another,
against the real launched app (``python app.py``) on a tiny random checkpoint.

    python3 bench/api_bench.py                         # vibevoice, 16 requests, 4 clients
    python3 bench/api_bench.py --family csm --requests 24 --clients 8 --json api.json

Both runs send the same requests (the same texts, voices and seeds, so the same audio is made) to the same server,
sequential first, then from ``--clients`` threads at once. Printed side by side: wall time, audio seconds per wall
second, the throughput ratio concurrent / sequential (the engine batches the concurrent requests together), and
the p50 / p95 latency of a request in each run. Then the same requests one after another again, streamed
(``stream_format: "audio"``): p50 time to the first response byte streamed vs answered whole (the sequential run),
side by side. Tiny models: the ratios show the plumbing (batching across HTTP clients, streaming), not a real
model's speed. No thresholds.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

TEXTS = ("Hello there.", "The morning train was late again.", "She finished a chapter of her book.",
         "今天天气很好。", "我们一起去公园散步吧。", "Please leave the office before nine tonight.",
         "银行门口排起了长队。", "A lazy dog sleeps near the river bank at dawn.")
VOICES = ("en-female", "en-male", "zh-female", "zh-male")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) by linear interpolation between closest ranks (numpy's default method)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def start_app(model_dir: Path, port: int, max_batch_size: int, log_path: Path) -> subprocess.Popen:
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               PYTHONUNBUFFERED="1")
    cmd = [sys.executable, str(REPO_ROOT / "app.py"), "--model", str(model_dir), "--device", "cpu", "--port",
           str(port), "--host", "127.0.0.1", "--rate-limit", "0", "--max-batch-size", str(max_batch_size),
           "--max-queue-depth", "1000"]
    return subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)


def wait_ready(url: str, proc: subprocess.Popen, log_path: Path, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the app exited: {log_path.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(f"{url}/v1/models", timeout=5)
            return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"the app did not load the model in {timeout_s:.0f} s")


def speech(url: str, index: int, stream: bool = False) -> tuple[float, float, float]:
    """One request (``index`` picks text, voice and seed; ``stream``: ``stream_format: "audio"``): (time to the
    first response byte s, latency s, audio s)."""
    body = {"model": "tts-1", "input": TEXTS[index % len(TEXTS)], "voice": VOICES[index % len(VOICES)],
            "response_format": "pcm", "seed": index, **({"stream_format": "audio"} if stream else {})}
    request = urllib.request.Request(f"{url}/v1/audio/speech", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=600) as response:
        data = response.read(1)
        first_byte_s = time.perf_counter() - started
        data += response.read()
        rate = int(response.headers["X-Sampling-Rate"])
    return first_byte_s, time.perf_counter() - started, len(data) / 2 / rate


def run(url: str, num_requests: int, clients: int, stream: bool = False) -> dict:
    """Send requests 0..n-1 from ``clients`` threads (1 = one after another)."""
    latencies: list[float] = [0.0] * num_requests
    first_bytes: list[float] = [0.0] * num_requests
    audio: list[float] = [0.0] * num_requests
    lock = threading.Lock()

    def one(i: int) -> None:
        first_byte_s, latency, seconds = speech(url, i, stream)
        with lock:
            first_bytes[i], latencies[i], audio[i] = first_byte_s, latency, seconds

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(one, range(num_requests)))
    wall_s = time.perf_counter() - started
    return {"clients": clients, "requests": num_requests, "wall_s": wall_s, "audio_s": sum(audio),
            "audio_s_per_wall_s": sum(audio) / wall_s, "p50_latency_s": percentile(latencies, 0.5),
            "p95_latency_s": percentile(latencies, 0.95), "p50_first_byte_s": percentile(first_bytes, 0.5)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="vibevoice", help="tiny checkpoint family (default vibevoice)")
    parser.add_argument("--requests", type=int, default=16, help="requests per run (default 16)")
    parser.add_argument("--clients", type=int, default=4, help="concurrent clients (default 4)")
    parser.add_argument("--max-batch-size", type=int, default=8, help="the server's --max-batch-size (default 8)")
    parser.add_argument("--json", default=None, metavar="OUT", help="also write the numbers as JSON")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    from tts_app.adapters import adapter_class

    with tempfile.TemporaryDirectory(prefix="api_bench_") as tmp:
        model_dir = Path(tmp) / f"tiny-{args.family}"
        adapter_class(args.family).make_tiny_checkpoint(model_dir)
        port = free_port()
        log_path = Path(tmp) / "app.log"
        proc = start_app(model_dir, port, args.max_batch_size, log_path)
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, proc, log_path)
            for i in range(min(len(VOICES), args.requests)):  # warm-up: every voice cleaned once, code paths hot
                speech(url, i)
            sequential = run(url, args.requests, 1)
            concurrent = run(url, args.requests, args.clients)
            streamed = run(url, args.requests, 1, stream=True)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
    ratio = concurrent["audio_s_per_wall_s"] / sequential["audio_s_per_wall_s"]
    first_byte_ratio = streamed["p50_first_byte_s"] / sequential["p50_first_byte_s"]
    print(f"api: {args.requests} POST /v1/audio/speech (pcm), tiny {args.family}, server --max-batch-size "
          f"{args.max_batch_size}")
    print(f"{'run':<14}{'clients':>8}{'wall s':>9}{'audio s/wall s':>16}{'p50 s':>8}{'p95 s':>8}"
          f"{'p50 first byte s':>18}")
    for name, row in (("sequential", sequential), ("concurrent", concurrent), ("streamed", streamed)):
        print(f"{name:<14}{row['clients']:>8}{row['wall_s']:>9.2f}{row['audio_s_per_wall_s']:>16.2f}"
              f"{row['p50_latency_s']:>8.2f}{row['p95_latency_s']:>8.2f}{row['p50_first_byte_s']:>18.3f}")
    print(f"summary: throughput x{ratio:.2f} with {args.clients} concurrent clients vs sequential; p50 "
          f"{sequential['p50_latency_s']:.2f} -> {concurrent['p50_latency_s']:.2f} s, p95 "
          f"{sequential['p95_latency_s']:.2f} -> {concurrent['p95_latency_s']:.2f} s; streamed: p50 first byte "
          f"{sequential['p50_first_byte_s']:.3f} -> {streamed['p50_first_byte_s']:.3f} s (x{first_byte_ratio:.2f})")
    if args.json:
        numbers = {"family": args.family, "sequential": sequential, "concurrent": concurrent, "streamed": streamed,
                   "throughput_ratio": ratio, "first_byte_ratio": first_byte_ratio}
        Path(args.json).write_text(json.dumps(numbers, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
