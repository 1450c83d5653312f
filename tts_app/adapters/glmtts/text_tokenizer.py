"""GLM-TTS's text tokenizer (``ckpt/vq32k-phoneme-tokenizer``) read without running the checkpoint's remote code.

Upstream loads the folder with ``AutoTokenizer.from_pretrained(..., trust_remote_code=True)``: GLM-4's
``ChatGLM4Tokenizer``, a byte-level BPE whose merge ranks are a tiktoken rank file (``tokenizer.model``: one
``base64(token) rank`` per line) split with GLM-4's pre-tokenizer pattern (cl100k's), plus the added tokens listed in
``tokenizer_config.json`` (``added_tokens_decoder``: ``<|endoftext|>``, ``<|user|>``, ``<|begin_of_audio|>``, the
phoneme tokens ``<|...|>`` and the speech tokens ``<|audio_0|>`` ... ``<|audio_32767|>``). Here the same two files are
read with ``tiktoken`` (the library the remote code uses): added tokens are split out first (longest first, as
transformers' slow tokenizer does with its trie) and every other piece goes through the rank file.

``encode`` adds no prefix tokens: upstream's ``get_special_token_ids`` requires ``encode("<|audio_0|>")`` etc. to be
exactly one id, which holds only without GLM-4's ``[gMASK]<sop>`` prefix.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

from tts_app.errors import ModelLoadError

#: GLM-4's pre-tokenizer pattern (``ChatGLM4Tokenizer.pat_str``; the same as tiktoken's cl100k_base).
GLM4_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
RANK_FILE = "tokenizer.model"
_BRACKETED = r"<\|[^<>|\s]*\|>"
CONFIG_FILE = "tokenizer_config.json"


def read_ranks(path: Path) -> dict[bytes, int]:
    """The tiktoken rank file: ``{token bytes: rank}``.

    Raises:
        ModelLoadError: a line that is not ``base64 rank``.
    """
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
        except ValueError as exc:
            raise ModelLoadError(f"{path}:{number}: expected 'base64-token rank', got {line[:60]!r}") from exc
    return ranks


class GLMTextTokenizer:
    """Text -> token ids as GLM-TTS's ``ChatGLM4Tokenizer.encode`` gives them (see the module docstring).

    Args:
        folder: the ``vq32k-phoneme-tokenizer`` folder (``tokenizer.model`` + ``tokenizer_config.json``).

    Attributes:
        added: added token text -> id (special tokens, phonemes, speech tokens).
        vocab_size: ranks + added tokens.

    Raises:
        ModelLoadError: a file is missing or unreadable, or ``tiktoken`` is not installed.
    """

    def __init__(self, folder: str | Path):
        folder = Path(folder)
        for name in (RANK_FILE, CONFIG_FILE):
            if not (folder / name).is_file():
                raise ModelLoadError(f"the GLM-TTS text tokenizer folder {str(folder)!r} has no {name}; download the "
                                     "whole zai-org/GLM-TTS checkpoint (vq32k-phoneme-tokenizer/)")
        try:
            import tiktoken
        except ImportError as exc:  # a requirements.txt dependency; say which
            raise ModelLoadError("GLM-TTS needs the tiktoken package: python3 -m pip install tiktoken") from exc
        ranks = read_ranks(folder / RANK_FILE)
        try:
            config = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ModelLoadError(f"cannot read {folder / CONFIG_FILE}: {exc}") from exc
        self.added: dict[str, int] = {entry["content"]: int(i)
                                      for i, entry in config.get("added_tokens_decoder", {}).items()}
        self._encoding = tiktoken.Encoding(name=f"glmtts:{folder}", pat_str=GLM4_PATTERN, mergeable_ranks=ranks,
                                           special_tokens={})
        # Added tokens are split out first. Most are ``<|...|>`` (32768 speech tokens alone): one generic pattern
        # finds those (a match that is not an added token stays text); the few others are listed, longest first.
        others = sorted((t for t in self.added if not (t.startswith("<|") and t.endswith("|>"))), key=len,
                        reverse=True)
        self._split = re.compile("(" + "|".join([_BRACKETED, *(re.escape(t) for t in others)]) + ")")
        self.vocab_size = max([len(ranks) - 1, *self.added.values()]) + 1
        self._decoder = {rank: token for token, rank in ranks.items()}

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``: added tokens as their ids, the text between them byte-level BPE."""
        ids: list[int] = []
        for piece in self._split.split(text):
            if not piece:
                continue
            if piece in self.added:
                ids.append(self.added[piece])
            else:
                ids.extend(self._encoding.encode_ordinary(piece))
        return ids

    def token_id(self, token: str) -> int:
        """The id of a token that must encode to exactly one id (upstream's ``get_special_token_ids`` check).

        Raises:
            ModelLoadError: it encodes to several ids (the checkpoint's tokenizer lacks it).
        """
        ids = self.encode(token)
        if len(ids) != 1:
            raise ModelLoadError(f"the GLM-TTS text tokenizer has no single token {token!r} (it encodes to {ids}); "
                                 "this is not a GLM-TTS vq32k-phoneme-tokenizer")
        return ids[0]
