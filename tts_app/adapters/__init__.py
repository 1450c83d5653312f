"""Model adapters: one file per family, all behind ``tts_app.adapters.base.TTSAdapter``.

``load_adapter(id_or_path)`` reads the checkpoint's ``config.json`` (hub id or local folder, through transformers'
``PretrainedConfig.get_config_dict``), picks the family from ``model_type`` and calls that adapter's
``from_pretrained``. Every failure is a ``ModelLoadError`` naming the cause (``tts_app.adapters.loading``): gated
repo, unknown id, offline without a cached copy, an original-format release (with the converted repo to use), a
folder that is not a checkpoint, an unsupported architecture. Adapter modules are imported lazily so importing this
package stays cheap.
Checkpoints that are not transformers folders (IndexTTS-2: ``config.yaml`` + ``gpt.pth`` + ``s2mel.pth``) are
recognised by their files (``LAYOUT_MARKERS``).
"""

from __future__ import annotations

import importlib
from pathlib import Path

from tts_app.config import ModelConfig
from tts_app.errors import ModelLoadError

# family name -> (module, class name, transformers model_type values)
FAMILIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "vibevoice": ("tts_app.adapters.vibevoice", "VibeVoiceAdapter", ("vibevoice",)),
    "dia": ("tts_app.adapters.dia", "DiaAdapter", ("dia",)),
    "csm": ("tts_app.adapters.csm", "CsmAdapter", ("csm",)),
    "higgs": ("tts_app.adapters.higgs", "HiggsAudioAdapter", ("higgs_audio_v2",)),
    "indextts2": ("tts_app.adapters.indextts2", "IndexTTS2Adapter", ()),
    "glmtts": ("tts_app.adapters.glmtts", "GLMTTSAdapter", ()),
}

# Families whose checkpoints are not transformers folders: family -> (files a checkpoint folder holds, top-level keys
# of its config.yaml). IndexTTS-2: the layout of IndexTeam/IndexTTS-2.
LAYOUT_MARKERS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "indextts2": (("config.yaml", "gpt.pth", "s2mel.pth"), ("gpt", "s2mel", "semantic_codec")),
}


def adapter_class(family: str):
    """Return the adapter class for ``family`` ("vibevoice", "dia", "csm", "higgs", "indextts2").

    Raises:
        ModelLoadError: unknown family.
    """
    if family not in FAMILIES:
        raise ModelLoadError(f"unknown model family {family!r}; choose one of {sorted(FAMILIES)}")
    module_name, class_name, _ = FAMILIES[family]
    return getattr(importlib.import_module(module_name), class_name)


def _original_format_message(id_or_path: str, config: dict | None) -> str | None:
    """The message for an original-format release of a supported model (known hub id, or a config the family
    recognises), naming the converted repo; None otherwise."""
    from tts_app.adapters.loading import original_format_message

    for family in FAMILIES:
        cls = adapter_class(family)
        converted = cls.original_format_repos.get(id_or_path.strip("/"))
        if converted is None and config is not None:
            converted = cls.original_format_hint(config)
        if converted is not None:
            return original_format_message(id_or_path, cls.display_name, converted)
    return None


