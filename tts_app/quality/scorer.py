"""The scores of one take (a segment's audio or a whole clip): intelligibility (ASR transcript -> CER / WER,
``tts_app.quality.text``), speaker similarity to the reference (``tts_app.quality.speaker``) and the cheap signal
checks (``tts_app.quality.signal``).

    scorer = TakeScorer(asr_backend("faster-whisper:base"), SpeakerEncoder())   # nothing loads yet
    scores = scorer.score(samples, 24000, "the text", reference=(ref_samples, 24000))
    scores.to_dict()   # {"transcript": ..., "metric": "wer", "error_rate": 0.05, "similarity": 0.86, ...}

Who calls it: the ``score`` command (``tts_app.quality.cli``) and the engine's take checker
(``tts_app.engine.takes``), on their own threads (never the engine core's).
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import asdict, dataclass

import numpy as np

from tts_app.audio.transcribe import AsrUnavailableError
from tts_app.frontend.messages import message_of
from tts_app.quality.asr import AsrBackend
from tts_app.quality.signal import SignalChecks, check_signal
from tts_app.quality.speaker import SpeakerEncoder, similarity
from tts_app.quality.text import CER, WER, error_rate, language_of

# Reference embeddings kept (by ``ReferenceAudio.key``): a job reuses a few voices across thousands of lines.
REFERENCE_EMBEDDINGS_KEPT = 32


@dataclass(frozen=True)
class TakeScores:
    """The scores of one take.

    Attributes:
        transcript: what the ASR heard (None: no ASR).
        metric: ``"cer"`` (Chinese text) or ``"wer"`` (other); None without ASR.
        error_rate: CER / WER of ``transcript`` against the text (>= 0; above 1 possible); None without ASR.
        similarity: cosine of the take's and the reference's speaker embeddings (``[0, 1]`` for Resemblyzer); None
            without a reference, a speaker encoder, or enough speech.
        signal: the cheap checks (silence, clipping, length per character, cut at the cap).
        score_s: seconds the scoring took.
        asr_model, speaker_model: what scored it ("faster-whisper:base", "resemblyzer"), None when not used.
        error: why the take could not be scored (a model failed to load), None when it was.
    """

    transcript: str | None
    metric: str | None
    error_rate: float | None
    similarity: float | None
    signal: SignalChecks
    score_s: float = 0.0
    asr_model: str | None = None
    speaker_model: str | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        """Plain JSON-able record (sidecar, results.jsonl, ``score --json``); floats rounded to 4 places."""
        out = asdict(self)
        out["error"] = None if self.error is None else str(self.error)
        for key in ("error_rate", "similarity", "score_s"):
            if out[key] is not None:
                out[key] = round(float(out[key]), 4)
        return out


class TakeScorer:
    """Scores takes with an ASR backend and a speaker encoder (either may be None: that score is then skipped).
    Thread-safe; the models load on first use.

    Args:
        asr: the speech recogniser (``tts_app.quality.asr.asr_backend``), or None.
        speaker: the speaker encoder, or None.
    """

    def __init__(self, asr: AsrBackend | None, speaker: SpeakerEncoder | None):
        self.asr = asr
        self.speaker = speaker
        self._references: collections.OrderedDict[str, np.ndarray | None] = collections.OrderedDict()
        self._lock = threading.Lock()

    def num_bytes(self) -> int:
        """Bytes its loaded models hold (what the memory budget counts; ``tts_app.engine.takes``)."""
        return sum(int(getattr(m, "num_bytes", lambda: 0)()) for m in (self.asr, self.speaker) if m is not None)

    def reference_embedding(self, samples: np.ndarray, sampling_rate: int, key: str = "") -> np.ndarray | None:
        """The reference clip's speaker embedding, kept by ``key`` (``ReferenceAudio.key``; "" = not kept)."""
        if self.speaker is None:
            return None
        if key:
            with self._lock:
                if key in self._references:
                    self._references.move_to_end(key)
                    return self._references[key]
        embedding = self.speaker.embed(samples, sampling_rate)
        if key:
            with self._lock:
                self._references[key] = embedding
                while len(self._references) > REFERENCE_EMBEDDINGS_KEPT:
                    self._references.popitem(last=False)
        return embedding

    def score(self, samples: np.ndarray, sampling_rate: int, text: str, *,
              reference: tuple[np.ndarray, int] | None = None, reference_key: str = "",
              truncated: bool = False) -> TakeScores:
        """The scores of a take of ``text``.

        Args:
            samples: float32 mono ``(num_samples,)`` in [-1, 1].
            sampling_rate: Hz.
            text: what the take should say.
            reference: the reference clip ``(samples, sampling_rate)`` its voice should match, or None.
            reference_key: a cache key of the reference (its embedding is computed once per key).
            truncated: the engine cut the take at ``max_new_tokens``.

        Never raises for a model that cannot load: the scores then carry ``error`` (the message) and the signal
        checks only.
        """
        started = time.perf_counter()
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        signal = check_signal(samples, sampling_rate, text, truncated=truncated)
        transcript = rate = metric = sim = None
        try:
            if self.asr is not None:
                if samples.size:
                    transcript = self.asr.transcribe(samples, sampling_rate, language=language_of(text))
                else:
                    transcript = ""
                scored = error_rate(text, transcript)
                metric, rate = scored.metric, scored.value
            if self.speaker is not None and reference is not None:
                ref = self.reference_embedding(reference[0], reference[1], reference_key)
                sim = similarity(self.speaker.embed(samples, sampling_rate), ref) if samples.size else None
        except AsrUnavailableError as exc:
            return TakeScores(transcript, metric, rate, sim, signal, time.perf_counter() - started,
                              getattr(self.asr, "name", None), getattr(self.speaker, "name", None),
                              error=message_of(exc))
        return TakeScores(transcript=transcript, metric=metric, error_rate=rate, similarity=sim, signal=signal,
                          score_s=time.perf_counter() - started, asr_model=getattr(self.asr, "name", None),
                          speaker_model=getattr(self.speaker, "name", None) if reference is not None else None)


__all__ = ["CER", "WER", "TakeScores", "TakeScorer"]
