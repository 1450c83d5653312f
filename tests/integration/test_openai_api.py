"""The OpenAI-compatible API with the official ``openai`` client against the launched app (tiny VibeVoice), plus
the server's address, the web page's log-in, /metrics on the same server and streamed speech."""

from __future__ import annotations

import base64
import io
import os
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import soundfile as sf

from tests.ui_app import start_app, stop_app

openai = pytest.importorskip("openai")

KEY = "sk-integration-test"
TEXT = "Hello there. This is a test."


@pytest.fixture(scope="module")
def app_url(tiny_checkpoint, tmp_path_factory):
    out = tmp_path_factory.mktemp("api-out")
    proc, url = start_app(tiny_checkpoint("vibevoice"), "--output-dir", str(out), "--api-key", KEY,
                          "--rate-limit", "0")
    yield url
    stop_app(proc)


@pytest.fixture()
def client(app_url):
    return openai.OpenAI(base_url=f"{app_url}v1", api_key=KEY, max_retries=0, timeout=300)


def scrape(url: str, key: str | None = None, headers: dict | None = None) -> dict:
    """The server's /metrics as {(sample name, sorted labels): value} (prometheus_client's own parser); ``key``: an
    API key, ``headers``: other credentials."""
    from prometheus_client.parser import text_string_to_metric_families

    headers = {"Authorization": f"Bearer {key}"} if key else dict(headers or {})
    text = urllib.request.urlopen(urllib.request.Request(f"{url}metrics", headers=headers), timeout=30).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def speak(client, fmt: str, **kw) -> bytes:
    return client.audio.speech.create(model="tts-1", voice="en-female", input=TEXT, response_format=fmt,
                                      **kw).content


def test_every_format_decodes_to_the_same_speech(client):
    from tts_app.audio.formats import decode_audio

    pcm = np.frombuffer(speak(client, "pcm"), dtype="<i2").astype(np.float32) / 32768.0
    wav, wav_rate = sf.read(io.BytesIO(speak(client, "wav")), dtype="float32")
    flac, flac_rate = sf.read(io.BytesIO(speak(client, "flac")), dtype="float32")
    assert wav_rate == flac_rate == 24000
    assert pcm.size > 0 and np.abs(pcm).max() > 0
    # lossless formats hold the same 16-bit samples (libsndfile rounds float -> int16 for FLAC one step apart from
    # WAV on some samples: at most 1 LSB)
    np.testing.assert_array_equal(wav, pcm)
    assert flac.shape == pcm.shape and np.abs(flac - pcm).max() <= 1 / 32768
    for fmt in ("mp3", "opus"):
        audio, rate = decode_audio(speak(client, fmt))
        assert rate in (24000, 48000), fmt
        seconds = audio.size / rate
        assert abs(seconds - pcm.size / 24000) < 0.1, fmt  # lossy codecs pad a few ms
        assert np.abs(audio).max() > 0, fmt


def test_unknown_voice_is_404_listing_the_voices(client):
    with pytest.raises(openai.NotFoundError) as err:
        client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT)
    assert "en-female" in str(err.value) and "alloy" in str(err.value)


def test_over_long_input_is_413(client):
    with pytest.raises(openai.APIStatusError) as err:
        client.audio.speech.create(model="tts-1", voice="en-female", input="word " * 4001)
    assert err.value.status_code == 413
    assert "20000" in str(err.value)  # tts_app.config.REQUEST_LIMITS.max_text_chars, the limit of every door


def test_missing_or_wrong_key_is_401(app_url):
    for key in ("wrong-key", "sk-" + KEY):
        bad = openai.OpenAI(base_url=f"{app_url}v1", api_key=key, max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            bad.audio.speech.create(model="tts-1", voice="en-female", input=TEXT)
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
    request = urllib.request.Request(f"{app_url}v1/models")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=30)
    assert err.value.code == 401


