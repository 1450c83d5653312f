"""Character-level tokenizers built in code, for tiny random checkpoints (no hub, no data files).

The vocabulary covers printable ASCII, common CJK punctuation and the 3,755 GB2312 level-1 Chinese characters
(the standard "common characters" set, enumerated by decoding the GB2312 code range 0xB0A1-0xD7FE), plus the
special tokens a family's processor needs. Unknown characters map to the unknown token.
"""

from __future__ import annotations

from functools import lru_cache

CJK_PUNCTUATION = "，。！？、；：“”‘’（）《》【】…—·～"


@lru_cache(maxsize=1)
def common_characters() -> tuple[str, ...]:
    """Printable ASCII, CJK punctuation, then GB2312 level-1 hanzi (3,755), in a fixed order."""
    chars = [chr(c) for c in range(0x20, 0x7F)]
    chars += list(CJK_PUNCTUATION)
    for hi in range(0xB0, 0xD8):  # GB2312 level-1 rows 16-55
        for lo in range(0xA1, 0xFF):
            try:
                chars.append(bytes([hi, lo]).decode("gb2312"))
            except UnicodeDecodeError:  # unassigned cells at the end of row 55
                pass
    return tuple(dict.fromkeys(chars))


def build_char_tokenizer(special_tokens: list[str], unk_token: str = "<unk>", pad_token: str | None = None,
                         **tokenizer_kwargs):
    """A ``transformers.PreTrainedTokenizerFast`` with one token per character.

    Args:
        special_tokens: tokens added first (ids 0..n-1), e.g. ``["<unk>", "<pad>", "<|speech_start|>"]``; must
            include ``unk_token`` (and ``pad_token`` when given).
        unk_token, pad_token: names of those special tokens.
        tokenizer_kwargs: passed to ``PreTrainedTokenizerFast`` (e.g. ``bos_token``, ``eos_token``,
            ``padding_side="left"``).

    Returns:
        PreTrainedTokenizerFast whose vocabulary size is ``len(special_tokens) + len(common_characters())``.
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders
    from transformers import PreTrainedTokenizerFast

    vocab: dict[str, int] = {}
    for token in list(special_tokens) + list(common_characters()):
        vocab.setdefault(token, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk_token))
    # Split every character into its own "word" (including spaces), so WordLevel acts per character.
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([t for t in special_tokens])
    kwargs = dict(tokenizer_object=tok, unk_token=unk_token)
    if pad_token is not None:
        kwargs["pad_token"] = pad_token
    kwargs.update(tokenizer_kwargs)
    return PreTrainedTokenizerFast(**kwargs)
