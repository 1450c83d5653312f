"""Where a reference clip is cut: which speech to keep (crop at a pause, at a sentence end the transcript can
follow), which stretches of the original timeline that becomes (margins, shortened pauses), and the splice.
Pure numpy; times in seconds of the original timeline unless named otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from tts_app.audio.analysis import LEVEL_FRAME_SAMPLES
from tts_app.audio.vad import VAD_SAMPLING_RATE, SpeechSegment

# A crop keeps at least this share of the speech the longest possible crop keeps, so preferring a long pause
# (sentence end) over a short one (between words) never throws away most of the clip.
CROP_MIN_KEEP_SHARE = 2.0 / 3.0
# Cross-fade at each splice (removed pause) and fade at both ends, in ms: avoids clicks in a noisy background.
SPLICE_FADE_MS = 10.0
# Crop at a sentence end of the transcript: the kept share of the speech and the kept share of the transcript's
# characters (speaking time is roughly proportional to characters) may differ by at most this much, and by less
# than half the distance to the neighbouring sentence ends (so the match is not ambiguous).
SENTENCE_MATCH_TOLERANCE = 0.1
# ... and the crop must land on a pause at least this long (speakers pause at sentence ends; 250 ms is a common
# lower bound of sentence-final pauses in read speech, shorter ones are mostly between words).
MIN_SENTENCE_PAUSE_S = 0.25
# Sentence ends: CJK and Latin terminal punctuation, with closing quotes or brackets after it. A "." ends a
# sentence only before a space or the end, so 3.5 and e.g. are left alone.
_SENTENCE_END = re.compile(r"(?:[。！？!?；;…]+|\.(?=\s|$))[\"'”’』」）)\]]*")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")
_WORD_CHAR = re.compile(r"[^\W_]")
# Weight of a CJK character against a Latin letter or digit in speaking time (about one syllable of ~0.2 s versus
# ~0.07 s per letter of English read speech).
CJK_CHAR_WEIGHT = 3.0


@dataclass(frozen=True)
class CropPlan:
    """Which speech segments to keep and what transcript goes with them.

    Attributes:
        num_kept: the first ``num_kept`` segments are kept.
        cropped: speech was dropped (``num_kept`` < number of segments).
        reference_text: the transcript of the kept audio: the given one, its first sentences, or None (none
            given, or it could not be matched to the kept audio).
        text_status: None (no transcript given), "kept" (whole transcript still matches), "shortened" (cropped at
            a sentence end, transcript cut there) or "dropped" (the crop cannot be matched to the transcript).
        sentences_kept: sentences of the transcript kept when "shortened", else 0.
    """

    num_kept: int
    cropped: bool
    reference_text: str | None
    text_status: str | None
    sentences_kept: int = 0


def split_at_quietest(segments: list[SpeechSegment], samples_16k: np.ndarray, max_speech_s: float
                      ) -> list[SpeechSegment]:
    """Split the first segment (longer than ``max_speech_s``, no VAD pause) at its quietest 60 ms between
    ``max_speech_s / 2`` and ``max_speech_s`` from its start: the likeliest gap between two words. The two halves
    touch, so no margin is added at the cut (see ``pieces``)."""
    first = segments[0]
    frame = LEVEL_FRAME_SAMPLES
    lo = int((first.start_s + max_speech_s / 2) * VAD_SAMPLING_RATE)
    hi = int((first.start_s + max_speech_s) * VAD_SAMPLING_RATE)
    window = samples_16k[lo:hi].astype(np.float64)
    num = len(window) // frame
    if num < 3:
        cut_s = first.start_s + max_speech_s
    else:
        power = np.mean(window[: num * frame].reshape(num, frame) ** 2, axis=1)
        smoothed = np.convolve(power, np.ones(3) / 3, mode="same")  # 3 frames = 60 ms
        cut_s = (lo + (int(np.argmin(smoothed[1:-1])) + 1.5) * frame) / VAD_SAMPLING_RATE
    return [SpeechSegment(first.start_s, cut_s), SpeechSegment(cut_s, first.end_s), *segments[1:]]


def sentence_ends(text: str) -> list[tuple[int, float]]:
    """Sentence ends inside ``text`` (not the end of the text itself), as ``(offset after the sentence, share of
    the text's speaking weight before it)``; the weight counts letters/digits 1 and CJK characters
    ``CJK_CHAR_WEIGHT``, so punctuation and spaces count nothing."""
    def weight(part: str) -> float:
        cjk = len(_CJK.findall(part))
        return cjk * CJK_CHAR_WEIGHT + len(_WORD_CHAR.findall(part)) - cjk

    total = weight(text)
    if total <= 0:
        return []
    ends = []
    for match in _SENTENCE_END.finditer(text):
        before = weight(text[: match.end()])
        if 0 < before < total:
            ends.append((match.end(), before / total))
    return ends


def plan_crop(segments: list[SpeechSegment], max_speech_s: float, *, head_only: bool, duration_s: float,
              reference_text: str | None = None) -> CropPlan:
    """The first ``k`` segments, with at most ``max_speech_s`` of speech, ending at the best pause.

    Segments end at VAD pauses (a first segment longer than ``max_speech_s`` was split at its quietest point), so
    the crop never lands inside a word. A last segment running into the end of a head-only decode was cut by the
    decode limit, not by a pause, so it is dropped when others remain. Among the cut points that keep at least
    ``CROP_MIN_KEEP_SHARE`` of the speech the longest crop keeps:

    - with a transcript, the cut that ends where one of its sentences ends (see ``SENTENCE_MATCH_TOLERANCE``,
      ``MIN_SENTENCE_PAUSE_S``) wins, the longest such cut first, and the transcript is cut after that sentence;
    - otherwise the cut before the longest pause wins (a sentence end rather than a breath between words), and a
      transcript given is dropped, since it no longer matches the audio.
    """
    text = (reference_text or "").strip() or None
    candidates: list[tuple[int, float]] = []  # (number of segments kept, speech seconds kept)
    total = 0.0
    for count, seg in enumerate(segments, start=1):
        total += seg.duration_s
        if candidates and total > max_speech_s + 1e-6:
            break
        candidates.append((count, total))
    if head_only and len(candidates) > 1 and segments[candidates[-1][0] - 1].end_s >= duration_s - 0.05:
        candidates.pop()
    if candidates[-1][0] == len(segments):
        return CropPlan(len(segments), False, text, "kept" if text else None)

    def pause_after(count: int) -> float:
        return segments[count].start_s - segments[count - 1].end_s

    greedy_s = candidates[-1][1]
    eligible = [option for option in candidates if option[1] >= CROP_MIN_KEEP_SHARE * greedy_s]
    if text is not None:
        speech_total = sum(seg.duration_s for seg in segments)
        ends = sentence_ends(text)
        shares = [share for _, share in ends]
        for count, kept_s in sorted(eligible, reverse=True):
            if pause_after(count) < MIN_SENTENCE_PAUSE_S:
                continue
            share = kept_s / speech_total
            j = int(np.argmin([abs(share - s) for s in shares])) if shares else -1
            if j < 0:
                break
            neighbours = [abs(shares[j] - s) for s in (shares[j - 1: j] + shares[j + 1: j + 2])] + [2.0]
            tolerance = min(SENTENCE_MATCH_TOLERANCE, 0.5 * min(neighbours), shares[j], 1.0 - shares[j])
            if abs(share - shares[j]) <= tolerance:
                return CropPlan(count, True, text[: ends[j][0]].strip(), "shortened", j + 1)
    count = max(eligible, key=lambda option: (pause_after(option[0]), option[0]))[0]
    return CropPlan(count, True, None, "dropped" if text else None)


def pieces(kept: list[SpeechSegment], segments: list[SpeechSegment], *, start_s: float, end_s: float,
           margin_s: float, max_pause_s: float, duration_s: float) -> tuple[list[tuple[float, float]], int]:
    """Stretches of the original timeline to keep, and how many pauses were shortened.

    The kept speech runs from ``start_s`` to ``end_s`` (the first and last kept speech, edges already extended over
    soft onsets/endings); ``margin_s`` more is kept before and after, bounded by the file (0, ``duration_s``) and
    never past half the pause to a dropped segment. Internal pauses longer than ``max_pause_s`` keep half that
    length after the speech before and half before the speech after.
    """
    start = max(0.0, start_s - margin_s)
    end = min(duration_s, end_s + margin_s)
    if len(kept) < len(segments):
        following = segments[len(kept)]
        end = min(end, max(end_s, kept[-1].end_s + (following.start_s - kept[-1].end_s) / 2.0))
    out: list[tuple[float, float]] = []
    num_shortened = 0
    piece_start = start
    for before, after in zip(kept, kept[1:]):
        if after.start_s - before.end_s > max_pause_s:
            out.append((piece_start, before.end_s + max_pause_s / 2.0))
            piece_start = after.start_s - max_pause_s / 2.0
            num_shortened += 1
    out.append((piece_start, end))
    return out, num_shortened


def splice(wave: np.ndarray, sampling_rate: int, stretches: list[tuple[float, float]]) -> np.ndarray:
    """Concatenate ``stretches`` (seconds) of ``wave`` (float32 ``(num_samples,)``) with ``SPLICE_FADE_MS`` linear
    cross-fades, faded in and out at both ends. Returns float32 ``(num_output_samples,)``."""
    fade = max(1, int(round(SPLICE_FADE_MS * sampling_rate / 1000.0)))
    parts = [wave[int(round(a * sampling_rate)): int(round(b * sampling_rate))].astype(np.float32)
             for a, b in stretches]
    parts = [part for part in parts if len(part)]
    out = parts[0].copy()
    for part in parts[1:]:
        n = min(fade, len(out), len(part))
        up = np.linspace(0.0, 1.0, n, dtype=np.float32)
        out = np.concatenate([out[:len(out) - n], out[len(out) - n:] * up[::-1] + part[:n] * up, part[n:]])
    n = min(fade, len(out) // 2)
    up = np.linspace(0.0, 1.0, n, dtype=np.float32)
    out[:n] *= up
    out[len(out) - n:] *= up[::-1]
    return out


def speech_power(out: np.ndarray, sampling_rate: int, kept: list[SpeechSegment],
                 stretches: list[tuple[float, float]]) -> float:
    """Mean power of the output samples that are speech (kept VAD segments mapped into the spliced timeline)."""
    mask = np.zeros(len(out), dtype=bool)
    fade = int(round(SPLICE_FADE_MS * sampling_rate / 1000.0))
    cursor = 0.0
    for index, (a, b) in enumerate(stretches):
        offset = cursor - a  # output time minus original time, in this stretch
        for seg in kept:
            s, e = max(seg.start_s, a), min(seg.end_s, b)
            if e > s:
                mask[int((s + offset) * sampling_rate): int((e + offset) * sampling_rate)] = True
        cursor += (b - a) - (fade / sampling_rate if index < len(stretches) - 1 else 0.0)
    speech = out[mask] if mask.any() else out
    return float(np.mean(np.square(speech, dtype=np.float64)))
