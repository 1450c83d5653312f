"""Model adapters: one file per family, all behind ``tts_app.adapters.base.TTSAdapter``.

``load_adapter(id_or_path)`` reads the checkpoint's ``config.json`` (hub id or local folder, through transformers'
``AutoConfig.from_pretrained``), picks the family from ``model_type`` and calls that adapter's ``from_pretrained``.
Adapter modules are imported lazily so importing this package stays cheap.
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
}


def adapter_class(family: str):
    """Return the adapter class for ``family`` ("vibevoice", "dia", "csm", "higgs").

    Raises:
        ModelLoadError: unknown family.
    """
    if family not in FAMILIES:
        raise ModelLoadError(f"unknown model family {family!r}; choose one of {sorted(FAMILIES)}")
    module_name, class_name, _ = FAMILIES[family]
    return getattr(importlib.import_module(module_name), class_name)


def _offline_hint(id_or_path: str) -> str:
    return (f"model {id_or_path!r} is not in the local Hugging Face cache and the hub cannot be reached. "
            "Download it once on a connected machine (huggingface-cli download ID), or point --model at a local "
            "checkpoint folder; `python -m tts_app make-tiny-model --family vibevoice --out DIR` writes a tiny "
            "random one for trying the app offline.")


def family_of(id_or_path: str | Path) -> str:
    """Family of a checkpoint (hub id or local folder), from its config's ``model_type``.

    Raises:
        ModelLoadError: not cached and hub unreachable, missing/invalid config, or an unsupported architecture.
    """
    from transformers import AutoConfig

    id_or_path = str(id_or_path)
    looks_like_path = id_or_path.startswith(("/", ".", "~")) or id_or_path.count("/") > 1 or "\\" in id_or_path
    if looks_like_path and not Path(id_or_path).expanduser().exists():
        raise ModelLoadError(f"model folder {id_or_path!r} does not exist; pass --model with an existing checkpoint "
                             "folder or a hub id such as vibevoice/VibeVoice-1.5B-hf")
    if Path(id_or_path).exists() and not (Path(id_or_path) / "config.json").is_file():
        raise ModelLoadError(f"{id_or_path!r} is a folder without config.json; it is not a model checkpoint. "
                             "Point --model at a checkpoint folder or a hub id; `python -m tts_app make-tiny-model "
                             "--family vibevoice --out DIR` writes a tiny random one for trying the app offline.")
    try:
        config = AutoConfig.from_pretrained(id_or_path)
    except OSError as exc:  # transformers raises OSError for missing repos / offline misses
        if Path(id_or_path).exists():
            raise ModelLoadError(f"cannot read the config of {id_or_path!r}: {exc}") from exc
        raise ModelLoadError(_offline_hint(id_or_path)) from exc
    except ValueError as exc:  # unknown model_type
        raise ModelLoadError(f"{id_or_path!r}: {exc}") from exc
    for family, (_, _, model_types) in FAMILIES.items():
        if config.model_type in model_types:
            return family
    raise ModelLoadError(
        f"{id_or_path!r} is a {config.model_type!r} checkpoint; supported: VibeVoice, Dia, CSM, Higgs Audio v2"
    )


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
