"""A 3-speaker script through the real engine on tiny checkpoints of the real architectures, checked in what each
adapter's ``preprocess`` receives and builds: VibeVoice speaks it from its own multi-speaker prompt (every voice in
each row, turns as ``Speaker k:`` lines), CSM (a per-turn family) one turn per row in its speaker's voice, Dia from
its [S1]/[S2] prompt (two speakers) or per turn (three)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.adapter_helpers import load_reference
from tts_app.adapters.vibevoice import voice_seed
from tts_app.config import EngineConfig
from tts_app.dialogue import dialogue_request, parse_script
from tts_app.request import ReferenceAudio, SynthesisParams
from tts_app.runtime import Runtime

SCRIPT = ("Speaker 1: Good morning everyone.\n"
          "Speaker 2: Morning! How are you today?\n"
          "Speaker 3: Fine, thanks.\n"
          "Speaker 1: Then let us begin.\n"
          "Speaker 2: Sure.")
CLIPS = [("en_female_1.wav", 1.6), ("en_male_1.wav", 1.2), ("zh_female_1.wav", 2.0)]  # cut: lengths differ


class _Spy:
    """Wraps ``adapter.preprocess``: keeps every batch's rows and the inputs built from them."""

    def __init__(self, adapter):
        self.batches: list[tuple[list, object]] = []
        original = adapter.preprocess

        def preprocess(rows, params):
            inputs = original(rows, params)
            self.batches.append((list(rows), inputs))
            return inputs

        adapter.preprocess = preprocess

    @property
    def rows(self):
        return [row for rows, _ in self.batches for row in rows]


