"""Segment context on the tiny CSM and Higgs Audio v2 checkpoints, through the engine (issue 29 item 4): the next
segment's model input is the family's long-form input with the previous segment in it, built independently here
the way the upstream tool builds it (Sesame's generator context turns through the CSM processor; Boson AI's
``examples/generation.py`` chat with the previous chunk's audio tokens through the Higgs processor); with the
setting off every segment's audio is what it is generated alone, as before."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tts_app.adapters.base import AdapterRow
from tts_app.config import EngineConfig
from tts_app.engine import Engine
from tts_app.request import ReferenceAudio, RequestStatus, SynthesisParams, SynthesisRequest

TEXT = "Hello there my friend. See you again soon."
SEGMENTS = ["Hello there my friend.", "See you again soon."]
REF_TEXT = "A short reference."


def _reference(sampling_rate: int) -> ReferenceAudio:
    t = np.arange(int(sampling_rate * 1.0)) / sampling_rate
    return ReferenceAudio(samples=(0.3 * np.sin(2 * np.pi * 180 * t)).astype(np.float32), sampling_rate=sampling_rate,
                          key="tone")


def _params(context: bool, max_new_tokens: int) -> SynthesisParams:
    return SynthesisParams(seed=5, greedy=True, max_new_tokens=max_new_tokens, max_segment_chars=24,
                           pause_between_segments_ms=0, segment_context=context)


def _run(adapter, monkeypatch, context: bool, max_new_tokens: int):
    """The request through an engine -> (result, the model inputs of each preprocess call in order)."""
    seen = []
    real = adapter.preprocess

    def preprocess(rows, params):
        inputs = real(rows, params)
        seen.append((list(rows), inputs))
        return inputs

    monkeypatch.setattr(adapter, "preprocess", preprocess)
    engine = Engine(adapter, EngineConfig(wait_window_ms=0))
    ref = _reference(adapter.facts.sampling_rate)
    handle = engine.submit(SynthesisRequest(text=TEXT, reference_audio=ref, reference_text=REF_TEXT,
                                            params=_params(context, max_new_tokens)))
    engine.start()
    try:
        result = handle.result(timeout=300)
    finally:
        engine.shutdown()
        monkeypatch.undo()
    assert result.status is RequestStatus.DONE, result.error
    return result, seen


def _alone(adapter, text: str, seed: int, max_new_tokens: int):
    """One segment generated on its own (no context): (its inputs, its raw outputs, its audio)."""
    ref = _reference(adapter.facts.sampling_rate)
    row = AdapterRow(text=text, reference_audio=ref.samples, reference_text=REF_TEXT, seed=seed)
    params = adapter.resolve(_params(False, max_new_tokens))
    inputs = adapter.preprocess([row], params)
    outputs = adapter.generate(inputs, params)
    return inputs, outputs, adapter.postprocess(outputs, inputs)[0]


@pytest.fixture(scope="module")
def csm(tiny_adapter):
    return tiny_adapter("csm")


@pytest.fixture(scope="module")
def higgs(tiny_adapter):
    return tiny_adapter("higgs")


def _check_off(adapter, monkeypatch, max_new: int, on_audio: np.ndarray, first_audio: np.ndarray) -> None:
    """Off: one batch, no context, every segment's audio what it is generated alone (as before the setting);
    on: the first segment the same, the later one not (it heard the first)."""
    off, seen = _run(adapter, monkeypatch, False, max_new)
    assert len(seen) == 1 and all(not r.context for r in seen[0][0])
    second_audio = _alone(adapter, SEGMENTS[1], 6, max_new)[2]
    np.testing.assert_array_equal(off.audio, np.concatenate([first_audio, second_audio]))
    np.testing.assert_array_equal(on_audio[:first_audio.size], first_audio)
    assert not np.array_equal(on_audio, off.audio)


def test_csm_next_segment_hears_the_previous_one_as_a_context_turn_and_off_is_as_before(csm, monkeypatch):
    result, seen = _run(csm, monkeypatch, True, 6)
    assert [[r.text for r in rows] for rows, _ in seen] == [[SEGMENTS[0]], [SEGMENTS[1]]]  # one after another
    _, _, first_audio = _alone(csm, SEGMENTS[0], 5, 6)
    # Sesame's generator: generate(text, speaker, context=[reference segment, previous segment]); in the csm-1b
    # chat format that is the reference turn, the previous segment's turn with the audio it generated, the target
    tok, proc = csm.processor.tokenizer, csm.processor
    turn = "{bos}[0]{text}{eos}"

    def with_audio(text):
        return turn.format(bos=tok.bos_token, eos=tok.eos_token, text=text) + proc.audio_token + proc.audio_eos_token

    prompt = with_audio(REF_TEXT) + with_audio(SEGMENTS[0]) + turn.format(bos=tok.bos_token, eos=tok.eos_token,
                                                                          text=SEGMENTS[1])
    ref = _reference(csm.facts.sampling_rate).samples
    want = proc(text=[prompt], audio=[ref, first_audio], sampling_rate=csm.facts.sampling_rate, padding=True)
    got = seen[1][1]
    assert torch.equal(got.input_ids, want["input_ids"])
    assert torch.equal(got.input_values_cutoffs, want["input_values_cutoffs"])
    torch.testing.assert_close(got.input_values, want["input_values"].to(got.input_values.dtype))
    _check_off(csm, monkeypatch, 6, result.audio, first_audio)


def test_higgs_next_segment_is_boson_long_form_chat_with_the_previous_audio_tokens_and_off_is_as_before(
        higgs, monkeypatch):
    max_new = 30
    result, seen = _run(higgs, monkeypatch, True, max_new)
    assert [[r.text for r in rows] for rows, _ in seen] == [[SEGMENTS[0]], [SEGMENTS[1]]]
    inputs, outputs, first_audio = _alone(higgs, SEGMENTS[0], 5, max_new)
    # Boson's generation.py keeps a chunk's audio tokens as revert_delay_pattern(out)[..., 1:-1] clipped to the
    # codebook: here from the generated frames (stream-BOS frame to the all-stream-EOS frame, inclusive)
    proc = higgs.processor
    generated = outputs[0, inputs["batch"]["audio_input_ids"].shape[1]:]
    end = int((generated == proc.audio_stream_eos_id).all(-1).nonzero()[0, 0])
    tokens = proc.revert_delay_pattern(generated[:end + 1])[1:-1].clip(0, proc.audio_stream_bos_id - 1)
    # its chat: system, scene, the reference's user/assistant turns, then user chunk 1 / assistant (chunk 1's
    # tokens), then user chunk 2 - made by the processor itself, with the codec's encoding of a stand-in clip
    # replaced by those tokens (Boson's collator frames prompt audio tokens as the processor does)
    stand_in = np.zeros(4800, dtype=np.float32)
    ref = _reference(higgs.facts.sampling_rate).samples

    def text(t):
        return {"type": "text", "text": t}

    conversation = [
        {"role": "system", "content": [text("Generate audio following instruction.")]},
        {"role": "scene", "content": [text("Audio is recorded from a quiet room.")]},
        {"role": "user", "content": [text(REF_TEXT)]}, {"role": "assistant", "content": [{"type": "audio", "audio": ref}]},
        {"role": "user", "content": [text(SEGMENTS[0])]},
        {"role": "assistant", "content": [{"type": "audio", "audio": stand_in}]},
        {"role": "user", "content": [text(SEGMENTS[1])]}]
    codec = proc.audio_tokenizer
    real_encode = codec.encode

    def encode(input_values, **kwargs):
        out = real_encode(input_values, **kwargs)
        if input_values.shape[-1] == stand_in.size:
            out.audio_codes = tokens.transpose(0, 1)[None].to(out.audio_codes.device)
        return out

    monkeypatch.setattr(codec, "encode", encode)
    want = proc.apply_chat_template([conversation], add_generation_prompt=True, tokenize=True, return_dict=True,
                                    processor_kwargs=higgs._processor_kwargs())
    monkeypatch.undo()
    got = seen[1][1]["batch"]
    for key in ("input_ids", "attention_mask", "audio_input_ids", "audio_input_ids_mask"):
        assert torch.equal(got[key].cpu(), want[key].cpu()), key
    _check_off(higgs, monkeypatch, max_new, result.audio, first_audio)
