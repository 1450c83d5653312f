"""Loading errors name their cause: gated repo, unknown id, offline without a cached copy, an original-format
release (with the transformers conversion to use), a repo without config.json. Hub failures are simulated offline by
making transformers' hub download raise huggingface_hub's own error types (what transformers wraps and chains)."""

from __future__ import annotations

import json

import httpx2
import pytest
from huggingface_hub.errors import (EntryNotFoundError, GatedRepoError, LocalEntryNotFoundError,
                                    RepositoryNotFoundError)

from tts_app.adapters import family_of, load_adapter
from tts_app.errors import ModelLoadError


def _response(status: int, repo_id: str) -> httpx2.Response:
    return httpx2.Response(status, request=httpx2.Request("GET", f"https://huggingface.co/{repo_id}/resolve/main/"
                                                                   "config.json"))


def _hub_raises(monkeypatch, make_error):
    """transformers' hub download (``transformers.utils.hub.hf_hub_download``) raises ``make_error(repo_id)``."""
    import transformers.utils.hub as hub

    def download(repo_id, filename, **kwargs):
        raise make_error(repo_id)

    monkeypatch.setattr(hub, "hf_hub_download", download)


def test_a_gated_repo_says_accept_the_licence_and_log_in(monkeypatch):
    _hub_raises(monkeypatch, lambda repo: GatedRepoError(f"Access to model {repo} is restricted.",
                                                         response=_response(401, repo)))
    with pytest.raises(ModelLoadError) as caught:
        family_of("sesame/csm-1b")
    message = str(caught.value)
    assert message.startswith("model 'sesame/csm-1b' is gated on the Hugging Face hub")
    assert "https://huggingface.co/sesame/csm-1b" in message and "accept its licence" in message
    assert "hf auth login" in message and "HF_TOKEN" in message


def test_an_unknown_id_says_check_the_spelling(monkeypatch):
    _hub_raises(monkeypatch, lambda repo: RepositoryNotFoundError(f"{repo} not found", response=_response(404, repo)))
    with pytest.raises(ModelLoadError) as caught:
        family_of("vibevoice/VibeVoice-1.5B-hff")
    message = str(caught.value)
    assert message.startswith("there is no model 'vibevoice/VibeVoice-1.5B-hff' on the Hugging Face hub")
    assert "check the spelling" in message and "vibevoice/VibeVoice-1.5B-hf" in message and "private" in message


@pytest.mark.parametrize("offline_error", [
    lambda repo: LocalEntryNotFoundError("Cannot find the requested files in the disk cache"),
    lambda repo: httpx2.ConnectError("[Errno -3] Temporary failure in name resolution"),
])
def test_offline_without_a_cached_copy_says_download_once_or_use_a_folder(monkeypatch, offline_error):
    _hub_raises(monkeypatch, offline_error)
    with pytest.raises(ModelLoadError) as caught:
        family_of("nari-labs/Dia-1.6B-0626")
    message = str(caught.value)
    assert message.startswith("model 'nari-labs/Dia-1.6B-0626' is not in the local Hugging Face cache and the hub "
                              "cannot be reached")
    assert "--model" in message and "make-tiny-model" in message


def test_offline_for_real_says_the_same(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="is not in the local Hugging Face cache and the hub cannot be reached"):
        family_of("someone/not-cached-anywhere-tts")


def test_a_repo_without_config_json_is_not_a_transformers_checkpoint(monkeypatch):
    _hub_raises(monkeypatch, lambda repo: EntryNotFoundError(f"config.json not found in {repo}"))
    with pytest.raises(ModelLoadError, match="'someone/gguf-only' has no config.json, so it is not a transformers "
                                             "checkpoint"):
        family_of("someone/gguf-only")


@pytest.mark.parametrize("repo, converted", [
    ("microsoft/VibeVoice-1.5B", "vibevoice/VibeVoice-1.5B-hf"),
    ("bosonai/higgs-audio-v2-generation-3B-base", "eustlb/higgs-audio-v2-generation-3B-base"),
])
def test_an_original_format_repo_names_the_converted_one(monkeypatch, repo, converted):
    # before any download: true offline too
    _hub_raises(monkeypatch, lambda r: AssertionError("no download needed"))
    with pytest.raises(ModelLoadError) as caught:
        load_adapter(repo, device="cpu")
    message = str(caught.value)
    assert f"'{repo}' is the original" in message and "transformers cannot load" in message
    assert message.endswith(f"--model {converted}")


@pytest.mark.parametrize("config, converted", [
    ({"model_type": "vibevoice", "decoder_config": {"model_type": "qwen2"}, "acoustic_tokenizer_config": {}},
     "vibevoice/VibeVoice-1.5B-hf"),
    ({"model_type": "higgs_audio", "audio_num_codebooks": 8}, "eustlb/higgs-audio-v2-generation-3B-base"),
])
def test_an_original_format_folder_names_the_converted_repo(tmp_path, config, converted):
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelLoadError) as caught:
        family_of(tmp_path)
    assert "is the original" in str(caught.value) and converted in str(caught.value)


def test_an_unsupported_architecture_names_what_is_supported(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(ModelLoadError, match="is a 'bert' checkpoint; supported: VibeVoice, Dia, CSM, Higgs Audio v2"):
        family_of(tmp_path)


def test_the_adapter_load_step_names_a_gated_repo_too(monkeypatch):
    """The weights download (after the config was read) fails the same way: transformers' OSError chained from
    GatedRepoError becomes the gated-repo message, not "not in cache"."""
    import transformers

    from tts_app.adapters.csm import CsmAdapter

    def gated(cls, repo, **kwargs):
        try:
            raise GatedRepoError("restricted", response=_response(403, repo))
        except GatedRepoError as exc:
            raise OSError(f"You are trying to access a gated repo.\nMake sure to have access to it at "
                          f"https://huggingface.co/{repo}.") from exc

    monkeypatch.setattr(transformers.CsmForConditionalGeneration, "from_pretrained", classmethod(gated))
    with pytest.raises(ModelLoadError, match="^model 'sesame/csm-1b' is gated on the Hugging Face hub"):
        CsmAdapter.from_pretrained("sesame/csm-1b")
