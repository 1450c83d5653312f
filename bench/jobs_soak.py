"""Soak test of durable jobs: a 1 000-line job with random bad lines, run through the server's JobManager while it
is randomly cancelled and resumed, its server "restarted" (a new JobManager on the same folder, as after a crash or
a deploy) and its status re-read by fresh readers (a browser reconnecting). At the end it checks, and prints:

- every non-blank line of the job file has exactly one record in results.jsonl, in line order;
- every ok line's WAV decodes (complete RIFF header, samples, last block readable) and has its sidecar;
- the lines that failed are exactly the bad lines planted in the file (plus the lines whose synthesis was made to
  fail), with a message; no temporary files or journal are left;
- the status seen by readers never went backwards within one run.

It prints figures (lines, bad lines, cancels, restarts, reconnects, resumed runs, lines synthesised more than
once, wall time) and exits 1 if any check fails.

Then (skip with ``--no-red-team``) the red-team phase (issue 25): the whole web server in this process behind a real
socket (``tests/composed_app.served_app``, the fake model), ``--calls`` gradio calls from browsers (500 by default),
most of them good ``/synthesize`` calls, mixed with the red team's inputs: server paths and other browsers' uploads
as file inputs, 1 MB texts (page API and ``/v1``), corrupt job files (binary, ``[]`` lines, truncated JSON, a
5,000-digit number, deep nesting), a corrupt ``job.json`` planted in a finished job, a full disk (ENOSPC simulated on
a share of the lines' audio writes and once on a record, the job then resumed: no tmpfs can be mounted here),
malformed cookies (another app's JSON cookie next to ours), and clients that leave mid-generation. It checks, and
prints: every bad input refused in words (4xx, or a gradio error with a message; never a 5xx or "internal error")
or recorded as a failed line; the server answers after every input; RSS growth over the calls (after a warm-up) under
5 %; every line of every job recorded exactly once.

The model is the test FakeAdapter (deterministic noise, ~ms per batch: the point is the job plumbing, not the
model); ``--tiny vibevoice`` runs a tiny random checkpoint of the real architecture instead (slower).

Usage: OMP_NUM_THREADS=1 python3 bench/jobs_soak.py [--lines 1000] [--seed 0] [--tiny FAMILY] [--keep DIR]
       [--calls 500] [--no-red-team]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DATA = REPO / "tests" / "data"
TEXTS = ["The quick brown fox jumps over the lazy dog.", "今天天气很好，我们一起去公园散步。",
         "Chapter seven begins with a letter.", "银行(yin2 hang2)九点开门。"]
# Kinds of bad line planted in the job, with what the failure message must mention.
BAD_KINDS = {
    "bad_json": ('{"input_text": "oops" "prompt_audio": "voices/a.wav"}', "bad JSON"),
    "no_text": ('{"prompt_audio": "voices/a.wav"}', "missing field 'input_text'"),
    "missing_audio": ('{"input_text": "Hi.", "prompt_audio": "voices/nobody.wav"}', "not found"),
    "not_audio": ('{"input_text": "Hi.", "prompt_audio": "voices/notes.wav"}', "is not audio"),
    "too_short": ('{"input_text": "Hi.", "prompt_audio": "voices/short.wav"}', "0.40 s long"),
    "control_chars": ('{"input_text": "Hi.", "prompt_audio": "voices\\\\new\\ta.wav"}', "control characters"),
    "bad_param": ('{"input_text": "Hi.", "prompt_audio": "voices/a.wav", "temperature": "hot"}', "temperature"),
    "engine_fails": (None, "EXPLODE"),  # valid line whose synthesis raises inside the model
}


def write_job(work: Path, num_lines: int, rng: random.Random, bad_share: float, *, real_model: bool = False
              ) -> tuple[Path, dict[int, str]]:
    """The job file (with a few blank lines) and {line number: planted problem kind}. For a real (tiny) model each
    line's decode steps are capped (a random model rarely stops by itself) and no model failure is planted (only
    the fake model has that switch)."""
    cap = {"max_new_tokens": 16} if real_model else {}
    kinds = [k for k in sorted(BAD_KINDS) if not (real_model and k == "engine_fails")]
    lines, planted = [], {}
    number = 0
    while len([x for x in lines if x.strip()]) < num_lines:
        number += 1
        if rng.random() < 0.01:
            lines.append("")  # blank lines have no record
            continue
        if rng.random() < bad_share:
            kind = rng.choice(kinds)
            planted[number] = kind
            if kind == "engine_fails":
                lines.append(json.dumps({"input_text": f"EXPLODE on line {number}.", "prompt_audio": "voices/a.wav",
                                         "output_name": f"line_{number:05d}"}))
            else:
                lines.append(BAD_KINDS[kind][0])
            continue
        lines.append(json.dumps({"input_text": f"{TEXTS[number % len(TEXTS)]} ({number})",
                                 "prompt_audio": "voices/a.wav" if number % 2 else "voices/b.wav",
                                 "output_name": f"line_{number:05d}", "seed": number, **cap}, ensure_ascii=False))
    path = work / "soak.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, planted


def write_voices_zip(work: Path) -> Path:
    path = work / "voices.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.write(DATA / "en_female_1.wav", "voices/a.wav")
        zf.write(DATA / "zh_male_1.wav", "voices/b.wav")
        zf.write(DATA / "en_male_1__too_short_0.4s.wav", "voices/short.wav")
        zf.writestr("voices/notes.wav", "these are notes, not a recording\n" * 8)
    return path


def make_runtime(tiny: str | None, work: Path):
    from tts_app.config import EngineConfig
    from tts_app.runtime import Runtime

    config = EngineConfig(max_batch_size=8, wait_window_ms=2.0)
    if tiny is None:
        from tests.fakes import FakeAdapter

        def fail_rows(rows):
            return RuntimeError("planted failure") if any("EXPLODE" in r.text for r in rows) else None

        return Runtime.from_adapter(FakeAdapter(samples_per_char=40, delay_s=0.002, raise_if=fail_rows), "fake",
                                    config)
    from bench.common import load_tiny_adapter

    return Runtime.from_adapter(load_tiny_adapter(tiny, work / "model"), f"tiny-{tiny}", config)


def soak(args: argparse.Namespace, work: Path) -> int:
    from tts_app.jobs.manager import JobManager
    from tts_app.jobs.results import JOURNAL_NAME, RESULTS_NAME, audio_decodes
    from tts_app.jobs.store import JobStore

    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    job_file, planted = write_job(work, args.lines, rng, args.bad_share, real_model=args.tiny is not None)
    voices = write_voices_zip(work)
    runtime = make_runtime(args.tiny, work)
    root = work / "outputs"
    counts = {"cancels": 0, "restarts": 0, "reconnects": 0, "runs": 1, "regressions": 0}
    started = time.perf_counter()
    try:
        manager = JobManager(JobStore(root), runtime)
        state = manager.submit(job_file, audio_zip=voices, settings={"seed": 0, "max_batch_size": 8})
        job_id = state.job_id
        seen_done = 0
        while True:
            time.sleep(rng.uniform(0.2, 1.5))
            # A reader that is not the job's manager (a browser reconnecting, another server process) reads the
            # job's folder: it may lag the live state by one save, never run ahead of it.
            fresh = JobStore(root).load(job_id)
            state = manager.get(job_id)
            counts["reconnects"] += 1
            if state.status == "done":
                break
            if fresh.status == state.status == "running" and fresh.num_done > state.num_done:
                counts["regressions"] += 1
            if state.status == "running":
                if state.num_done < seen_done:
                    counts["regressions"] += 1
                seen_done = state.num_done
            action = rng.random()
            if state.status in ("cancelled", "interrupted", "failed"):
                manager.resume(job_id)
                counts["runs"] += 1
                seen_done = 0
            elif action < 0.25:
                manager.cancel(job_id)
                manager.wait(job_id, timeout_s=120)
                counts["cancels"] += 1
            elif action < 0.45:
                manager.shutdown()  # the server stops (its job ends "interrupted") ...
                manager = JobManager(JobStore(root), runtime)  # ... and a new one starts on the same folder
                counts["restarts"] += 1
        elapsed = time.perf_counter() - started
        out = manager.store.out_dir(job_id)
        records = [json.loads(x) for x in (out / RESULTS_NAME).read_text(encoding="utf-8").splitlines()]
    finally:
        runtime.close()

    # ---- checks
    expected_lines = [n for n, text in enumerate(job_file.read_text(encoding="utf-8").split("\n")[:-1], start=1)
                      if text.strip()]
    problems = []
    if [r["line"] for r in records] != expected_lines:
        problems.append(f"results.jsonl lines {len(records)} != job lines {len(expected_lines)} (or out of order)")
    by_line = {r["line"]: r for r in records}
    ok = [r for r in records if r["status"] == "ok"]
    bad_wavs = [r["line"] for r in ok if not audio_decodes(out / r["audio_path"])
                or not (out / (r.get("metadata_path") or "missing")).is_file()]
    if bad_wavs:
        problems.append(f"{len(bad_wavs)} ok lines without a decodable WAV and its sidecar: {bad_wavs[:5]}")
    failed = {r["line"] for r in records if r["status"] == "failed"}
    if failed != set(planted):
        problems.append(f"failed lines differ from the planted ones: extra {sorted(failed - set(planted))[:5]}, "
                        f"missing {sorted(set(planted) - failed)[:5]}")
    for line, kind in planted.items():
        needle = BAD_KINDS[kind][1]
        error = (by_line.get(line) or {}).get("error") or ""
        if kind != "engine_fails" and needle not in error:
            problems.append(f"line {line} ({kind}): message {error!r} does not mention {needle!r}")
    if any(r["status"] == "cancelled" for r in records):
        problems.append("lines still cancelled after the final resume")
    leftovers = [p.name for p in out.iterdir() if p.name.endswith(".tmp") or p.name == JOURNAL_NAME]
    if leftovers:
        problems.append(f"files left behind: {leftovers[:5]}")
    if counts["regressions"]:
        problems.append(f"progress went backwards {counts['regressions']} times within a run")
    sidecar_seeds = {}
    for r in ok[:50]:
        sidecar_seeds[r["line"]] = json.loads((out / r["metadata_path"]).read_text())["generation"]["seed"]
    if any(seed != line for line, seed in sidecar_seeds.items()):
        problems.append("a line's sidecar does not carry its own seed")

    kinds = {}
    for kind in planted.values():
        kinds[kind] = kinds.get(kind, 0) + 1
    print(f"[soak] {len(expected_lines)} lines ({len(planted)} bad: "
          + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + ")")
    print(f"  {counts['runs']} runs: {counts['cancels']} cancels, {counts['restarts']} server restarts, "
          f"{counts['reconnects']} reconnecting reads; wall {elapsed:.1f} s ({len(expected_lines) / elapsed:.0f} "
          "lines/s overall)")
    print(f"  final: {len(ok)} ok, {len(failed)} failed, "
          f"{sum(r['status'] == 'cancelled' for r in records)} cancelled; records {len(records)} = lines "
          f"{len(expected_lines)}: {'yes' if len(records) == len(expected_lines) else 'NO'}")
    print(f"  every ok line's WAV decodes and has its sidecar: {'yes' if not bad_wavs else 'NO'}")
    print("  result: " + ("all checks passed" if not problems else "FAILED:\n    " + "\n    ".join(problems)))
    if args.keep:
        shutil.copytree(root, args.keep, dirs_exist_ok=True)
        print(f"  job folder copied to {args.keep}")
    return 0 if not problems else 1




# --------------------------------------------------------------------------------------------------- red team

#: Corrupt job files submitted through the page's API: {kind: bytes of the file}.
CORRUPT_JOBS = {
    "binary": bytes(range(256)) * 40,
    "list_lines": b'[]\n[1, 2]\n{"input_text": "Fine.", "prompt_audio": "a.wav"}\n',
    "truncated": b'{"input_text": "Cut sh',
    "huge_number": b'{"input_text": "Hi.", "prompt_audio": "a.wav", "seed": ' + b"9" * 5000 + b"}\n",
    "deep": b'{"input_text": "Hi.", "prompt_audio": "a.wav", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}\n",
    "empty": b"",
}


class _Door:
    """One browser on the served app: its cookie (or a malformed Cookie header holding it), gradio calls by name."""

    def __init__(self, url: str, cookie_header: str | None = None):
        import httpx

        from tts_app.server.sessions import COOKIE_NAME, new_browser_token, owner_key

        self.token = new_browser_token()
        self.owner = owner_key(self.token)
        header = cookie_header.replace("{token}", self.token) if cookie_header else f"{COOKIE_NAME}={self.token}"
        self.client = httpx.Client(base_url=url, headers={"cookie": header}, timeout=60)
        self._params: dict[str, list] = {}

    def upload(self, name: str, data: bytes) -> str:
        response = self.client.post("/gradio_api/upload", files={"files": (name, data)})
        response.raise_for_status()
        return response.json()[0]

    def data(self, api_name: str, given: dict) -> list:
        if api_name not in self._params:
            info = self.client.get("/gradio_api/info").json()["named_endpoints"]
            self._params[api_name] = info[f"/{api_name}"]["parameters"]
        return [given[p["parameter_name"]] if p["parameter_name"] in given else p.get("parameter_default")
                for p in self._params[api_name]]

    def call(self, api_name: str, given: dict, *, leave_early: bool = False) -> tuple[int, str, object]:
        """(HTTP status, "complete" | "error" | "left" | "refused", data or message) of one gradio call."""
        response = self.client.post(f"/gradio_api/call/{api_name}", json={"data": self.data(api_name, given)})
        if response.status_code != 200:
            return response.status_code, "refused", _detail(response)
        event_id = response.json()["event_id"]
        event, data = "", None
        with self.client.stream("GET", f"/gradio_api/call/{api_name}/{event_id}") as stream:
            for line in stream.iter_lines():
                if leave_early:
                    return 200, "left", None  # the first event (a heartbeat or progress) came: leave now
                if line.startswith("event: "):
                    event = line[len("event: "):]
                elif line.startswith("data: ") and event in ("complete", "error"):
                    data = json.loads(line[len("data: "):])
                    return 200, event, data
        return 200, event or "none", data


def _detail(response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text
    if isinstance(body, dict):
        error = body.get("error")
        return str(body.get("detail") or (error.get("message") if isinstance(error, dict) else error) or body)
    return str(body)


def red_team(args: argparse.Namespace, work: Path) -> int:
    import errno
    import threading

    import psutil

    from tests.composed_app import file_data, served_app
    from tts_app.jobs.results import RESULTS_NAME, ResultsWriter
    from tts_app.jobs.store import JobStore

    work.mkdir(parents=True, exist_ok=True)
    rng = random.Random(args.seed)
    os.environ["GRADIO_TEMP_DIR"] = str(work / "gradio")  # read when the gradio app is built
    process = psutil.Process()
    reference = (DATA / "en_female_1.wav").read_bytes()
    counts: dict[str, int] = {}
    problems: list[str] = []
    down = 0

    def refused_in_words(kind: str, status: int, event: str, message: object) -> None:
        counts[kind] = counts.get(kind, 0) + 1
        text = str(message or "")
        if status >= 500 or not text.strip() or "internal error" in text.lower() or event == "complete":
            problems.append(f"{kind}: not refused in words (HTTP {status}, {event}: {text[:120]!r})")

    import tts_app.outputs

    real_save, real_put = tts_app.outputs.save_outputs, ResultsWriter.put
    fail_writes = {"share": 0.0, "puts_left": 0}
    lock = threading.Lock()

    def flaky_save(path, *a, **k):  # a full disk under some of the lines' audio
        if fail_writes["share"] and rng.random() < fail_writes["share"]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(path, *a, **k)

    def flaky_put(self, record):  # ... and once under a record
        with lock:
            fail = fail_writes["puts_left"] == 1
            fail_writes["puts_left"] = max(0, fail_writes["puts_left"] - 1)
        if fail:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_put(self, record)

    tts_app.outputs.save_outputs, ResultsWriter.put = flaky_save, flaky_put
    started = time.perf_counter()
    try:
        from tts_app.config import ServerConfig

        with served_app(work / "out", ServerConfig(rate_limit_per_min=0)) as served:
            me, other = _Door(served.url), _Door(served.url)
            # another app's JSON cookie on the same host, before and after ours
            odd = _Door(served.url, 'prefs={"theme": "dark", "x": [1,2]}; tts_app_browser={token}; z="a;b')
            mine = me.upload("ref.wav", reference)
            theirs = other.upload("ref2.wav", reference[:1000] + bytes([reference[1000] ^ 1]) + reference[1001:])
            good = {"reference_audio": file_data(mine), "text": "Hello there, this is a soak.", "seed": 1}
            job_ids: list[str] = []

            def alive() -> bool:
                nonlocal down
                try:
                    ok = me.client.get("/v1/models").status_code < 500
                except Exception:  # noqa: BLE001 - a connection error is "down"
                    ok = False
                down += not ok
                return ok

            def submit(door: _Door, name: str, data: bytes, zip_data: bytes | None = None):
                given = {"jsonl_file": file_data(door.upload(name, data)), "max_batch_size": 4}
                if zip_data is not None:
                    given["audio_zip"] = file_data(door.upload("voices.zip", zip_data))
                return door.call("submit_job", given)

            voices_zip = work / "voices.zip"
            with zipfile.ZipFile(voices_zip, "w") as zf:
                zf.write(DATA / "en_female_1.wav", "a.wav")
            zip_bytes = voices_zip.read_bytes()
            warmup = max(1, args.calls // 10)
            rss_start = None
            for i in range(args.calls):
                if i == warmup:
                    import gc

                    gc.collect()
                    rss_start = process.memory_info().rss
                roll = rng.random()
                if i % 50 == 7:  # server paths and another browser's upload as file inputs
                    for path in ("/etc/hostname", str(REPO / "README.md"), theirs):
                        status, event, message = me.call("synthesize", {**good, "reference_audio": file_data(path)})
                        refused_in_words("server_path_or_other_owner", status, event, message)
                elif i % 50 == 17:  # 1 MB texts at the page's API and /v1
                    status, event, message = me.call("synthesize", {**good, "text": "a" * 1_000_000})
                    refused_in_words("1MB_text_page", status, event, message)
                    response = me.client.post("/v1/audio/speech", json={"model": "tts-1", "voice": "en-female-1",
                                                                        "input": "a" * 1_000_000})
                    refused_in_words("1MB_text_v1", response.status_code, "refused", _detail(response))
                elif i % 50 == 27:  # corrupt job files: refused at submit in words, or their lines failed
                    kind = sorted(CORRUPT_JOBS)[(i // 50) % len(CORRUPT_JOBS)]
                    status, event, message = submit(me, f"{kind}.jsonl", CORRUPT_JOBS[kind], zip_bytes)
                    counts[f"corrupt_job_{kind}"] = counts.get(f"corrupt_job_{kind}", 0) + 1
                    if event == "complete":
                        job_ids.append(message[0])
                    else:
                        refused_in_words(f"corrupt_job_{kind}", status, event, message)
                elif i % 50 == 37:  # a full disk under a job: some lines' audio, and once a record
                    lines = "".join(json.dumps({"input_text": f"Line {n} of a job.", "prompt_audio": "a.wav"}) + "\n"
                                    for n in range(12))
                    fail_writes["share"] = 0.3
                    fail_writes["puts_left"] = 5 if (i // 50) % 2 else 0
                    status, event, message = submit(odd, "full-disk.jsonl", lines.encode(), zip_bytes)
                    if event != "complete":
                        problems.append(f"full-disk job not started: {message}")
                    else:
                        job_ids.append(message[0])
                        served.ctx.jobs.wait(message[0], timeout_s=120)
                        fail_writes["share"], fail_writes["puts_left"] = 0.0, 0
                        state = served.ctx.jobs.get(message[0])
                        if state.status == "failed":  # stopped by the failed record: resume it, now with space
                            counts["full_disk_stops"] = counts.get("full_disk_stops", 0) + 1
                            status, event, message2 = odd.call("resume_job", {"job_id": message[0]})
                            if event != "complete":
                                problems.append(f"resume after a full disk refused: {message2}")
                            served.ctx.jobs.wait(message[0], timeout_s=120)
                        counts["full_disk_jobs"] = counts.get("full_disk_jobs", 0) + 1
                    fail_writes["share"], fail_writes["puts_left"] = 0.0, 0
                    # the malformed-cookie browser's job is its own: another browser cannot read it
                    if job_ids:
                        status, event, message = me.call("job_status", {"job_id": job_ids[-1]})
                        refused_in_words("other_browsers_job", status, event, message)
                elif i % 50 == 45 and job_ids:  # a corrupt job.json planted in a finished job
                    store = JobStore(served.ctx.output_root)
                    victim = job_ids[0]
                    served.ctx.jobs.wait(victim, timeout_s=120)
                    (store.folder(victim) / "job.json").write_bytes(b'{"job_id": "' + victim.encode() + b'", "st')
                    status, event, message = me.call("job_status", {"job_id": victim})
                    counts["corrupt_job_json"] = counts.get("corrupt_job_json", 0) + 1
                    if event == "complete" and message[0].get("status") != "damaged":
                        problems.append(f"a corrupt job.json is not shown as damaged: {message}")
                    job_ids.remove(victim)
                elif roll < 0.1:  # a client that leaves mid-generation
                    me.call("synthesize", {**good, "max_new_tokens": 1000}, leave_early=True)
                    counts["left_early"] = counts.get("left_early", 0) + 1
                else:
                    status, event, message = me.call("synthesize", {**good, "seed": i})
                    counts["good_calls"] = counts.get("good_calls", 0) + 1
                    if event != "complete":
                        problems.append(f"a good call failed: HTTP {status} {event} {str(message)[:120]}")
                if not alive():
                    problems.append(f"the server did not answer after call {i}")
            engine = served.ctx.runtime.engine
            deadline = time.monotonic() + 60
            while engine.stats().num_requests_active and time.monotonic() < deadline:
                time.sleep(0.1)
            import gc

            gc.collect()
            rss_end = process.memory_info().rss
            # every line of every job recorded exactly once
            store = JobStore(served.ctx.output_root)
            checked_jobs = 0
            for job_id in job_ids:
                served.ctx.jobs.wait(job_id, timeout_s=120)
                state = store.load(job_id)
                job_lines = [n for n, text in enumerate(store.job_file(job_id).read_bytes().split(b"\n"), start=1)
                             if text.strip()]
                results = store.out_dir(job_id) / RESULTS_NAME
                records = [json.loads(x) for x in results.read_text(encoding="utf-8").splitlines()] \
                    if results.is_file() else []
                if state.status == "failed" and not records:
                    if not state.error:
                        problems.append(f"job {job_id} failed without a message")
                    continue  # refused as a whole, in words (its file could not be read)
                checked_jobs += 1
                if [r["line"] for r in records] != job_lines:
                    problems.append(f"job {job_id} ({state.input_name}): records {[r['line'] for r in records]} "
                                    f"!= lines {job_lines}")
                for r in records:
                    if r["status"] == "failed" and not (r.get("error") or "").strip():
                        problems.append(f"job {job_id} line {r['line']} failed without a message")
            active = engine.stats().num_requests_active
            if active:
                problems.append(f"{active} engine requests still active at the end")
    finally:
        tts_app.outputs.save_outputs, ResultsWriter.put = real_save, real_put
    elapsed = time.perf_counter() - started
    growth = (rss_end - rss_start) / rss_start
    if growth >= 0.05:
        problems.append(f"RSS grew {growth:.1%} over the calls (limit 5 %)")
    if down:
        problems.append(f"the server was down {down} times")
    load = os.getloadavg()
    print(f"[red team] {args.calls} gradio calls in {elapsed:.1f} s (load average {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}): " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print(f"  RSS after {warmup} warm-up calls {rss_start / 1e6:.1f} MB, after all {rss_end / 1e6:.1f} MB: growth "
          f"{growth:+.2%} ({(rss_end - rss_start) / max(1, args.calls - warmup) / 1e3:+.1f} KB per call)")
    print(f"  server down after a call: {down} times; jobs checked line by line: {checked_jobs} (every line recorded "
          f"exactly once: {'yes' if not any('records' in p for p in problems) else 'NO'})")
    print("  result: " + ("all checks passed" if not problems else "FAILED:\n    " + "\n    ".join(problems[:20])))
    return 0 if not problems else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1000, help="non-blank lines in the job (default 1000)")
    parser.add_argument("--bad-share", type=float, default=0.08, help="share of bad lines (default 0.08)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random job, cancels and restarts")
    parser.add_argument("--tiny", default=None, metavar="FAMILY",
                        help="run a tiny random checkpoint of this family instead of the fake model")
    parser.add_argument("--keep", default=None, metavar="DIR", help="copy the job folder here at the end")
    parser.add_argument("--calls", type=int, default=500, help="gradio calls of the red-team phase (default 500)")
    parser.add_argument("--no-red-team", action="store_true", help="skip the red-team phase")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jobs_soak_") as tmp:
        status = soak(args, Path(tmp) / "soak") if args.lines > 0 else 0
        if not args.no_red_team:
            status = max(status, red_team(args, Path(tmp) / "red-team"))
        return status


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import logging

    # The planted model failures are logged with tracebacks by the engine (as any unexpected error is); the soak
    # counts them in its own summary instead.
    logging.basicConfig(level=logging.CRITICAL)
    import torch

    torch.set_num_threads(1)
    sys.exit(main())
