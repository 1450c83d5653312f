"""Dialogue scripts (parser, voice assignment), per-turn segments through the real engine (the adapter's rows checked),
chapters, and tempo/loudness through the engine. Fake adapter (no model)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.fakes import FakeAdapter
from tts_app.config import EngineConfig
from tts_app.dialogue import check_voices, dialogue_request, parse_script, parse_voice_assignments
from tts_app.errors import InputError
from tts_app.outputs import output_metadata, save_outputs
from tts_app.request import ReferenceAudio, SynthesisParams, SynthesisRequest
from tts_app.runtime import Runtime


class RecordingAdapter(FakeAdapter):
    """A fake adapter that keeps every row it was given."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.rows = []

    def preprocess(self, rows, params):
        self.rows.extend(rows)
        return super().preprocess(rows, params)


@pytest.fixture()
def runtime():
    rt = Runtime.from_adapter(RecordingAdapter(samples_per_char=200), "fake-model", EngineConfig(wait_window_ms=20.0, max_batch_size=8))
    yield rt
    rt.close()


def test_script_forms_map_to_speakers():
    script = parse_script("Speaker 1: Welcome back.\nto the show\n[S2] Thanks. [S1] Sure.\n\n张三：今天聊聊天气。\n"
                          "speaker2：好的。")
    assert [(s.number, s.label) for s in script.speakers] == [(1, "Speaker 1"), (2, "Speaker 2"), (3, "张三")]
    assert [(t.speaker, t.text, t.line) for t in script.turns] == [
        (0, "Welcome back. to the show", 1), (1, "Thanks.", 3), (0, "Sure.", 3), (2, "今天聊聊天气。", 5),
        (1, "好的。", 6)]


@pytest.mark.parametrize("text, message", [
    ("hello there", "line 1: 'hello there' names no speaker"),
    ("Speaker 5: hi", "line 1: speaker 5 is outside 1-4"),
    ("A: 1\nB: 2\nC: 3\nD: 4\nE: 5", "line 5: 'E' would be speaker 5"),
    ("Speaker 1: hi\nSpeaker 2:", "line 2: Speaker 2 says nothing"),
    ("", "no turns"),
])
def test_bad_scripts_name_the_line(text, message):
    with pytest.raises(InputError, match=message):
        parse_script(text)


def test_voice_assignment_by_number_tag_or_name():
    script = parse_script("张三：你好。\n[S2] Hi.")
    assert check_voices(script, {"张三": "a.wav", "S2": "mei"}) == ["a.wav", "mei"]
    assert check_voices(script, parse_voice_assignments(["1=a.wav", "2=mei"])) == ["a.wav", "mei"]
    with pytest.raises(InputError, match=r"Speaker 2 \(speaker 2\) has no voice; give one, e.g. --voice 2="):
        check_voices(script, {"1": "a.wav"})
    with pytest.raises(InputError, match="speaker '3', which the script does not have"):
        check_voices(script, {"1": "a", "2": "b", "3": "c"})
    with pytest.raises(InputError, match="give SPEAKER=VOICE"):
        parse_voice_assignments(["a.wav"])


def _reference(value: float, rate: int = 16000) -> ReferenceAudio:
    return ReferenceAudio(np.full(rate, value, dtype=np.float32), rate, key=f"ref{value}")


def test_three_speaker_script_gives_each_row_its_speakers_reference(runtime, tmp_path):
    script = parse_script("Speaker 1: Good morning everyone.\nSpeaker 2: Morning! How are you?\n"
                          "Speaker 3: Fine, thanks. And you?\nSpeaker 1: Great, let us begin the meeting now.")
    refs = [_reference(0.1), _reference(0.2), _reference(0.3)]
    voices = [(type("P", (), {"audio": r})(), f"transcript {i + 1}") for i, r in enumerate(refs)]
    request = dialogue_request(script, voices, params=SynthesisParams(seed=1, max_segment_chars=12))
    result = runtime.engine.submit(request).result(timeout=60)
    assert result.ok, result.error
    rows = runtime.engine.adapter.rows
    by_text = {row.text: row for row in rows}
    assert len(rows) == len(result.segments) > len(script.turns)  # long turns were split, each piece its own row
    for segment in result.segments:
        row = by_text[segment.model_text]
        speaker = int(segment.speaker.split()[-1])
        assert float(row.reference_audio[0]) == pytest.approx(0.1 * speaker)
        assert row.reference_text == f"transcript {speaker}"
    assert [s.speaker for s in result.segments][0] == "Speaker 1" and result.segments[-1].speaker == "Speaker 1"
    assert max(runtime.engine.adapter.calls) > 1  # turns batch together like segments

    metadata = output_metadata(runtime, request, result, entry_point="synth")
    files = save_outputs(tmp_path / "talk.wav", result, metadata, subtitles_path=tmp_path / "talk.srt")
    srt = files.subtitles.read_text(encoding="utf-8")
    assert "Speaker 2: Morning" in srt and "Speaker 3: Fine" in srt and "Speaker 1: Good" in srt
    sidecar = json.loads(files.metadata.read_text(encoding="utf-8"))
    assert [s["speaker"] for s in sidecar["segments"]] == [s.speaker for s in result.segments]
    assert [s["name"] for s in sidecar["speakers"]] == ["Speaker 1", "Speaker 2", "Speaker 3"]


