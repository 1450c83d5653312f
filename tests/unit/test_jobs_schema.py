"""JSONL job schema: reading (encodings, line ends), validation messages with line numbers, path and name safety."""

from __future__ import annotations

import json
import os
import shutil
import stat
import tracemalloc
import zipfile
from pathlib import Path

import pytest

from tts_app.errors import InputError
from tts_app.jobs.runner import validate_job
from tts_app.jobs.schema import (AudioSources, InvalidLine, JobConfig, JobLine, extract_audio_zip, iter_job,
                                 make_sources, sanitize_output_name)
from tts_app.request import SynthesisParams


@pytest.fixture()
def job_dir(tmp_path, data_dir) -> Path:
    (tmp_path / "voices").mkdir()
    shutil.copy(data_dir / "en_female_1.wav", tmp_path / "voices" / "a.wav")
    shutil.copy(data_dir / "zh_male_1.wav", tmp_path / "b.wav")
    return tmp_path


def write_jsonl(path: Path, rows: list, *, encoding: str = "utf-8", newline: str = "\n", bom: bool = False) -> Path:
    text = newline.join(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows) + newline
    data = text.encode(encoding)
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + data)
    return path


def rows_by_line(report) -> dict[int, list[tuple[str, str]]]:
    out: dict[int, list[tuple[str, str]]] = {}
    for line, status, message in report.as_table():
        out.setdefault(line, []).append((status, message))
    return out


def test_default_output_names_are_the_line_number_and_first_words(job_dir):
    path = write_jsonl(job_dir / "job.jsonl", [
        {"input_text": "今天天气很好，我们去公园。", "prompt_audio": "b.wav"},
        {"input_text": "Hello, world!", "prompt_audio": "b.wav", "output_name": "mine"},
        {"input_text": "Good morning everyone. How are you?", "prompt_audio": "b.wav"},
        {"script": "Speaker 1: 大家好，欢迎收听。\nSpeaker 2: Thanks.", "speakers": {"1": "b.wav", "2": "b.wav"}},
        {"input_text": "？？？", "prompt_audio": "b.wav"},
    ])
    names = [item.output_name for item in iter_job(path, make_sources(path, None, JobConfig()))]
    # a dialogue is named by its first turn's words, not the speaker label; no words left: the number alone
    assert names == ["00001_今天天气很好", "mine", "00003_Good_morning_everyone", "00004_大家好", "00005"]


def test_segment_durations_are_a_list_of_seconds_per_line(job_dir):
    path = write_jsonl(job_dir / "job.jsonl", [
        {"input_text": "第一句。\n第二句。", "prompt_audio": "b.wav", "segment_durations_s": [1.5, 2]},
        {"input_text": "One.", "prompt_audio": "b.wav", "segment_durations_s": 1.5},
        {"input_text": "One.", "prompt_audio": "b.wav", "segment_durations_s": [1.5], "speed": 1.2},
    ])
    good, not_a_list, both = list(iter_job(path, make_sources(path, None, JobConfig())))
    assert good.synthesis_params(SynthesisParams()).segment_durations_s == (1.5, 2.0)
    assert isinstance(not_a_list, InvalidLine) and "must be a list of numbers of seconds" in not_a_list.message
    assert isinstance(both, InvalidLine) and "not both" in both.message


def test_reference_cleanup_is_a_per_line_choice_checked_against_the_three_modes(job_dir):
    path = write_jsonl(job_dir / "job.jsonl", [
        {"input_text": "One.", "prompt_audio": "b.wav", "reference_cleanup": "full"},
        {"input_text": "One.", "prompt_audio": "b.wav"},
        {"input_text": "One.", "prompt_audio": "b.wav", "reference_cleanup": "light"},
    ])
    full, default, bad = list(iter_job(path, make_sources(path, None, JobConfig())))
    assert full.synthesis_params(SynthesisParams()).reference_cleanup == "full"
    assert default.synthesis_params(SynthesisParams()).reference_cleanup == "auto"
    assert isinstance(bad, InvalidLine) and "reference_cleanup" in bad.message and "auto, full, off" in bad.message