def family_of(id_or_path: str | Path) -> str:
    """Family of a checkpoint (hub id or local folder), from its config's ``model_type``.

    Raises:
        ModelLoadError: naming the cause: gated repo (accept the licence, log in), unknown hub id, not cached while
            the hub is unreachable (the message names ``--model DIR``), an original-format release (the message
            names the transformers conversion to use), a missing folder or one without config.json, an unreadable
            config, or an unsupported architecture.
    """
    from transformers import PretrainedConfig

    from tts_app.adapters.loading import EXAMPLE_ID, TINY_HINT, hub_error_message, missing_config_message

    id_or_path = str(id_or_path)
    looks_like_path = id_or_path.startswith(("/", ".", "~")) or id_or_path.count("/") > 1 or "\\" in id_or_path
    if looks_like_path and not Path(id_or_path).expanduser().exists():
        raise ModelLoadError(f"model folder {id_or_path!r} does not exist; pass --model with an existing checkpoint "
                             f"folder or a hub id such as {EXAMPLE_ID}")
    local = Path(id_or_path).exists()
    if local and not (Path(id_or_path) / "config.json").is_file():
        family = _layout_family(Path(id_or_path))
        if family is not None:
            return family
        raise ModelLoadError(f"{id_or_path!r} is a folder without config.json; it is not a model checkpoint. "
                             f"Point --model at a checkpoint folder or a hub id; {TINY_HINT}.")
    if not local:  # a known original-format id: say so before any download (also offline)
        message = _original_format_message(id_or_path, None)
        if message is not None:
            raise ModelLoadError(message)
    try:
        config, _ = PretrainedConfig.get_config_dict(id_or_path)
    except Exception as exc:  # transformers wraps hub errors in OSError; a bad local file raises others
        family = None if local else _hub_layout_family(id_or_path)
        if family is not None:
            return family
        message = None if local else hub_error_message(id_or_path, exc)
        raise ModelLoadError(message or f"cannot read the config of {id_or_path!r}: {exc}") from exc
    if not config.get("model_type"):  # transformers gives {} for a hub repo without config.json
        family = None if local else _hub_layout_family(id_or_path)
        if family is not None:
            return family
        raise ModelLoadError(missing_config_message(id_or_path) if not local else
                             f"{id_or_path!r}: config.json has no model_type, so it is not a transformers checkpoint")
    message = _original_format_message(id_or_path, config)
    if message is not None:
        raise ModelLoadError(message)
    model_type = config["model_type"]
    for family, (_, _, model_types) in FAMILIES.items():
        if model_type in model_types:
            return family
    raise ModelLoadError(
        f"{id_or_path!r} is a {model_type!r} checkpoint; supported: VibeVoice, Dia, CSM, Higgs Audio v2 "
        f"(transformers format, e.g. {EXAMPLE_ID}) and IndexTTS 2 (an IndexTeam/IndexTTS-2 folder)"
    )


def _yaml_keys(path: Path) -> set[str]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return set()
    return set(data) if isinstance(data, dict) else set()


def _layout_family(folder: Path) -> str | None:
    """The family whose ``LAYOUT_MARKERS`` a local folder matches (or GLM-TTS's ``ckpt/llm`` +
    ``ckpt/vq32k-phoneme-tokenizer`` layout), or None."""
    from tts_app.adapters.glmtts.adapter import is_checkpoint_folder

    if is_checkpoint_folder(folder):
        return "glmtts"
    for family, (files, keys) in LAYOUT_MARKERS.items():
        if all((folder / f).is_file() for f in files) and set(keys) <= _yaml_keys(folder / files[0]):
            return family
    return None


def _hub_layout_family(repo_id: str) -> str | None:
    """The family of a hub repository without config.json whose marker config (e.g. IndexTTS-2's config.yaml) is in
    the cache or downloadable; None when there is none or the hub cannot be reached."""
    from huggingface_hub import hf_hub_download

    try:  # GLM-TTS: the hub snapshot is upstream's ckpt/ folder (llm/, vq32k-phoneme-tokenizer/, ...)
        hf_hub_download(repo_id, "vq32k-phoneme-tokenizer/tokenizer_config.json")
        return "glmtts"
    except Exception:  # noqa: BLE001 - not GLM-TTS (or not reachable): try the marker files
        pass
    for family, (files, keys) in LAYOUT_MARKERS.items():
        try:
            path = Path(hf_hub_download(repo_id, files[0]))
        except Exception:  # noqa: BLE001 - hub errors (offline miss, no such repo or file) all mean "not this one"
            continue
        if set(keys) <= _yaml_keys(path):
            return family
    return None


def resolve_device(device: str) -> str:
    """"auto" -> "cuda" when available else "cpu"."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_dtype(dtype: str, device: str) -> str:
    """"auto" -> bfloat16 on cuda, float32 on cpu."""
    if dtype != "auto":
        return dtype
    return "bfloat16" if device.startswith("cuda") else "float32"


def load_adapter(id_or_path: str | Path, *, device: str = ModelConfig.device, dtype: str = ModelConfig.dtype):
    """Load a checkpoint (hub id or local folder) into its family's adapter.

    Raises:
        ModelLoadError: see ``family_of``; also when the weights cannot be loaded.
    """
    family = family_of(id_or_path)
    device = resolve_device(device)
    return adapter_class(family).from_pretrained(str(id_or_path), device=device, dtype=resolve_dtype(dtype, device))
