"""One loaded model and what is built around it once, the same way for ``app.py``, ``synth`` and ``batch``.

    runtime = Runtime.load(engine_args)          # tts_app.config.EngineArgs (the CLI: engine_args_from)
    prepared = runtime.references.prepare(path)  # the one reference cleaner for this model (rate, config, cache)
    handle = runtime.engine.submit(request)
    runtime.model.to_dict()                      # what ran (model id, revision, checkpoint hash, dtype, device)
    runtime.close()

Pattern: vLLM's ``LLM`` object, which owns the engine and the input processing built for the loaded model.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path
from typing import Any, Callable

from tts_app.audio.preparer import ReferencePreparer
from tts_app.config import EngineConfig, ModelConfig, ReferenceConfig, check_device_available

logger = logging.getLogger(__name__)


def hub_revision(model_id: str, cache_dir: str | Path | None = None) -> tuple[str | None, Path | None]:
    """(commit hash, snapshot folder) of a hub id in the local Hugging Face cache, or (None, None) when ``model_id``
    is a local folder or not cached. Offline: reads the cache only (``huggingface_hub.try_to_load_from_cache``;
    a snapshot folder is named after its commit). ``cache_dir``: the hub cache (default: the hub client's)."""
    if Path(model_id).expanduser().exists():
        return None, None
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(model_id, "config.json", cache_dir=cache_dir)
    except Exception:  # noqa: BLE001 - an id the hub client rejects (bad characters) is simply "not cached"
        return None, None
    if not isinstance(found, str):
        return None, None
    snapshot = Path(found).parent
    return snapshot.name, snapshot


def checkpoint_sha256(folder: Path) -> str:
    """Hex SHA-256 identifying a checkpoint folder's content: over each file's relative path and SHA-256, in path
    order (hidden files and folders skipped). In a hub cache snapshot the files are links to blobs named after
    their own hash (SHA-256 for LFS weights, git SHA-1 for small files), so those names are used instead of
    reading gigabytes again."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts):
            continue
        if path.is_symlink() and path.resolve().parent.name == "blobs":
            file_hash = path.resolve().name
        else:
            file_digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 22), b""):
                    file_digest.update(block)
            file_hash = file_digest.hexdigest()
        digest.update(f"{relative.as_posix()}\0{file_hash}\n".encode())
    return digest.hexdigest()


class ModelInfo:
    """What was loaded, for logs and output sidecars.

    Attributes:
        model_id: the hub id or folder asked for.
        family, device, dtype, num_parameters: of the loaded adapter (device and dtype after resolving "auto").
        revision: hub commit of the cached snapshot, or None for a local folder.

    ``checkpoint_sha256()`` (see ``checkpoint_sha256``) is computed once in a background thread started here, so a
    large local folder is hashed while the first request runs; the first call waits for it.
    """

    def __init__(self, model_id: str, *, family: str, device: str, dtype: str, num_parameters: int):
        self.model_id = model_id
        self.family = family
        self.device = device
        self.dtype = dtype
        self.num_parameters = int(num_parameters)
        self.revision, snapshot = hub_revision(model_id)
        folder = snapshot if snapshot is not None else Path(model_id).expanduser()
        self._folder = folder if folder.is_dir() else None
        self._sha256: str | None = None
        self._done = threading.Event()
        threading.Thread(target=self._hash, name="checkpoint-hash", daemon=True).start()

    def _hash(self) -> None:
        try:
            if self._folder is not None:
                self._sha256 = checkpoint_sha256(self._folder)
        except OSError as exc:  # a file vanished or is unreadable: the sidecar says null, the run goes on
            logger.warning("cannot hash checkpoint %s: %s", self._folder, exc)
        finally:
            self._done.set()

    def checkpoint_sha256(self) -> str | None:
        """See the class docstring; None when the checkpoint's files are not on this machine as a folder."""
        self._done.wait()
        return self._sha256

    def to_dict(self) -> dict[str, Any]:
        """The sidecar's ``model`` block."""
        return {"id": self.model_id, "revision": self.revision, "checkpoint_sha256": self.checkpoint_sha256(),
                "family": self.family, "dtype": self.dtype, "device": self.device,
                "num_parameters": self.num_parameters}


class Runtime:
    """A started engine on one loaded model, the reference preparer for it, and what was loaded.

    Attributes:
        engine: the running ``tts_app.engine.Engine``.
        references: the ``ReferencePreparer`` at the model's sampling rate (one config, one cache for everyone).
        model: ``ModelInfo``.
        load_s: seconds ``load`` took to load the checkpoint (None when built around a loaded adapter).
        started_utc_s: ``time.time()`` when the runtime was built.
    """

    def __init__(self, engine, references: ReferencePreparer, model: ModelInfo, *, load_s: float | None = None):
        import time

        self.engine = engine
        self.references = references
        self.model = model
        self.load_s = load_s
        self.started_utc_s = time.time()

    @classmethod
    def load(cls, model_config: ModelConfig, engine_config: EngineConfig = EngineConfig(),
             reference_config: ReferenceConfig = ReferenceConfig(), *,
             on_status: Callable[[str], None] | None = None) -> "Runtime":
        """Load the model, start the engine, build the reference preparer.

        Args:
            model_config, engine_config: usually ``tts_app.cli.args.engine_args_from(args)``'s two halves.
            reference_config: reference cleanup settings.
            on_status: called with progress lines ("loading ...", "loaded ... in 3.1 s"); None = silent.

        Raises:
            InputError: a CUDA device was asked for and none is available.
            ModelLoadError: the checkpoint cannot be loaded (message names the cause and ``--model DIR``).
        """
        import time

        from tts_app.adapters import load_adapter

        check_device_available(model_config)
        started = time.perf_counter()
        if on_status is not None:
            on_status(f"Loading model {model_config.model_id} (hub downloads show their own progress bars) ...")
        adapter = load_adapter(model_config.model_id, device=model_config.device, dtype=model_config.dtype)
        load_s = time.perf_counter() - started
        if on_status is not None:
            on_status(f"Loaded {adapter.facts.family} in {load_s:.1f} s")
        runtime = cls.from_adapter(adapter, model_config.model_id, engine_config, reference_config)
        runtime.load_s = load_s
        return runtime

    @classmethod
    def from_adapter(cls, adapter, model_id: str, engine_config: EngineConfig = EngineConfig(),
                     reference_config: ReferenceConfig = ReferenceConfig(), *, memory_probe=None,
                     take_scorer=None) -> "Runtime":
        """A runtime around an already loaded adapter (tests and benches build fakes or tiny models this way).
        ``take_scorer``: the engine's take scorer (``EngineCore``; None = built from ``engine_config.quality_asr``
        on first use)."""
        from tts_app.engine import Engine

        engine = Engine(adapter, engine_config, memory_probe, take_scorer=take_scorer).start()
        info = ModelInfo(model_id, family=adapter.facts.family, device=engine.device, dtype=adapter.dtype,
                         num_parameters=adapter.facts.num_parameters)
        return cls(engine, ReferencePreparer(engine.sampling_rate, reference_config), info)

    def close(self, wait: bool = True) -> None:
        """Stop the engine (unfinished requests end cancelled)."""
        self.engine.shutdown(wait=wait)