def test_a_turn_naming_a_missing_speaker_fails_the_request(runtime):
    from tts_app.request import Speaker, Turn

    request = SynthesisRequest(text="x", speakers=(Speaker("A", _reference(0.1)),), turns=(Turn(1, "hello"),))
    result = runtime.engine.submit(request).result(timeout=30)
    assert not result.ok and "turn 1 names speaker 2 but the dialogue has 1 speaker" in result.error


def test_chapters_get_longer_pauses_spans_and_their_own_files(runtime, tmp_path):
    text = "# Chapter one\nThe first part.\n\n# Chapter two\nThe second part is here."
    params = SynthesisParams(seed=2, chapter_pause_ms=900, pause_between_segments_ms=100)
    request = SynthesisRequest(text=text, reference_audio=_reference(0.5), params=params)
    result = runtime.engine.submit(request).result(timeout=60)
    assert result.ok, result.error
    assert [c.title for c in result.chapters] == ["Chapter one", "Chapter two"]
    first, second = result.chapters
    assert second.start_s - first.end_s == pytest.approx(0.9, abs=1e-3)  # the chapter pause
    assert result.segments[0].text.startswith("Chapter one")  # the title is spoken
    metadata = output_metadata(runtime, request, result, entry_point="synth")
    files = save_outputs(tmp_path / "book.flac", result, metadata)
    assert [p.name for p in files.chapters] == ["book.ch01_Chapter_one.flac", "book.ch02_Chapter_two.flac"]
    import soundfile as sf

    assert sf.info(str(files.chapters[1])).duration == pytest.approx(second.end_s - second.start_s, abs=1e-3)
    sidecar = json.loads(files.metadata.read_text(encoding="utf-8"))
    assert sidecar["chapters"][1]["file"] == "book.ch02_Chapter_two.flac" and sidecar["audio"]["format"] == \
        "FLAC PCM_16"


def test_engine_applies_speed_and_duration_and_the_sidecar_records_it(runtime):
    text = "A sentence long enough to stretch. And another one."
    plain = runtime.engine.submit(SynthesisRequest(text=text, reference_audio=_reference(0.2),
                                                   params=SynthesisParams(seed=4))).result(timeout=60)
    faster = runtime.engine.submit(SynthesisRequest(text=text, reference_audio=_reference(0.2),
                                                    params=SynthesisParams(seed=4, speed=1.25))).result(timeout=60)
    assert faster.duration_s == pytest.approx(plain.duration_s / 1.25, rel=0.01)
    assert faster.segments[-1].end_s == pytest.approx(plain.segments[-1].end_s / 1.25, rel=0.01)
    assert faster.post_processing["speed"] == 1.25 and faster.post_processing["speed_source"] == "speed"
    fitted = runtime.engine.submit(SynthesisRequest(text=text, reference_audio=_reference(0.2),
                                                    params=SynthesisParams(seed=4, duration_s=plain.duration_s * 0.9))
                                   ).result(timeout=60)
    assert abs(fitted.duration_s - plain.duration_s * 0.9) <= 0.05
    impossible = runtime.engine.submit(SynthesisRequest(text=text, reference_audio=_reference(0.2),
                                                        params=SynthesisParams(seed=4, duration_s=0.05))
                                       ).result(timeout=60)
    assert not impossible.ok and "outside 0.5-2.0" in impossible.error
    assert runtime.engine.stats().num_requests_failed == 1
    with pytest.raises(InputError, match="speed=3.0 is outside 0.5-2.0"):
        SynthesisParams(speed=3.0)


