"""The one place that prepares reference audio for the loaded model.

``ReferencePreparer`` is built once next to the engine (``tts_app.runtime.Runtime.references``) with the model's
sampling rate, one ``ReferenceConfig`` and one ``ReferenceCache``; the web UI, the API, ``synth`` and the JSONL job
runner all call ``prepare``, so the same clip is cleaned the same way (and only once) whichever way it arrives.
Without a model (the web app's quality report when loading failed) one is built at
``ReferenceConfig.default_sampling_rate``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tts_app.audio.reference import (ReferenceCache, ReferenceReport, ReferenceSource, prepare_reference,
                                     source_sha256)
from tts_app.config import ReferenceConfig
from tts_app.errors import ReferenceAudioError
from tts_app.request import ReferenceAudio


@dataclass(frozen=True)
class PreparedReference:
    """A cleaned reference clip with what is known about it.

    Attributes:
        audio: the cleaned clip (float32 ``(num_samples,)`` at the model's rate).
        report: the quality report (``report.warnings`` are for the user).
        name: the name messages use (the file name, or the name given).
        sha256: hex SHA-256 of the source as given (the file's bytes, the uploaded bytes, or for an array its dtype,
            shape, rate and samples), before any cleanup.
        voice: the voice library's name for it when it came from there (``tts_app.voices``), else None.
    """

    audio: ReferenceAudio
    report: ReferenceReport
    name: str
    sha256: str
    voice: str | None = None

    @property
    def warnings(self) -> list[str]:
        return list(self.report.warnings)

    @property
    def text(self) -> str | None:
        """The transcript to send with this clip: the one given, shortened to the sentences a crop kept, or None
        when none was given or the crop could not be matched to it (``ReferenceReport.reference_text``)."""
        return self.report.reference_text

    def metadata(self) -> dict[str, Any]:
        """The sidecar's ``reference`` block: name, saved voice name (or null), source hash, cleaned duration (s) and
        rate (Hz), the cleanup that ran and what it changed (``ReferenceReport.cleanup`` / ``changes``), warnings."""
        return {"name": self.name, "voice": self.voice, "sha256": self.sha256,
                "cleaned_duration_s": round(self.audio.duration_s, 3), "sampling_rate": self.audio.sampling_rate,
                "cropped": bool(self.report.cropped), "cleanup": self.report.cleanup,
                "changes": list(self.report.changes), "warnings": self.warnings}


def check_reference_cleanup(config: ReferenceConfig, cleanup: str) -> ReferenceConfig:
    """``config`` with ``cleanup`` set, or ``InputError`` naming the choices (a request's ``reference_cleanup``)."""
    from tts_app.config import REFERENCE_CLEANUPS
    from tts_app.errors import InputError

    if cleanup not in REFERENCE_CLEANUPS:
        raise InputError(f"reference_cleanup {cleanup!r} is not one of {', '.join(REFERENCE_CLEANUPS)} (auto: only "
                         "what the model's own tool does; full: trim, filter, level; off: as given)")
    return dataclasses.replace(config, cleanup=cleanup)


class ReferencePreparer:
    """Cleans reference audio for one model: at its sampling rate, with one config and one shared cache.

    Args:
        sampling_rate: Hz the model expects (``Engine.sampling_rate``).
        config: cleanup settings.
        cache: processed references shared by every caller; None = a new one of ``config.cache_entries``.

    Thread-safe (the cache is); many users' requests may call ``prepare`` at once.
    """

    def __init__(self, sampling_rate: int, config: ReferenceConfig = ReferenceConfig(),
                 cache: ReferenceCache | None = None):
        self.sampling_rate = int(sampling_rate)
        self.config = config
        self.cache = cache if cache is not None else ReferenceCache(config.cache_entries)

    def prepare(self, source: ReferenceSource, *, reference_text: str | None = None,
                name: str | None = None, cleanup: str | None = None) -> PreparedReference:
        """Decode, clean and check a reference clip (``tts_app.audio.reference.prepare_reference``), cached.

        Args:
            source: file path, file bytes or ``(samples, sampling_rate)``.
            reference_text: its transcript, if known. When the clip has to be cropped it is cut at a sentence end
                of the transcript where one matches; ``PreparedReference.text`` is then the kept sentences (None
                when no crop could be matched), so callers send ``.text`` to the model, not what they were given.
            name: name for messages (default: the file name).
            cleanup: the request's ``reference_cleanup`` ("auto", "full", "off"; ``REFERENCE_CLEANUPS``); None =
                this preparer's ``config.cleanup`` (default "auto").

        Raises:
            ReferenceAudioError: unusable clip (missing, corrupt, silent, too short); the message names it.
            InputError: ``cleanup`` is not one of ``REFERENCE_CLEANUPS``.
        """
        from tts_app.metrics import count_reference_failure

        if isinstance(source, (str, Path)) and not Path(source).is_file():
            count_reference_failure("not_found")
            raise ReferenceAudioError(f"reference audio {name or Path(source).name!r} does not exist; give an audio "
                                      "file")
        config = self.config
        if cleanup is not None and cleanup != config.cleanup:
            config = check_reference_cleanup(config, cleanup)
        try:
            sha256 = source_sha256(source, name)  # once: the cache key's content part and the result's sha256
            audio, report = prepare_reference(source, target_sampling_rate=self.sampling_rate, config=config,
                                              reference_text=reference_text or None, cache=self.cache, name=name,
                                              sha256=sha256)
        except ReferenceAudioError as exc:
            count_reference_failure(exc.notice.code if exc.notice is not None else None)
            raise
        return PreparedReference(audio=audio, report=report, name=report.name, sha256=sha256)