def test_bom_crlf_blank_lines_and_glm_tts_aliases(job_dir):
    path = write_jsonl(job_dir / "job.jsonl", [
        {"uttid": "first", "syn_text": "Hello there.", "prompt_speech": "voices/a.wav", "prompt_text": "ref words"},
        "",
        "   ",
        {"input_text": "你好，世界。", "prompt_audio": "b.wav", "seed": 7, "greedy": True, "top_p": 0.9},
    ], newline="\r\n", bom=True)
    items = list(iter_job(path, make_sources(path, None, JobConfig())))
    assert all(isinstance(i, JobLine) for i in items), items
    first, second = items
    assert (first.line_number, first.output_name, first.input_text) == (1, "first", "Hello there.")
    assert first.prompt_audio == (job_dir / "voices" / "a.wav").resolve()
    assert first.prompt_text == "ref words"
    # default output name = zero-padded physical line number (blank lines count, so it matches the editor) and the
    # text's first words
    assert (second.line_number, second.output_name, second.input_text) == (4, "00004_你好", "你好，世界。")
    params = second.synthesis_params(SynthesisParams(seed=1, max_new_tokens=50))
    assert (params.seed, params.greedy, params.top_p, params.max_new_tokens) == (7, True, 0.9, 50)


def test_each_problem_is_reported_with_its_line_number(job_dir):
    path = write_jsonl(job_dir / "job.jsonl", [
        {"input_text": "ok line", "prompt_audio": "b.wav", "output_name": "take"},
        '{"input_text": "broken", ',
        {"prompt_audio": "b.wav"},
        {"input_text": "no audio", "prompt_audio": "voices/missing.wav"},
        {"input_text": "dup", "prompt_audio": "b.wav", "output_name": "TAKE.wav"},
        {"input_text": "escape", "prompt_audio": "b.wav", "output_name": "../../etc/cron"},
        {"input_text": "bad knob", "prompt_audio": "b.wav", "top_p": 1.5},
        {"input_text": "bad type", "prompt_audio": "b.wav", "seed": "seven"},
        [1, 2],
        {"input_text": "extra", "prompt_audio": "b.wav", "speaker": "x"},
        '{"input_text": "nan", "prompt_audio": "b.wav", "temperature": NaN}',
    ])
    report = validate_job(path)
    rows = rows_by_line(report)
    assert (report.num_lines, report.num_valid, report.num_invalid) == (11, 2, 9)
    assert 1 not in rows
    assert rows[2][0][0] == "error" and "bad JSON" in rows[2][0][1]
    assert "input_text" in rows[3][0][1]
    assert "missing.wav" in rows[4][0][1] and "not found" in rows[4][0][1]
    assert "duplicate" in rows[5][0][1] and "lines 1 and 5" in rows[5][0][1]
    assert "contains a path" in rows[6][0][1]
    assert "top_p" in rows[7][0][1]
    assert "seed" in rows[8][0][1]
    assert "JSON object" in rows[9][0][1]
    assert rows[10] == [("warning", "unknown field 'speaker' ignored")]
    assert "temperature" in rows[11][0][1] and "finite" in rows[11][0][1]
    assert not report.ok


def test_missing_prompt_audio_is_fine_with_a_default_voice(job_dir):
    path = write_jsonl(job_dir / "job.jsonl", [{"input_text": "no voice given"}])
    assert validate_job(path).num_invalid == 1
    report = validate_job(path, default_voice=job_dir / "b.wav")
    assert report.ok
    with pytest.raises(InputError, match="default voice"):
        validate_job(path, default_voice=job_dir / "nope.wav")


def test_gbk_file_is_read_with_a_warning_and_garbage_is_a_clear_error(job_dir):
    path = write_jsonl(job_dir / "gbk.jsonl", [{"input_text": "今天天气很好。", "prompt_audio": "b.wav"}],
                       encoding="gbk")
    report = validate_job(path)
    assert report.ok and report.encoding == "gb18030"
    assert any(r.line == 0 and "GB18030" in r.message for r in report.rows)
    (line,) = list(iter_job(path, make_sources(path, None, JobConfig())))
    assert line.input_text == "今天天气很好。"

    bad = job_dir / "bad.jsonl"
    bad.write_bytes(b'{"input_text": "caf\xe9", "prompt_audio": "b.wav"}\n\xff\xfe\x80\n')
    with pytest.raises(InputError, match="UTF-8"):
        validate_job(bad)


def test_utf16_file_with_bom_is_read(job_dir):
    path = job_dir / "u16.jsonl"
    path.write_text(json.dumps({"input_text": "wide", "prompt_audio": "b.wav"}) + "\r\n", encoding="utf-16")
    report = validate_job(path)
    assert report.ok and report.encoding == "utf-16"


