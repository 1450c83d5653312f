import numpy as np
import soundfile as sf

from tts_app.audio.post import join_segments, to_srt, write_wav_atomic


def test_join_inserts_exact_pauses_and_reports_spans():
    sr = 1000
    audio, spans = join_segments([np.ones(100), np.ones(50)], [250, 999], sr)
    assert len(audio) == 100 + 250 + 50  # no pause after the last segment
    assert spans == [(0.0, 0.1), (0.35, 0.4)]
    assert np.all(audio[100:350] == 0)
    assert "00:00:00,350 --> 00:00:00,400" in to_srt(["a", "b"], spans)


def test_write_wav_atomic_leaves_only_the_decodable_file(tmp_path):
    out = write_wav_atomic(tmp_path / "x.wav", np.zeros(2400, dtype=np.float32), 24000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.wav"]
    data, sr = sf.read(out)
    assert sr == 24000 and len(data) == 2400


def test_written_files_get_ordinary_permissions(tmp_path):
    import os
    import stat

    out = write_wav_atomic(tmp_path / "y.wav", np.zeros(10, dtype=np.float32), 8000)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask


def test_segments_without_audio_get_no_subtitle_cue_and_numbering_stays_consecutive():
    sr = 1000
    _, spans = join_segments([np.ones(100), np.zeros(0), np.ones(50)], [250, 117, 100], sr)
    assert spans[1][0] == spans[1][1]  # the middle segment produced no audio
    cues = to_srt(["first", "silent", "third"], spans).strip().split("\n\n")
    assert [c.splitlines()[0] for c in cues] == ["1", "2"]
    assert "silent" not in "".join(cues) and cues[1].endswith("third")
    assert "00:00:00,467 --> 00:00:00,517" in cues[1]
    assert to_srt(["a"], [(1.0, 1.0)]) == ""
