"""The project's error hierarchy.

Pure layers raise these with a message that names the bad value and the fix. The UI turns them into
``gr.Error`` / ``gr.Warning``; the JSONL runner turns them into a failed result line and goes on. Inside the
engine an error that ends a request becomes its ``tts_app.finish.Finish`` (``Finish.from_error``, by type); running
out of device memory is not an error class here: it is detected by type (``torch.OutOfMemoryError``) and ends a
request as ``FinishReason.OUT_OF_MEMORY``.
"""

from __future__ import annotations

from typing import Any


class TTSAppError(Exception):
    """Base class of every error this project raises on purpose."""


class InputError(TTSAppError, ValueError):
    """Bad user input (text, parameters, CLI values). The message names the item and the fix."""


class ConfigError(InputError):
    """A configuration value is out of range. ``field`` names the config field (the CLI maps it to its flag)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class ReferenceAudioError(TTSAppError, ValueError):
    """A reference audio file or array cannot be used (corrupt, empty, silent, too short).

    Attributes:
        report: the ``tts_app.audio.reference.ReferenceReport`` made up to the refusal (its ``errors`` give the
            reason), or None when the clip could not even be decoded.
        notice: the refusal as a ``tts_app.audio.notices.Notice`` (message key and values), or None for a
            plain message; lets ``for_name`` show a cached refusal under the caller's own file name. The message
            itself is then a ``tts_app.frontend.messages.Notice``, which a door renders in its user's language.
    """

    def __init__(self, message: str, *, report: Any = None, notice: Any = None):
        super().__init__(message)
        self.report = report
        self.notice = notice

    def for_name(self, name: str) -> "ReferenceAudioError":
        """The same refusal, worded for a clip called ``name`` (self when it cannot be re-worded)."""
        if self.notice is None:
            return self
        import dataclasses

        report = None if self.report is None else dataclasses.replace(self.report, name=name)
        return ReferenceAudioError(self.notice.message(name), report=report, notice=self.notice)


class ModelLoadError(TTSAppError, RuntimeError):
    """A model could not be loaded (not cached and hub unreachable, unknown architecture, bad folder)."""


class ClusterError(TTSAppError, RuntimeError):
    """A Ray cluster cannot be used: Ray is not installed, the cluster cannot be reached, it lacks the resources
    asked for, or its workers cannot load the model. The message names the cause and the fix."""


class JobLineError(TTSAppError, ValueError):
    """One line of a JSONL job is invalid. ``line_number`` is 1-based; ``reason`` is the message without the line
    number; ``code`` names the kind of problem when a caller groups them (e.g. "audio_not_found"), else None."""

    def __init__(self, line_number: int, message: str, code: str | None = None):
        super().__init__(f"line {line_number}: {message}")
        self.line_number = line_number
        self.reason = message
        self.code = code


class RequestCancelledError(TTSAppError, RuntimeError):
    """The request was cancelled by its caller before it finished."""