def test_each_line_meets_its_own_target_duration_for_dubbing(runtime):
    lines = ["Good morning, everyone here.", "今天天气很好，我们去公园散步吧。", "See you all tomorrow."]
    natural = []
    for line in lines:  # each line's length as generated, alone
        alone = runtime.engine.submit(SynthesisRequest(text=line, reference_audio=_reference(0.2),
                                                       params=SynthesisParams(seed=4))).result(timeout=60)
        natural.append(alone.duration_s)
    targets = (natural[0] * 0.8, natural[1] * 1.3, natural[2])
    text = "\n".join([lines[0], "", lines[1], lines[2]])  # blank lines carry no cue
    result = runtime.engine.submit(SynthesisRequest(text=text, reference_audio=_reference(0.2), params=SynthesisParams(
        seed=4, segment_durations_s=targets, pause_between_segments_ms=300))).result(timeout=60)
    assert result.ok, result.error
    assert [s.text for s in result.segments] == lines  # one segment per line, never packed together
    for segment, target in zip(result.segments, targets):
        assert abs((segment.end_s - segment.start_s) - target) <= 0.05
    gaps = [b.start_s - a.end_s for a, b in zip(result.segments, result.segments[1:])]
    assert gaps == pytest.approx([0.3, 0.3], abs=0.002)  # the usual pause between cues, not a chapter pause
    cues = result.post_processing["segment_durations"]
    assert [c["segment"] for c in cues] == [1, 2, 3]
    assert [c["speed"] for c in cues] == pytest.approx([1.25, 1 / 1.3, 1.0], abs=0.01)

    def failed(text: str, **params) -> str:
        out = runtime.engine.submit(SynthesisRequest(text=text, reference_audio=_reference(0.2),
                                                     params=SynthesisParams(seed=4, **params))).result(timeout=60)
        assert not out.ok
        return out.error

    assert "gives 2 duration(s) but the text has 3 non-blank line(s)" in failed(text, segment_durations_s=(1, 2))
    assert "line 1 ('Good morning, everyone here.')" in failed(text, segment_durations_s=(0.01, *targets[1:]))
    assert "split into" in failed(text, segment_durations_s=targets, max_segment_chars=12)
    with pytest.raises(InputError, match="not both"):
        SynthesisParams(segment_durations_s=(1.0,), speed=1.2)


def test_turn_pieces_pack_in_order_within_the_limit():
    from tts_app.dialogue import join_pieces, pack_turn_pieces

    assert pack_turn_pieces([10, 10, 10, 30, 5], 25) == [[0, 1], [2], [3], [4]]
    assert pack_turn_pieces([3, 3, 3], 100) == [[0, 1, 2]]
    assert pack_turn_pieces([], 10) == []
    assert join_pieces(["你好。", "今天天气很好。"]) == "你好。今天天气很好。"
    assert join_pieces(["Morning!", "How are you?"]) == "Morning! How are you?"


def test_a_family_with_a_dialogue_prompt_gets_packed_rows_with_every_voice(tmp_path):
    from tests.fakes import fake_facts

    adapter = RecordingAdapter(samples_per_char=200, facts=fake_facts(max_dialogue_speakers=4))
    rt = Runtime.from_adapter(adapter, "fake-model", EngineConfig(wait_window_ms=20.0, max_batch_size=8))
    try:
        script = parse_script("Speaker 1: Good morning everyone.\nSpeaker 2: Morning! How are you?\n"
                              "Speaker 3: Fine, thanks.\nSpeaker 1: Great, let us begin the meeting now.")
        refs = [_reference(0.1), _reference(0.2), _reference(0.3)]
        voices = [(type("P", (), {"audio": r})(), f"transcript {i + 1}") for i, r in enumerate(refs)]
        request = dialogue_request(script, voices, params=SynthesisParams(seed=1, max_segment_chars=40))
        result = rt.engine.submit(request).result(timeout=60)
    finally:
        rt.close()
    assert result.ok, result.error
    rows = adapter.rows
    assert len(rows) == len(result.segments) < len(script.turns)  # turns packed: fewer rows than turns
    for row in rows:
        assert row.is_dialogue and row.reference_audio is None
        assert [float(v.reference_audio[0]) for v in row.voices] == pytest.approx([0.1, 0.2, 0.3])
        assert [v.reference_text for v in row.voices] == ["transcript 1", "transcript 2", "transcript 3"]
    spoken = [(t.speaker, t.text) for row in rows for t in row.turns]  # a turn may go on in the next row
    merged = [spoken[0]]
    for speaker, text in spoken[1:]:
        merged[-1:] = [(speaker, f"{merged[-1][1]} {text}")] if speaker == merged[-1][0] else [merged[-1],
                                                                                               (speaker, text)]
    assert merged == [(t.speaker, t.text) for t in script.turns]
    assert all(len(row.text) <= 40 for row in rows)
    # the outputs: each segment's turns, subtitles one line per turn, sidecar turns
    assert [name for s in result.segments for name, _ in s.turns] == [
        ["Speaker 1", "Speaker 2", "Speaker 3"][k] for k, _ in spoken]
    metadata = output_metadata(rt, request, result, entry_point="synth")
    files = save_outputs(tmp_path / "talk.wav", result, metadata, subtitles_path=tmp_path / "talk.srt")
    srt = files.subtitles.read_text(encoding="utf-8")
    # a turn's sentences stay together (one piece, sentences packed); consecutive turns share a row while they fit
    assert "Speaker 2: Morning! How are you?\nSpeaker 3: Fine, thanks." in srt
    sidecar = json.loads(files.metadata.read_text(encoding="utf-8"))
    assert sidecar["schema_version"] == 2
    assert [t["speaker"] for s in sidecar["segments"] for t in s["turns"]] == [
        name for s in result.segments for name, _ in s.turns]
