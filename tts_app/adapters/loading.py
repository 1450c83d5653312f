"""Messages for checkpoints that cannot be loaded, naming the cause and the fix.

Hub failures are told apart by the ``huggingface_hub`` error types that transformers chains as the ``__cause__`` of
its own ``OSError`` (transformers ``utils/hub.py`` ``cached_files``): ``GatedRepoError`` (the repo needs a licence
accepted and a token), ``RepositoryNotFoundError`` (no such id, or private), ``EntryNotFoundError`` (the repo lacks
the file, e.g. no ``config.json``: not a transformers checkpoint), and the offline family
(``LocalEntryNotFoundError``, ``OfflineModeIsEnabled``, network errors: not in the cache and the hub cannot be
reached). An original-format release of a supported model (before its transformers conversion) is recognised by id
(``TTSAdapter.original_format_repos``) or by its config (``TTSAdapter.original_format_hint``) and named with the
converted repo to use instead.
"""

from __future__ import annotations

EXAMPLE_ID = "vibevoice/VibeVoice-1.5B-hf"
TINY_HINT = ("`python -m tts_app make-tiny-model --family vibevoice --out DIR` writes a tiny random one for trying "
             "the app offline")


def offline_message(id_or_path: str) -> str:
    """Not in the local Hugging Face cache and the hub cannot be reached (or offline mode is on)."""
    return (f"model {id_or_path!r} is not in the local Hugging Face cache and the hub cannot be reached. "
            "Download it once on a connected machine (hf download ID), or point --model at a local "
            f"checkpoint folder; {TINY_HINT}.")


def gated_message(id_or_path: str) -> str:
    """The repo is gated: its licence must be accepted on the hub and the request must carry a token."""
    return (f"model {id_or_path!r} is gated on the Hugging Face hub: open https://huggingface.co/{id_or_path}, "
            "accept its licence with your account, then log in on this machine (`hf auth login`, or set "
            "HF_TOKEN to a token of that account) and start again.")


def not_found_message(id_or_path: str) -> str:
    """No model with that id on the hub (misspelled), or a private one the caller may not read."""
    return (f"there is no model {id_or_path!r} on the Hugging Face hub: check the spelling (ids look like "
            f"{EXAMPLE_ID}); if it is a private repo, log in (`hf auth login` or HF_TOKEN); if it is meant "
            "to be a local folder, that folder does not exist.")


def missing_config_message(id_or_path: str) -> str:
    """The repo exists but has no ``config.json``."""
    return (f"{id_or_path!r} has no config.json, so it is not a transformers checkpoint; point --model at a "
            f"transformers-format checkpoint such as {EXAMPLE_ID}.")


def original_format_message(id_or_path: str, display_name: str, converted: str) -> str:
    """An original-format release of a supported model: name the converted transformers repo."""
    return (f"{id_or_path!r} is the original {display_name} release, which transformers cannot load; use its "
            f"transformers conversion instead: --model {converted}")


def hub_error_message(id_or_path: str, exc: BaseException) -> str | None:
    """The message for a hub failure somewhere in ``exc``'s cause chain, or None when it is not one."""
    from huggingface_hub.errors import (EntryNotFoundError, GatedRepoError, LocalEntryNotFoundError,
                                        OfflineModeIsEnabled, RepositoryNotFoundError)

    seen = set()
    chain = []
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    # Most specific first: GatedRepoError is a RepositoryNotFoundError; LocalEntryNotFoundError an EntryNotFoundError.
    for error in chain:
        if isinstance(error, GatedRepoError):
            return gated_message(id_or_path)
    for error in chain:
        if isinstance(error, (LocalEntryNotFoundError, OfflineModeIsEnabled, ConnectionError, *_transport_errors())):
            return offline_message(id_or_path)
    for error in chain:
        if isinstance(error, RepositoryNotFoundError):
            return not_found_message(id_or_path)
    for error in chain:
        if isinstance(error, EntryNotFoundError):
            return missing_config_message(id_or_path)
    return None


def _transport_errors() -> tuple[type, ...]:
    """The HTTP clients' network-failure types (no route, DNS, timeout): httpx's and httpx2's ``TransportError``
    (huggingface_hub uses one of them, transformers the other)."""
    found = []
    for module in ("httpx", "httpx2"):
        try:
            found.append(__import__(module).TransportError)
        except (ImportError, AttributeError):
            pass
    return tuple(found)