def _merged(turns: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Consecutive (speaker, text) pairs of one speaker joined (a turn split over two rows)."""
    out: list[tuple[int, str]] = []
    for speaker, text in turns:
        if out and out[-1][0] == speaker:
            out[-1] = (speaker, f"{out[-1][1]} {text}")
        else:
            out.append((speaker, text))
    return out


def _voices(sampling_rate: int, num_speakers: int):
    """Per speaker (prepared-reference stand-in with ``.audio``, transcript), from real clips of tests/data."""
    out = []
    for name, seconds in CLIPS[:num_speakers]:
        wave, transcript = load_reference(name, sampling_rate, seconds)
        ref = ReferenceAudio(wave, sampling_rate, key=name)
        out.append((type("Prepared", (), {"audio": ref})(), transcript.split(",")[0]))
    return out


def _run(adapter, script_text: str, num_speakers: int, **params):
    spy = _Spy(adapter)
    runtime = Runtime.from_adapter(adapter, "tiny", EngineConfig(wait_window_ms=50.0, max_batch_size=4))
    try:
        script = parse_script(script_text)
        voices = _voices(adapter.facts.sampling_rate, num_speakers)
        request = dialogue_request(script, voices, params=SynthesisParams(seed=3, **params))
        result = runtime.engine.submit(request).result(timeout=600)
    finally:
        runtime.close()
    assert result.ok, result.error
    return script, voices, result, spy


@pytest.fixture(scope="module")
def vibevoice(tiny_checkpoint):
    from tts_app.adapters.vibevoice import VibeVoiceAdapter

    return VibeVoiceAdapter.from_pretrained(tiny_checkpoint("vibevoice"), device="cpu", dtype="float32")


def test_vibevoice_speaks_a_three_speaker_script_from_one_prompt_with_every_voice(vibevoice):
    adapter = vibevoice
    script, voices, result, spy = _run(adapter, SCRIPT, 3, max_new_tokens=12, max_segment_chars=60)
    rows = spy.rows
    # Turns packed in order into a few dialogue rows; every turn spoken exactly once, by its own speaker.
    assert 1 < len(rows) < len(script.turns) and all(row.is_dialogue for row in rows)
    assert _merged([(t.speaker, t.text) for row in rows for t in row.turns]) == \
        [(t.speaker, t.text) for t in script.turns]
    for row in rows:  # every speaker's voice in every row, in the script's speaker order
        assert len(row.voices) == 3 and row.reference_audio is None
        for k, voice in enumerate(row.voices):
            np.testing.assert_array_equal(voice.reference_audio, voices[k][0].audio.samples)

    # What the model gets: VibeVoice's script prompt, speaker k's reference frames in voice line k.
    tokenizer = adapter.processor.tokenizer
    audio_id = adapter.model.config.audio_token_id
    lm = adapter.model.model
    for batch_rows, inputs in spy.batches:
        for b, row in enumerate(batch_rows):
            ids = inputs.input_ids[b][inputs.attention_mask[b].bool()]
            # microsoft/VibeVoice vibevoice_processor.py's layout for a script, speakers numbered from 0
            bos, eos = adapter.processor.audio_bos_token, adapter.processor.audio_eos_token
            expected = (" Transform the text provided by various speakers into speech output, utilizing the "
                        "distinct voice of each respective speaker.\n Voice input:\n"
                        + "".join(f" Speaker {k}:{bos}{eos}\n" for k in range(3)) + " Text input:\n"
                        + "".join(f" Speaker {t.speaker}: {t.text}\n" for t in row.turns)
                        + f" Speech output:\n{bos}")
            assert ids[ids != audio_id].tolist() == tokenizer(expected, add_special_tokens=False)["input_ids"]
            # placeholder runs in prompt order: one per voice, each as long as that clip's frame count
            placeholders = (inputs.input_ids[b] == audio_id).nonzero().flatten()
            runs = torch.tensor_split(placeholders, (torch.diff(placeholders) > 1).nonzero().flatten() + 1)
            hop = adapter.model.config.audio_config.hop_length
            assert [len(r) for r in runs] == [math.ceil(v[0].audio.samples.size / hop) for v in voices]
            # the embeddings there are speaker k's encoded clip (the sigma-VAE noise seeded from the clip's own
            # samples, as the adapter draws it: one voice, one conditioning)
            for k, run in enumerate(runs):
                with torch.random.fork_rng():
                    torch.manual_seed(voice_seed(voices[k][0].audio.samples))
                    feats = adapter.processor.feature_extractor(
                        [voices[k][0].audio.samples], sampling_rate=adapter.facts.sampling_rate,
                        return_tensors="pt")
                    frames = lm.get_audio_features(feats["input_values"], feats["padding_mask"],
                                                   sample=True).pooler_output
                torch.testing.assert_close(inputs.inputs_embeds[b, run], frames, rtol=0, atol=1e-5)

    # The outputs name who speaks: each segment its turns, subtitles one line per turn with the speaker.
    from tts_app.outputs import subtitle_texts

    labels = [s.label for s in script.speakers]
    assert _merged([(labels.index(name), text) for s in result.segments for name, text in s.turns]) == \
        [(t.speaker, t.text) for t in script.turns]
    assert "Speaker 2: Morning! How are you today?" in "\n".join(subtitle_texts(result))


@pytest.fixture(scope="module")
def csm(tiny_checkpoint):
    from tts_app.adapters.csm import CsmAdapter

    return CsmAdapter.from_pretrained(tiny_checkpoint("csm"), device="cpu", dtype="float32")


def test_csm_speaks_each_turn_in_its_speakers_voice(csm):
    adapter = csm
    assert adapter.facts.max_dialogue_speakers == 0  # a per-turn family
    script, voices, result, spy = _run(adapter, SCRIPT, 3, max_new_tokens=4, max_segment_chars=16)
    rows = spy.rows
    assert len(rows) == len(result.segments) > len(script.turns)  # long turns split: each piece its own row
    assert max(len(r) for r, _ in spy.batches) > 1  # turns batch together like segments
    by_text = {s.model_text: s for s in result.segments}
    for batch_rows, inputs in spy.batches:
        for b, row in enumerate(batch_rows):
            speaker = [s.label for s in script.speakers].index(by_text[row.text].speaker)
            expected = voices[speaker][0].audio.samples
            np.testing.assert_array_equal(row.reference_audio, expected)
            assert row.reference_text == voices[speaker][1]
            # the model input: this row's clip is the speaker's (cut out of the padded batch at its cutoff)
            end = int(inputs.input_values_cutoffs[b, 0])
            np.testing.assert_allclose(inputs.input_values[b, 0, :end].numpy(), expected, atol=1e-6)
    assert [s.speaker for s in result.segments][0] == "Speaker 1" and result.segments[-1].speaker == "Speaker 2"


@pytest.fixture(scope="module")
def dia(tiny_checkpoint):
    from tts_app.adapters.dia import DiaAdapter

    return DiaAdapter.from_pretrained(tiny_checkpoint("dia"), device="cpu", dtype="float32")


def test_dia_speaks_two_speakers_from_its_tagged_prompt_and_three_per_turn(dia):
    adapter = dia
    two = "Speaker 1: Good morning.\nSpeaker 2: Morning!\nSpeaker 1: Let us begin."
    script, voices, result, spy = _run(adapter, two, 2, max_new_tokens=20, max_segment_chars=100)
    (rows, inputs), = spy.batches
    assert len(rows) == 1 and rows[0].is_dialogue  # short enough for one generation
    text = adapter.processor.tokenizer.decode(inputs.input_ids[0][inputs.attention_mask[0].bool()])
    assert text == (f"[S1] {voices[0][1]} [S2] {voices[1][1]} [S1] Good morning. [S2] Morning! [S1] Let us begin.")
    # the audio prompt: speaker 1's clip then speaker 2's, as DAC frames
    both = np.concatenate([voices[0][0].audio.samples, voices[1][0].audio.samples])
    expected = adapter.processor(text=[text], audio=[both], sampling_rate=adapter.facts.sampling_rate,
                                 text_kwargs={"padding": False}, return_tensors="pt")
    assert torch.equal(inputs.decoder_input_ids[0], expected["decoder_input_ids"][0])

    _, _, result3, spy3 = _run(adapter, SCRIPT, 3, max_new_tokens=20, max_segment_chars=40)
    assert not any(row.is_dialogue for row in spy3.rows)  # 3 speakers: each turn alone, in its speaker's voice
    assert any("at most 2 speakers" in w for w in result3.warnings)