def test_models_and_voices(client, data_dir):
    models = client.models.list()
    assert models.data[0].id.startswith("tiny-vibevoice")  # the folder's name, not the server's path
    assert "/" not in models.data[0].id and models.data[0].family == "vibevoice"
    created = client.audio.voices.create(name="Tester", audio_sample=open(data_dir / "en_male_1.wav", "rb"),
                                         consent="none")
    assert created.name == "Tester" and created.id == "Tester"
    audio = client.audio.speech.create(model="tts-1", voice="Tester", input=TEXT, response_format="wav").content
    assert sf.info(io.BytesIO(audio)).frames > 0
    listed = client.get("/audio/voices", cast_to=object)
    assert "Tester" in [v["id"] for v in listed["data"]]
    assert client.audio.voices.delete("Tester").deleted


def test_metrics_on_the_same_server(app_url, client):
    before = scrape(app_url, KEY)
    speak(client, "pcm")
    after = scrape(app_url, KEY)
    key = ("tts_request_duration_seconds_count", (("endpoint", "POST /v1/audio/speech"), ("outcome", "ok")))
    assert after[key] == before.get(key, 0) + 1
    assert after[("tts_model_loaded", ())] == 1
    assert after[("tts_model_load_seconds", ())] > 0


#: HTTP Basic for second_app's log-in (mei:s3cret)
LOGIN = {"Authorization": "Basic " + base64.b64encode(b"mei:s3cret").decode()}


@pytest.fixture(scope="module")
def second_app(tiny_checkpoint, tmp_path_factory):
    """An app started with no --host, GRADIO_SERVER_NAME=127.0.0.2 and a web log-in from TTS_APP_AUTH (no API key:
    the API takes the same log-in, as HTTP Basic, ``LOGIN``), each decode step slowed to 100 ms (a testing aid) so a
    streamed request lasts seconds on any machine."""
    out = tmp_path_factory.mktemp("api-out-2")
    env = {"GRADIO_SERVER_NAME": "127.0.0.2", "TTS_APP_AUTH": "mei:s3cret"}
    proc, url = start_app(tiny_checkpoint("vibevoice"), "--output-dir", str(out), "--simulate-step-delay-ms", "100",
                          host=None, env=env)
    yield url
    stop_app(proc)


def test_app_binds_the_address_from_gradio_server_name(second_app):
    assert second_app.startswith("http://127.0.0.2:")
    port = second_app.rsplit(":", 1)[1].strip("/")
    voices = urllib.request.Request(f"{second_app}v1/audio/voices", headers=LOGIN)
    assert urllib.request.urlopen(voices, timeout=30).status == 200
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/audio/voices", timeout=5)


def test_web_page_needs_its_login(second_app, data_dir):
    gradio_client = pytest.importorskip("gradio_client")
    with pytest.raises(Exception):
        gradio_client.Client(second_app, verbose=False)
    client = gradio_client.Client(second_app, auth=("mei", "s3cret"), verbose=False)
    _, report = client.predict(gradio_client.handle_file(str(data_dir / "en_female_1.wav")),
                               api_name="/reference_report")
    assert report
    # the HTTP API is behind the same log-in (no API key is set), e.g. as HTTP Basic
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"{second_app}v1/models", timeout=30)
    assert err.value.code == 401
    assert urllib.request.urlopen(urllib.request.Request(f"{second_app}v1/models", headers=LOGIN),
                                  timeout=30).status == 200


def test_env_is_documented_in_launch_help():
    import subprocess
    import sys

    from tests.ui_app import ROOT

    out = subprocess.run([sys.executable, str(ROOT / "app.py"), "--help"], capture_output=True, text=True,
                         env=dict(os.environ, GRADIO_ANALYTICS_ENABLED="False"), timeout=120).stdout
    for word in ("GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT", "TTS_APP_API_KEY", "--api-key", "--auth"):
        assert word in out, word


