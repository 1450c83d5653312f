"""Server-wide state of the web app, built once in ``tts_app.server.main.main`` and passed to the handlers. No
gradio import.

Everything here is shared by all users on purpose (one runtime: engine, reference preparer and cache; one memory
history; one job manager, whose jobs each belong to the browser that started them); per-user state lives in gradio
session or browser state.
"""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tts_app import output_layout
from tts_app.audio.preparer import ReferencePreparer
from tts_app.config import EngineConfig, FrontendConfig, ModelConfig, ReferenceConfig, UploadConfig
from tts_app.jobs.manager import JobManager
from tts_app.monitor import MEMORY_SAMPLE_PERIOD_S, MemoryHistory, MemorySampler
from tts_app.runtime import Runtime
from tts_app.audio.transcribe import Transcriber, transcriber_from
from tts_app.history import DEFAULT_HISTORY_SIZE, HistoryStore
from tts_app.voices import VoiceLibrary

if TYPE_CHECKING:
    from tts_app.jobs.cluster import WorkerPool


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:  # not empty (a history), or already gone
        pass


def default_output_root() -> Path:
    """Where the app keeps its outputs when ``--output-dir`` is not given: ``$XDG_DATA_HOME/tts_app`` (else
    ``~/.local/share/tts_app``). A lasting folder, not a temporary one, so jobs survive a restart."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tts_app"


@dataclass(frozen=True)
class AppSettings:
    """What the command line sets (``tts_app.server.main.build_context``); fixed while the server runs.

    Attributes:
        model_config, engine_config: the model and engine asked for.
        reference_config, frontend_config: reference-audio cleanup and text front-end settings.
        output_root: folder for per-request and per-job outputs (WAV, SRT, sidecar JSON, ZIP, job folders);
            ``default_output_root()`` when None.
        lang: "zh", "en" or None (browser decides).
        voices_dir: folder of the voice library; None = ``output_root / "voices"``.
        asr_model: Whisper checkpoint for automatic reference transcripts (None = the default, "none" = off).
        upload_config: per-kind upload size limits.
        history_size: generations kept per owner in the Single tab's history (``--history-size``; 0 = off).
        api_keys: the HTTP API's keys (``ServerConfig.api_keys``): a client sending one owns its files and jobs by
            that key (``AppContext.owner``) rather than by its cookie.
    """

    model_config: ModelConfig
    engine_config: EngineConfig
    reference_config: ReferenceConfig = field(default_factory=ReferenceConfig)
    frontend_config: FrontendConfig = field(default_factory=FrontendConfig)
    output_root: Path | None = None
    lang: str | None = None
    voices_dir: Path | None = None
    asr_model: str | None = None
    upload_config: UploadConfig = field(default_factory=UploadConfig)
    history_size: int = DEFAULT_HISTORY_SIZE
    api_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        root = default_output_root() if self.output_root is None else Path(self.output_root)
        object.__setattr__(self, "output_root", root)  # frozen: resolved once, here


@dataclass
class AppContext:
    """What every handler needs: the command line's ``settings`` and the server's live state.

    Attributes:
        settings: what the command line set (``AppSettings``); its fields read as ``ctx.<name>`` too
            (``ctx.output_root``, ``ctx.lang``...), read-only.
        runtime: the loaded model's runtime (engine, reference preparer, model info), or None when the model could
            not be loaded (``load_error`` says why).
        load_error: the message shown in the UI when the model is missing.
        voices: the ``VoiceLibrary`` (saved voices + bundled examples), shared by all users; built from
            ``settings.voices_dir`` when None.
        history_store: the ``HistoryStore`` of every owner, under ``output_root / "single"`` (each owner's in its
            own folder, ``browser_dir(headers) / "_history"``).
        jobs: the server's durable jobs (``tts_app.jobs.manager``); built by ``start_jobs`` once the model is loaded
            (or failed to load).
        pool: Ray workers that run the Batch tab's jobs (``app.py --ray``; ``tts_app.jobs.cluster.WorkerPool``),
            or None (jobs run on ``runtime``). Stopped by ``tts_app.server.main.main``.
        history: the memory gauge's history (fed by ``memory_sampler``).
    """

    settings: AppSettings
    runtime: Runtime | None = None
    load_error: str | None = None
    voices: VoiceLibrary | None = None
    history_store: HistoryStore | None = None
    pool: WorkerPool | None = None
    history: MemoryHistory = field(default_factory=MemoryHistory)
    jobs: JobManager | None = None
    _transcriber: Transcriber | None = None
    _sampler: MemorySampler | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _no_model_references: ReferencePreparer | None = None
    _references_pruned_s: float | None = None

    def __post_init__(self) -> None:
        self.output_root.mkdir(parents=True, exist_ok=True)
        if self.voices is None:
            self.voices = VoiceLibrary(self.voices_dir if self.voices_dir is not None
                                       else output_layout.voices_dir(self.output_root))
        if self.history_store is None:
            self.history_store = HistoryStore(self.output_root / output_layout.SESSIONS_DIR, self.history_size)

    # -- the command line's settings, read-only under their old names (one source: ``settings``) ------------------
    model_config = property(lambda self: self.settings.model_config)
    engine_config = property(lambda self: self.settings.engine_config)
    reference_config = property(lambda self: self.settings.reference_config)
    frontend_config = property(lambda self: self.settings.frontend_config)
    output_root = property(lambda self: self.settings.output_root)
    lang = property(lambda self: self.settings.lang)
    voices_dir = property(lambda self: self.settings.voices_dir)
    asr_model = property(lambda self: self.settings.asr_model)
    upload_config = property(lambda self: self.settings.upload_config)
    history_size = property(lambda self: self.settings.history_size)
    api_keys = property(lambda self: self.settings.api_keys)

    def start_jobs(self) -> None:
        """(Re)build the job manager for the current runtime, with the shared ``transcriber``: jobs a stopped server
        left running come back "interrupted"; jobs that ended more than ``upload_config.keep_jobs_s`` ago are
        removed, the inputs of failed ones after ``upload_config.keep_failed_inputs_s``, and so are reference
        clips unused for longer than ``upload_config.cache_max_age_s``."""
        from tts_app.jobs.store import JobStore

        store = JobStore(self.output_root)
        store.prune(self.upload_config.keep_jobs_s, self.upload_config.keep_failed_inputs_s)
        self._prune_references_when_due()
        # the same automatic transcripts as the Single tab and ``batch``: a line with a reference clip and no
        # transcript gets one (``fill_transcript``; on Ray workers each builds its own); nothing loads until a line
        # needs it
        self.jobs = JobManager(store, self.runtime, pool=self.pool,
                               transcriber=self.transcriber if self.runtime is not None else None)

    def owner(self, headers) -> str:
        """Who a request comes from (``tts_app.server.sessions.request_owner``): its API key's owner when it sends
        one of ``api_keys``, else its browser cookie's. Its files and jobs are served to that owner only.

        Args:
            headers: the request's headers (``gr.Request.headers``; None = no headers: "anonymous").
        """
        from tts_app.server.sessions import request_owner

        return request_owner(headers or {}, self.api_keys)

    def browser_dir(self, headers) -> Path:
        """The folder of one owner's outputs: ``output_root/single/<owner(headers)>`` (``tts_app.server.sessions``:
        the server serves files there only to that owner). The cookie, not gradio's session id, names it: the
        session id changes at every page load."""
        return output_layout.browser_dir(self.output_root, self.owner(headers))

    def session_dir(self, session_hash: str | None, headers=None) -> Path:
        """One browser session's (tab's) folder for single-synthesis outputs, inside its owner's folder:
        ``browser_dir(headers) / <session>`` (``tts_app.output_layout.session_dir``; removed when the session
        ends)."""
        return output_layout.session_dir(self.output_root, self.owner(headers), session_hash)

    def end_session(self, session_hash: str | None, headers=None) -> None:
        """A browser session ended (tab closed): remove its single-synthesis outputs. Jobs stay."""
        shutil.rmtree(self.session_dir(session_hash, headers), ignore_errors=True)

    def reference_clip(self, prepared, headers) -> Path:
        """The cleaned reference clip ``prepared`` as a 16-bit WAV for the owner's player:
        ``browser_dir(headers)/references/<clip key>.wav`` (written once per clip and model rate; touched at every
        use, so its age counts from its last use; older clips go, ``prune_reference_clips``)."""
        from tts_app.audio.post import write_wav_atomic

        folder = output_layout.references_dir(self.output_root, self.owner(headers))
        path = folder / f"{prepared.audio.key or prepared.sha256[:32]}.wav"
        if path.is_file():
            os.utime(path)
        else:
            write_wav_atomic(path, prepared.audio.samples, prepared.audio.sampling_rate)
        self._prune_references_when_due()
        return path

    def prune_reference_clips(self) -> int:
        """Remove cleaned reference clips not used for ``upload_config.cache_max_age_s`` (the age gradio's copies
        of the uploads they were made from are kept), except those of a saved voice; returns how many went. Also
        the shared ``output_root/references`` folder of earlier versions, by the same rule. (No job reads these
        files: a job cleans its references from its own folder's copies.)"""
        import time

        cutoff = time.time() - self.upload_config.cache_max_age_s
        keep = self.voices.cleaned_keys() if self.voices is not None else set()
        folders = [self.output_root / output_layout.LEGACY_REFERENCES_DIR,
                   *(self.output_root / output_layout.SESSIONS_DIR).glob(f"*/{output_layout.REFERENCES_DIR}")]
        removed = 0
        for folder in folders:
            for clip in folder.glob("*.wav") if folder.is_dir() else ():
                try:
                    if clip.stem not in keep and clip.stat().st_mtime < cutoff:
                        clip.unlink()
                        removed += 1
                except OSError:  # gone already (another thread), or not ours to remove
                    continue
        return removed

    def _prune_references_when_due(self) -> None:
        """``prune_reference_clips`` at most every ``upload_config.cache_check_every_s``."""
        import time

        now = time.monotonic()
        with self._lock:
            if self._references_pruned_s is not None and \
                    now - self._references_pruned_s < self.upload_config.cache_check_every_s:
                return
            self._references_pruned_s = now
        self.prune_reference_clips()

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

    def memory_sampler(self) -> MemorySampler:
        """The app's one memory sampler (``tts_app.monitor.MemorySampler``), started on first use: it alone feeds
        ``history`` (the engine's device, its OOM events), once per ``MEMORY_SAMPLE_PERIOD_S``, however many pages
        show the gauge. Stopped by ``close``."""
        from tts_app.monitor import read_memory

        with self._lock:
            if self._sampler is None:
                def read():
                    engine = self.engine
                    return read_memory(engine.stats().device if engine is not None else "cpu")

                def num_oom():
                    engine = self.engine
                    return engine.stats().num_oom if engine is not None else None

                self._sampler = MemorySampler(self.history, read, num_oom, period_s=MEMORY_SAMPLE_PERIOD_S).start()
            return self._sampler

    def close(self) -> None:
        """Stop the memory sampler and the jobs (they end "interrupted" and resume after a restart), then the
        engine; remove the single-synthesis outputs of every session and the players' reference clips (job folders
        and each owner's history are kept)."""
        if self._sampler is not None:
            self._sampler.stop()
        if self.jobs is not None:
            self.jobs.shutdown()
        if self.runtime is not None:
            self.runtime.close()  # joins the worker (see Engine.shutdown)
        browsers = self.output_root / output_layout.SESSIONS_DIR
        if not browsers.is_dir():
            return
        for browser in browsers.iterdir():
            for folder in (browser.iterdir() if browser.is_dir() else ()):
                if folder.name == output_layout.HISTORY_DIR:
                    continue
                if folder.is_dir():
                    shutil.rmtree(folder, ignore_errors=True)
                else:
                    folder.unlink(missing_ok=True)
            _remove_if_empty(browser)
        _remove_if_empty(browsers)

    @property
    def transcriber(self) -> Transcriber:
        """The shared ASR pipeline (loaded on first use, on the model's device)."""
        with self._lock:
            if self._transcriber is None:
                device = self.engine.device if self.engine is not None else "cpu"
                self._transcriber = transcriber_from(self.asr_model, device)
            return self._transcriber