def test_reference_paths_cannot_leave_the_allowed_roots(job_dir, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    shutil.copy(job_dir / "b.wav", outside / "secret.wav")
    (job_dir / "voices" / "link.wav").symlink_to(outside / "secret.wav")
    path = write_jsonl(job_dir / "job.jsonl", [
        {"input_text": "x", "prompt_audio": f"../{outside.name}/secret.wav"},
        {"input_text": "x", "prompt_audio": str(outside / "secret.wav")},
        {"input_text": "x", "prompt_audio": "voices/link.wav"},
        {"input_text": "x", "prompt_audio": str(job_dir / "b.wav")},
        {"input_text": "x", "prompt_audio": "voices\\a.wav"},
        {"input_text": "x", "prompt_audio": "C:\\voices\\a.wav"},
    ])
    rows = rows_by_line(validate_job(path))
    assert "leaves the allowed folders" in rows[1][0][1]
    assert "absolute path outside" in rows[2][0][1]
    assert "leaves the allowed folders" in rows[3][0][1]  # a symlink pointing out is refused too
    assert 4 not in rows and 5 not in rows  # absolute inside the job folder, Windows separators: fine
    assert "Windows absolute path" in rows[6][0][1]
    # an extra allowed root (the setting) lets the absolute path through
    report = validate_job(path, config=JobConfig(extra_allowed_roots=(str(outside),)))
    assert 2 not in rows_by_line(report)


def test_audio_folder_is_searched_before_the_jsonl_folder(job_dir, tmp_path_factory):
    audio = tmp_path_factory.mktemp("uploads")
    shutil.copy(job_dir / "b.wav", audio / "only_here.wav")
    path = write_jsonl(job_dir / "job.jsonl", [{"input_text": "x", "prompt_audio": "only_here.wav"}])
    assert not validate_job(path).ok
    assert validate_job(path, audio_dir=audio).ok


def _zip(path: Path, members: dict[str, bytes], symlink: str | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        if symlink:
            info = zipfile.ZipInfo(symlink)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, "/etc/passwd")
    return path


def test_audio_zip_is_extracted_safely(job_dir, tmp_path_factory):
    wav = (job_dir / "b.wav").read_bytes()
    good = _zip(tmp_path_factory.mktemp("z") / "voices.zip", {"spk/one.wav": wav})
    path = write_jsonl(job_dir / "job.jsonl", [{"input_text": "x", "prompt_audio": "spk/one.wav"}])
    assert validate_job(path, audio_dir=good).ok
    outside = write_jsonl(job_dir / "out.jsonl", [{"input_text": "x", "prompt_audio": "spk/../../b.wav"},
                                                  {"input_text": "x", "prompt_audio": "spk/two.wav"}])
    rows = rows_by_line(validate_job(outside, audio_dir=good))
    assert "leaves the audio ZIP" in rows[1][0][1]
    assert "not found" in rows[2][0][1] and "voices.zip" in rows[2][0][1]
    with pytest.raises(InputError, match="neither a folder nor a ZIP"):
        validate_job(path, audio_dir=job_dir / "b.wav")

    dest_root = tmp_path_factory.mktemp("dest")
    slip = _zip(dest_root / "slip.zip", {"ok.wav": wav, "../../evil.wav": b"x"})
    with pytest.raises(InputError, match="outside"):
        extract_audio_zip(slip, dest_root / "out", max_total_bytes=10**9, max_members=100)
    assert not (dest_root / "out").exists() and not (dest_root.parent / "evil.wav").exists()

    link = _zip(dest_root / "link.zip", {"ok.wav": wav}, symlink="pw.wav")
    with pytest.raises(InputError, match="symbolic link"):
        extract_audio_zip(link, dest_root / "out", max_total_bytes=10**9, max_members=100)

    bomb = _zip(dest_root / "bomb.zip", {"big.wav": b"\0" * 100_000})
    with pytest.raises(InputError, match="limit"):
        extract_audio_zip(bomb, dest_root / "out", max_total_bytes=50_000, max_members=100)

    many = _zip(dest_root / "many.zip", {f"{i}.wav": b"x" for i in range(5)})
    with pytest.raises(InputError, match="at most 3"):
        extract_audio_zip(many, dest_root / "out", max_total_bytes=10**9, max_members=3)


@pytest.mark.parametrize("raw, expected", [
    ("chapter 1", "chapter 1"),
    ("intro.wav", "intro"),
    ("a:b*c?", "a_b_c_"),
    ("..hidden", "hidden"),
    ("第一章", "第一章"),
    ("CON", "_CON"),
    (42, "42"),
])
def test_output_names_become_plain_file_names(raw, expected):
    assert sanitize_output_name(raw, 1) == expected


@pytest.mark.parametrize("raw", ["../x", "a/b", "a\\b", "..", "/abs", "...", True, ["x"]])
def test_output_names_with_paths_or_nothing_left_are_refused(raw):
    from tts_app.errors import JobLineError

    with pytest.raises(JobLineError):
        sanitize_output_name(raw, 3)


def test_validation_streams_a_large_file_in_small_memory(job_dir):
    path = job_dir / "big.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(3000):
            fh.write(json.dumps({"input_text": f"line {i} " + "words " * 30, "prompt_audio": "b.wav"}) + "\n")
    size = os.path.getsize(path)
    tracemalloc.start()
    report = validate_job(path)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert report.ok and report.num_lines == 3000
    # rows are kept only for problems; the file itself is never held whole
    assert peak < size, (peak, size)


def test_missing_field_with_a_near_miss_name_says_what_to_rename(job_dir):
    path = write_jsonl(job_dir / "job.jsonl", [
        {"text": "Hello.", "prompt_audio": "b.wav"},
        {"input_txt": "Hello.", "prompt_audio": "b.wav"},
        {"input_text": "Hello.", "ref_audio": "b.wav"},
        {"prompt_audio": "b.wav", "speaker": "x"},
    ])
    rows = rows_by_line(validate_job(path))
    assert ("error", "missing field 'input_text' (found 'text'; rename it to input_text)") in rows[1]
    assert ("error", "missing field 'input_text' (found 'input_txt'; rename it to input_text)") in rows[2]
    assert any("found 'ref_audio'; rename it to prompt_audio" in m for _, m in rows[3])
    assert ("error", "missing field 'input_text' (the text to speak)") in rows[4]  # nothing close: no guess


def test_renamed_output_names_are_reported_with_both_names(job_dir):
    path = write_jsonl(job_dir / "job.jsonl", [
        {"input_text": "a", "prompt_audio": "b.wav", "output_name": "CON"},
        {"input_text": "b", "prompt_audio": "b.wav", "output_name": ".hidden"},
        {"input_text": "c", "prompt_audio": "b.wav", "output_name": "a:b"},
        {"input_text": "d", "prompt_audio": "b.wav", "output_name": "plain.wav"},
    ])
    report = validate_job(path)
    rows = rows_by_line(report)
    assert report.ok and 4 not in rows  # dropping ".wav" is not a rename
    for line, old, new in [(1, "CON", "_CON"), (2, ".hidden", "hidden"), (3, "a:b", "a_b")]:
        ((status, message),) = rows[line]
        assert status == "warning" and repr(old) in message and repr(new) in message, message
    (first, *_) = list(iter_job(path, make_sources(path, None, JobConfig())))
    assert first.output_name == "_CON" and "'_CON'" in first.warnings[0]


def test_file_level_rows_are_labelled_job_file_not_line_0(job_dir):
    path = write_jsonl(job_dir / "gbk.jsonl", [{"input_text": "今天天气很好。", "prompt_audio": "b.wav"}],
                       encoding="gbk")
    text = validate_job(path).format_text()
    assert "job file: warning:" in text and "GB18030" in text
    assert "line 0" not in text


def test_emotion_fields_as_indextts2_names_them(job_dir):
    path = write_jsonl(job_dir / "job.jsonl", [
        {"input_text": "太好了！", "prompt_audio": "b.wav", "emo_vector": {"happy": 0.8, "surprised": 0.2}},
        {"input_text": "唉。", "prompt_audio": "b.wav", "emo_vector": [0, 0, 0.6, 0, 0, 0.3, 0, 0], "emo_alpha": 0.5},
        {"input_text": "Listen.", "prompt_audio": "b.wav", "emo_audio": "voices/a.wav", "emo_weight": 0.7},
        {"input_text": "气死我了！", "prompt_audio": "b.wav", "use_emo_text": True},
        {"input_text": "Fine.", "prompt_audio": "b.wav", "use_emo_text": True, "emo_text": "I am furious"},
        {"input_text": "Plain.", "prompt_audio": "b.wav"},
    ])
    happy, sad, clip, from_text, given_text, plain = list(iter_job(path, make_sources(path, None, JobConfig())))
    assert happy.emotion.vector == (0.8, 0.0, 0.0, 0.0, 0.0, 0.0, 0.2, 0.0) and happy.emotion.weight == 1.0
    assert sad.emotion.vector[2] == 0.6 and sad.emotion.weight == 0.5 and sad.emotion.audio is None
    assert clip.emotion.audio == (job_dir / "voices" / "a.wav").resolve() and clip.emotion.weight == 0.7
    assert from_text.emotion.from_text and from_text.emotion.text is None
    assert given_text.emotion.text == "I am furious"
    assert plain.emotion is None and not happy.warnings  # known fields: no "unknown field" warning


@pytest.mark.parametrize("fields, message", [
    ({"emo_vector": [0.5, 0.5]}, "has 2 values; give 8"),
    ({"emo_vector": {"joy": 0.5}}, "unknown emotions ['joy']"),
    ({"emo_vector": [2, 0, 0, 0, 0, 0, 0, 0]}, "happy=2.0"),
    ({"emo_vector": "happy"}, "must be a list of 8 numbers"),
    ({"emo_vector": [0.5] + [0] * 7, "emo_audio_prompt": "b.wav"}, "choose one of them"),
    ({"emo_alpha": 0.5}, "needs a source"),
    ({"emo_vector": [0.5] + [0] * 7, "emo_alpha": 1.5}, "weight 1.5 must be in [0, 1]"),
    ({"emo_text": "angry"}, '"use_emo_text": true'),
    ({"use_emo_text": "yes"}, "'use_emo_text' must be true/false"),
    ({"emo_audio_prompt": "missing.wav"}, "missing.wav"),
])
def test_bad_emotion_fields_name_the_line_and_the_fix(job_dir, fields, message):
    path = write_jsonl(job_dir / "job.jsonl", [{"input_text": "Hi.", "prompt_audio": "b.wav", **fields}])
    [item] = list(iter_job(path, make_sources(path, None, JobConfig())))
    assert isinstance(item, InvalidLine) and item.line_number == 1
    assert message in item.message, item.message


def test_a_lines_format_is_one_of_the_output_formats(job_dir):
    path = write_jsonl(job_dir / "job.jsonl", [
        {"input_text": "One.", "prompt_audio": "b.wav", "format": "Opus"},
        {"input_text": "Two.", "prompt_audio": "b.wav", "format": "ogg"},
        {"script": "Speaker 1: Hi.", "speakers": {"1": "b.wav"}, "format": 3},
        {"input_text": "Four.", "prompt_audio": "b.wav"},
    ])
    opus, unknown, not_text, plain = list(iter_job(path, make_sources(path, None, JobConfig())))
    assert opus.audio_format == "opus" and plain.audio_format is None and not opus.warnings
    for bad, value in ((unknown, "'ogg'"), (not_text, "3")):
        assert isinstance(bad, InvalidLine)
        assert f"format {value} is unknown; use one of wav, flac, mp3, opus" in bad.message
    report = validate_job(path)
    assert any(line == 2 and "format 'ogg' is unknown" in message for line, _, message in report.as_table())


def test_beam_settings_are_line_fields_checked_in_the_users_language(job_dir):
    """Issue 24: ``num_beams`` / ``length_penalty`` are per-line settings (IndexTTS 2's beam search): typed, range
    checked, the refusal naming the line and the field in English or Chinese."""
    import json

    from tts_app.frontend.messages import localize
    from tts_app.jobs.runner import validate_job

    lines = [{"input_text": "Hi.", "prompt_audio": "voices/a.wav", "num_beams": 0},
             {"input_text": "Hi.", "prompt_audio": "voices/a.wav", "num_beams": "3"},
             {"input_text": "Hi.", "prompt_audio": "voices/a.wav", "num_beams": 2, "length_penalty": 0.5}]
    (job_dir / "beams.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    report = validate_job(job_dir / "beams.jsonl")
    rows = {r.line: r for r in report.rows if r.line}
    assert set(rows) == {1, 2} and all(r.status == "error" for r in rows.values())
    assert localize(rows[1].message, "en").endswith("num_beams=0 must be in 1..8")
    assert localize(rows[1].message, "zh").endswith("num_beams=0 必须在 1..8 之间")
    assert "num_beams='3'" in localize(rows[2].message, "en")