def test_another_browser_cannot_fetch_my_files(app_url, data_dir):
    """A file the page made for one browser is served to that browser only: another browser (its own cookie) or a
    client without the cookie gets 403, even with the file's exact URL."""
    import httpx

    gradio_client = pytest.importorskip("gradio_client")
    slow = {"timeout": 120}  # a busy shared CPU
    # two browsers, each logged in on the page's form (with --api-key alone: any user name, the key as password)
    mine = gradio_client.Client(app_url, auth=("mine", KEY), verbose=False, download_files=False,
                                httpx_kwargs=slow)
    theirs = gradio_client.Client(app_url, auth=("theirs", KEY), verbose=False, download_files=False,
                                  httpx_kwargs=slow)
    audio, *_ = mine.predict(gradio_client.handle_file(str(data_dir / "en_female_1.wav")), "Hello.",
                             max_new_tokens=16, api_name="/synthesize")
    url = audio["url"]
    assert "/single/" in audio["path"]  # served from the browser's own folder, not copied to gradio's shared cache
    mine_response = httpx.get(url, cookies=mine.cookies, **slow)
    assert mine_response.status_code == 200 and mine_response.content[:4] == b"RIFF"
    assert httpx.get(url, cookies=theirs.cookies, **slow).status_code == 403
    assert httpx.get(url, **slow).status_code == 401  # not logged in at all
    # the same file asked for through another spelling of its path is refused too
    folder, name = audio["path"].rsplit("/", 1)
    sneaky = f"{app_url}gradio_api/file={folder}/../{folder.rsplit('/', 1)[1]}/{name}"
    assert httpx.get(sneaky, cookies=theirs.cookies, **slow).status_code == 403
    assert httpx.get(f"{app_url}gradio_api/file/{audio['path']}", cookies=theirs.cookies, **slow).status_code == 403
    # the cleaned reference clip its player shows, and the upload it came from (gradio's cache, a content-hash URL)
    clean, _report = mine.predict(gradio_client.handle_file(str(data_dir / "zh_female_1.wav")),
                                  api_name="/reference_report")
    assert "/single/" in clean["path"] and "/references/" in clean["path"]
    assert httpx.get(clean["url"], cookies=mine.cookies, **slow).status_code == 200
    assert httpx.get(clean["url"], cookies=theirs.cookies, **slow).status_code == 403
    uploaded = httpx.post(f"{app_url}gradio_api/upload", cookies=mine.cookies, **slow,
                          files={"files": ("voice.wav", (data_dir / "zh_female_1.wav").read_bytes())}).json()[0]
    upload_url = f"{app_url}gradio_api/file={uploaded}"
    assert httpx.get(upload_url, cookies=mine.cookies, **slow).status_code == 200
    assert httpx.get(upload_url, cookies=theirs.cookies, **slow).status_code == 403



STORY = "The first sentence comes out at once. A second one follows it. Then a third sentence ends the story."
SPEECH_ENDPOINT = (("endpoint", "POST /v1/audio/speech"),)


def test_streamed_speech_arrives_while_decoding_and_is_the_same_audio(second_app):
    """stream_format "audio" with the official client's streaming read: the first bytes come while the server is
    still decoding the request, the pieces are the bytes of the answer without streaming (same seed), a streamed
    WAV holds the same samples, and tts_time_to_first_audio_seconds records when the first audio left."""
    client = openai.OpenAI(base_url=f"{second_app}v1", api_key="unused", max_retries=0, timeout=300,
                           default_headers=LOGIN)
    ask = {"model": "tts-1", "voice": "en-female", "input": STORY, "extra_body": {"seed": 3}}
    before = scrape(second_app, headers=LOGIN)
    pieces: list[bytes] = []
    started = time.perf_counter()
    with client.audio.speech.with_streaming_response.create(response_format="pcm", stream_format="audio",
                                                           **ask) as response:
        assert response.headers["x-tts-stream"] == "chunked"
        for piece in response.iter_bytes():
            if not pieces:
                first_s = time.perf_counter() - started
                active_at_first = scrape(second_app, headers=LOGIN)[("tts_requests_active", ())]
            pieces.append(piece)
    after = scrape(second_app, headers=LOGIN)
    assert active_at_first >= 1, "the first audio came only after the request had finished"
    assert len(pieces) > 1
    whole = client.audio.speech.create(response_format="pcm", **ask).content
    assert b"".join(pieces) == whole
    count = ("tts_time_to_first_audio_seconds_count", (("entry_point", "api"),))
    total = ("tts_time_to_first_audio_seconds_sum", (("entry_point", "api"),))
    assert after[count] == before.get(count, 0) + 1
    # the server's time to first audio is when the first bytes left (the client got them after that), not the end
    assert after[total] - before.get(total, 0) <= first_s
    with client.audio.speech.with_streaming_response.create(response_format="wav", stream_format="audio",
                                                           **ask) as response:
        wav = response.read()
    samples, rate = sf.read(io.BytesIO(wav), dtype="int16")
    assert rate == 24000
    np.testing.assert_array_equal(samples, np.frombuffer(whole, dtype="<i2"))


