"""Server-wide state of the web app, built once in ``launch.main`` and passed to the handlers. No gradio import.

Everything here is shared by all users on purpose (one runtime: engine, reference preparer and cache; one memory
history); per-user state lives in gradio session state or in dicts keyed by the session hash (``cancel_events``).
"""

from __future__ import annotations

import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tts_app.audio.preparer import ReferencePreparer
from tts_app.config import EngineConfig, FrontendConfig, ModelConfig, ReferenceConfig
from tts_app.monitor import MemoryHistory
from tts_app.runtime import Runtime
from tts_app.audio.transcribe import DEFAULT_ASR_MODEL, Transcriber
from tts_app.voices import VoiceLibrary


@dataclass
class AppContext:
    """What every handler needs.

    Attributes:
        model_config, engine_config: what was asked for on the command line.
        runtime: the loaded model's runtime (engine, reference preparer, model info), or None when the model could
            not be loaded (``load_error`` says why).
        load_error: the message shown in the UI when the model is missing.
        output_root: folder for per-request and per-job outputs (WAV, SRT, sidecar JSON, ZIP); a temporary folder by
            default.
        lang: "zh", "en" or None (browser decides).
        voices_dir: folder of the voice library; None = ``output_root / "voices"``.
        voices: the ``VoiceLibrary`` (saved voices + bundled examples), shared by all users.
        asr_model: Whisper checkpoint for automatic reference transcripts (None = the default, "none" = off).
    """

    model_config: ModelConfig
    engine_config: EngineConfig
    runtime: Runtime | None = None
    load_error: str | None = None
    reference_config: ReferenceConfig = field(default_factory=ReferenceConfig)
    frontend_config: FrontendConfig = field(default_factory=FrontendConfig)
    output_root: Path | None = None  # None: a temporary folder, removed when the app stops
    lang: str | None = None
    voices_dir: Path | None = None
    voices: VoiceLibrary | None = None
    asr_model: str | None = None
    _transcriber: Transcriber | None = None
    history: MemoryHistory = field(default_factory=MemoryHistory)
    cancel_events: dict[str, threading.Event] = field(default_factory=dict)
    running_jobs: set[str] = field(default_factory=set)  # session hashes with a batch job in progress
    _last_oom_count: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _no_model_references: ReferencePreparer | None = None

    def __post_init__(self) -> None:
        self.owns_output_root = self.output_root is None
        if self.output_root is None:
            self.output_root = Path(tempfile.mkdtemp(prefix="tts_app_"))
        if self.voices is None:
            self.voices = VoiceLibrary(self.voices_dir if self.voices_dir is not None else self.output_root / "voices")

    @property
    def engine(self):
        """The running engine, or None without a model."""
        return self.runtime.engine if self.runtime is not None else None

    @property
    def references(self) -> ReferencePreparer:
        """The reference preparer: the runtime's (at the model's rate); without a model, one at
        ``ReferenceConfig.default_sampling_rate`` so the quality report still works."""
        if self.runtime is not None:
            return self.runtime.references
        with self._lock:
            if self._no_model_references is None:
                self._no_model_references = ReferencePreparer(self.reference_config.default_sampling_rate,
                                                              self.reference_config)
            return self._no_model_references

    def close(self) -> None:
        """Stop the engine and remove the temporary output folder (a user-given --output-dir is kept)."""
        import shutil

        if self.runtime is not None:
            self.runtime.close()  # joins the worker (see Engine.shutdown)
        if self.owns_output_root:
            shutil.rmtree(self.output_root, ignore_errors=True)

    @property
    def transcriber(self) -> Transcriber:
        """The shared ASR pipeline (loaded on first use, on the model's device)."""
        with self._lock:
            if self._transcriber is None:
                device = self.engine.device if self.engine is not None else "cpu"
                model = self.asr_model if self.asr_model is not None else DEFAULT_ASR_MODEL
                self._transcriber = Transcriber(model, device=device)
            return self._transcriber

    def cancel_event(self, session_hash: str) -> threading.Event:
        """The cancel flag of one browser session's batch job (created on first use)."""
        with self._lock:
            return self.cancel_events.setdefault(session_hash or "anonymous", threading.Event())
