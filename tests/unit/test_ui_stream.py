"""The Single tab's streaming handler: live WAV pieces while the engine decodes, then the same files as /synthesize;
the pieces hold exactly the samples of the final WAV."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf

from tests.fakes import FakeStepAdapter, fake_facts
from tts_app.config import EngineConfig, ModelConfig
from tts_app.runtime import Runtime


@pytest.fixture()
def ctx(tmp_path):
    from tts_app.ui.context import AppContext, AppSettings

    runtime = Runtime.from_adapter(FakeStepAdapter(fake_facts(max_segment_chars=30), step_delay_s=0.001),
                                   "fake-model", EngineConfig(wait_window_ms=0.0))
    context = AppContext(AppSettings(model_config=ModelConfig("fake-model"), engine_config=EngineConfig(),
                                     output_root=tmp_path), runtime=runtime)
    yield context
    context.close()


def test_streamed_pieces_are_the_samples_of_the_final_wav(ctx, data_dir):
    import gradio as gr

    from tts_app.ui import handlers

    text = "The first sentence is here. A second one follows it. And then a third one ends."
    outputs = list(handlers.synthesize_stream(ctx, str(data_dir / "en_female_1.wav"), text, seed=4,
                                              progress=lambda *a, **k: None))
    *pieces, final = outputs
    assert len(pieces) >= 2 and all(isinstance(p[0], bytes) for p in pieces)
    assert all(isinstance(v, dict) and v.get("__type__") == "update" for p in pieces for v in p[1:])  # gr.skip()
    assert final[0] == gr.skip()
    audio_path, srt, metadata, table, seed = final[1:]
    assert seed == 4 and len(table) == 3
    streamed = np.concatenate([sf.read(io.BytesIO(p[0]), dtype="int16")[0] for p in pieces])
    whole, rate = sf.read(audio_path, dtype="int16")
    assert rate == ctx.engine.sampling_rate
    np.testing.assert_array_equal(streamed, whole)
    # the non-streaming API gives the same audio for the same inputs
    again = handlers.synthesize(ctx, str(data_dir / "en_female_1.wav"), text, seed=4, progress=lambda *a, **k: None)
    np.testing.assert_array_equal(sf.read(again[0], dtype="int16")[0], whole)