def test_a_streaming_client_that_leaves_cancels_only_its_own_request(second_app):
    """A client that closes a streamed answer after its first audio: its request is cancelled in the engine (the
    requests counter's "cancelled", the endpoint's "disconnected" outcome), and a request decoding beside it
    finishes with the same audio as when it ran alone."""
    client = openai.OpenAI(base_url=f"{second_app}v1", api_key="unused", max_retries=0, timeout=300,
                           default_headers=LOGIN)
    other = {"model": "tts-1", "voice": "en-male", "input": "Another listener waits for this one.",
             "response_format": "pcm", "extra_body": {"seed": 9}}
    alone = client.audio.speech.create(**other).content
    before = scrape(second_app, headers=LOGIN)
    beside: list[bytes] = []
    worker = threading.Thread(target=lambda: beside.append(client.audio.speech.create(**other).content))
    with client.audio.speech.with_streaming_response.create(model="tts-1", voice="en-female", input=STORY * 2,
                                                           response_format="pcm", stream_format="audio") as response:
        worker.start()
        assert next(response.iter_bytes())  # the first audio; then the client goes away mid-stream
    cancelled = ("tts_requests_total", (("outcome", "cancelled"),))
    gone = ("tts_request_duration_seconds_count", (*SPEECH_ENDPOINT, ("outcome", "disconnected")))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and scrape(second_app, headers=LOGIN).get(gone, 0) == before.get(gone, 0):
        time.sleep(0.25)
    worker.join(300)
    after = scrape(second_app, headers=LOGIN)
    assert after[cancelled] == before.get(cancelled, 0) + 1
    assert after[gone] == before.get(gone, 0) + 1
    assert beside == [alone]


def test_an_api_key_owns_the_jobs_it_submits(app_url, data_dir, tmp_path):
    """A script with the API key sees its jobs from any client (any cookie); a browser does not."""
    import json
    import re

    gradio_client = pytest.importorskip("gradio_client")
    jsonl = tmp_path / "job.jsonl"
    jsonl.write_text(json.dumps({"input_text": "Hello.", "max_new_tokens": 12}) + "\n", encoding="utf-8")
    bearer = {"Authorization": f"Bearer {KEY}"}
    slow = {"timeout": 120}
    script = gradio_client.Client(app_url, verbose=False, headers=bearer, httpx_kwargs=slow)
    returned = script.predict(gradio_client.handle_file(str(jsonl)), api_name="/submit_job")
    job_id = next(x for x in returned if isinstance(x, str) and re.match(r"^\d{8}-\d{6}-[0-9a-f]{8}$", x))
    again = gradio_client.Client(app_url, verbose=False, headers=bearer, httpx_kwargs=slow)  # a new cookie
    assert again.predict(job_id, api_name="/job_status")["job_id"] == job_id
    with pytest.raises(Exception, match="belongs to another browser"):  # a browser logged in on the page's form
        gradio_client.Client(app_url, auth=("someone", KEY), verbose=False,
                             httpx_kwargs=slow).predict(job_id, api_name="/job_status")
    with pytest.raises(Exception, match="credentials were not provided"):  # --api-key guards gradio's API too
        gradio_client.Client(app_url, verbose=False, httpx_kwargs=slow)
