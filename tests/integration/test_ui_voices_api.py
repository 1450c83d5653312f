"""Voice library through the web app's API (gradio_client): save, list, synthesize with a voice, rename, delete;
a saved voice survives a restart of the app and gives the same audio as uploading its file."""

from __future__ import annotations

import hashlib
import json

import pytest

from tests.ui_app import start_app, stop_app

gradio_client = pytest.importorskip("gradio_client")


def _audio_sha(path: str) -> str:
    import soundfile as sf

    data, _ = sf.read(path, dtype="int16")
    return hashlib.sha256(data.tobytes()).hexdigest()


def test_saved_voice_survives_a_restart_and_equals_the_upload(tiny_checkpoint, tmp_path, data_dir):
    model = tiny_checkpoint("vibevoice")
    clip = gradio_client.handle_file(str(data_dir / "zh_female_1.wav"))
    args = ("--output-dir", str(tmp_path / "out"))
    proc, url = start_app(model, *args)
    try:
        client = gradio_client.Client(url, verbose=False)
        choices, status = client.predict(clip, "银行门口排起了长队。", "Mei", api_name="/save_voice")
        assert "Mei" in status
        names = [v["name"] for v in client.predict(api_name="/list_voices")]
        assert "Mei" in names and "en-female" in names
        uploaded = client.predict(clip, "你好。", seed=5, max_new_tokens=16, api_name="/synthesize")
    finally:
        stop_app(proc)

    proc, url = start_app(model, *args)  # a restart: new process, same output folder
    try:
        client = gradio_client.Client(url, verbose=False)
        assert "Mei" in [v["name"] for v in client.predict(api_name="/list_voices")]
        by_voice = client.predict(None, "你好。", seed=5, max_new_tokens=16, voice="Mei", api_name="/synthesize")
        assert _audio_sha(by_voice[0]) == _audio_sha(uploaded[0])
        sidecar = json.loads(open(by_voice[2], encoding="utf-8").read())
        assert sidecar["reference"]["voice"] == "Mei" and sidecar["reference"]["text"] == "银行门口排起了长队。"
        client.predict("Mei", "梅", api_name="/rename_voice")
        client.predict("梅", api_name="/delete_voice")
        assert "梅" not in [v["name"] for v in client.predict(api_name="/list_voices")]
        with pytest.raises(Exception, match="no voice named 'Mei'"):
            client.predict(None, "你好。", voice="Mei", api_name="/synthesize")
    finally:
        stop_app(proc)
