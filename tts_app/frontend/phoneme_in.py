"""GLM-TTS's "Phoneme-in" input: Chinese characters replaced by their phonemes inside the text, with our pinyin
overrides as the phonemes they name. Pure text, no torch, no model.

What upstream's ``--use_phoneme`` mode gives its LM (github.com/zai-org/GLM-TTS, read at commit c5dc7ae; learned
from, not copied): ``cosyvoice/cli/frontend.py`` ``TextFrontEnd.g2p_infer(text_normalize(segment))``, whose string is
then encoded by the checkpoint's ``vq32k-phoneme-tokenizer``:

1. ``_tokenize_by_replace_dict``: spans found in ``configs/G2P_replace_dict.jsonl`` (longest key first) become its
   hybrid value (``弦`` -> ``<|X|><|IAN2|>``) and are left alone afterwards.
2. ``_split_mixed_text``: the rest is cut into runs of Chinese characters (``utils/glm_g2p.is_chinese``'s ranges)
   and runs of anything else; the latter stay as written (English, digits, punctuation).
3. Each Chinese run goes whole through ``utils/glm_g2p.process_one`` (``G2P_zh`` / ``PyMixBackend.phonemize``):
   ``嗯`` read as ``恩`` and ``呣`` as ``母``, words by ``jieba.posseg.lcut``, then per character pypinyin's *strict*
   initial (``Style.INITIALS``) and final with tone number (``Style.FINALS_TONE3``, neutral tone ``5``); a final
   starting with ``i`` becomes ``iii`` after zh/ch/sh/r and ``ii`` after z/c/s.
4. ``_align_and_replace`` + ``_format_phonemes``: a character in ``configs/G2P_able_1word.json`` (characters with
   one reading, kept as characters) stays; any other is replaced by its phonemes, upper case, each wrapped
   ``<|...|>``, initial then final, no separator: ``重`` -> ``<|ZH|><|ONG4|>``, ``一`` -> ``<|I1|>``, ``吃`` ->
   ``<|CH|><|III1|>``, ``女`` -> ``<|N|><|V3|>``.

Only the text to speak goes through it; upstream's prompt text (the reference transcript) does not.

Our additions: a reading the user gave (an override, any syntax ``tts_app.frontend.markup`` accepts: ``重(zhòng)``,
``<重|ZHONG4>``, ``重(zhong4)``, ``DE5``, a pinyin line) always becomes phonemes, its own, whether or not the character
is one upstream keeps, and nothing else changes: the other characters' phonemes are still read from the unchanged
text (so ``银行(yin2)`` does not change how 行 is read). In a span of the replace dictionary the overridden character's
phonemes are swapped into its value (one character or syllable per character of the key), or, where the value does
not align so, the span is not replaced. ``PhonemeTable.keep_chars`` None (upstream's ``configs/`` files not at hand) keeps every
character except the overridden ones: with no override the text is then exactly what upstream's default mode (no
``--use_phoneme``) gives its LM. Departures: a character pypinyin has no reading for stays a character (upstream
would wrap the character itself as a phoneme), and so does a reading with no final (``嗯(ng2)``, ``呣(m2)``: no
phoneme of upstream's inventory, ``configs/G2P_all_phonemes.json``, spells it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from tts_app.frontend.types import PreparedText

__all__ = ["PhonemeTable", "load_phoneme_table", "syllable_phonemes", "phoneme_input", "phoneme_inputs",
           "phoneme_input_from_rendered"]

# The characters upstream's G2P treats as Chinese (utils/glm_g2p.is_chinese): CJK unified ideographs and
# extensions A-H, compatibility ideographs and their supplement, CJK radicals supplement. Not 〇 (U+3007).
_CHINESE_RUNS = re.compile("([\u2e80-\u2eff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002a6df"
                           "\U0002a700-\U0002ebef\U0002f800-\U0002fa1f\U00030000-\U000323af]+)")
# Characters upstream reads as another before G2P (PyMixBackend.phonemize: pypinyin reads them as syllabic nasals).
_READ_AS = str.maketrans({"嗯": "恩", "呣": "母"})
_RETROFLEX = frozenset({"zh", "ch", "sh", "r"})
_SIBILANT = frozenset({"z", "c", "s"})

ABLE_FILE = "G2P_able_1word.json"
REPLACE_FILE = "G2P_replace_dict.jsonl"


@dataclass(frozen=True)
class PhonemeTable:
    """Which characters upstream's phoneme mode keeps, and its fixed replacements.

    Attributes:
        keep_chars: characters kept as characters (upstream's ``configs/G2P_able_1word.json``); every other Chinese
            character becomes phonemes. None: keep every character that has no override (no upstream table at
            hand: with no override the text is unchanged, as upstream's default mode).
        replacements: text -> hybrid text, applied first, longest key first (``configs/G2P_replace_dict.jsonl``,
            its objects merged).
    """

    keep_chars: frozenset[str] | None = None
    replacements: Mapping[str, str] = field(default_factory=dict)


def load_phoneme_table(folder: str | Path) -> PhonemeTable:
    """Upstream's phoneme-mode table from a GLM-TTS checkout or checkpoint folder: ``configs/G2P_able_1word.json``
    (a JSON list of characters) and ``configs/G2P_replace_dict.jsonl`` (one JSON object per line), looked for in
    ``folder/configs`` then ``folder``. A missing replace file means no replacements.

    Raises:
        FileNotFoundError: no ``G2P_able_1word.json`` in either place (then use ``PhonemeTable()``: overrides only).
        ValueError: a file is not the JSON described above.
    """
    folder = Path(folder)
    base = next((d for d in (folder / "configs", folder) if (d / ABLE_FILE).is_file()), None)
    if base is None:
        raise FileNotFoundError(f"no {ABLE_FILE} in {folder / 'configs'} or {folder}")
    able = json.loads((base / ABLE_FILE).read_text(encoding="utf-8"))
    if not isinstance(able, list) or not all(isinstance(c, str) for c in able):
        raise ValueError(f"{base / ABLE_FILE} is not a JSON list of characters")
    replacements: dict[str, str] = {}
    if (base / REPLACE_FILE).is_file():
        for line in (base / REPLACE_FILE).read_text(encoding="utf-8").splitlines():
            if line.strip():
                entry = json.loads(line)
                if not isinstance(entry, dict):
                    raise ValueError(f"{base / REPLACE_FILE}: a line is not a JSON object")
                replacements.update(entry)
    return PhonemeTable(frozenset(able), replacements)


def syllable_phonemes(initial: str, final: str) -> str | None:
    """Upstream's phoneme text of one syllable from pypinyin's strict initial and TONE3 final: ``("zh", "ong4")``
    -> ``"<|ZH|><|ONG4|>"``, ``("", "i1")`` -> ``"<|I1|>"``, ``("ch", "i1")`` -> ``"<|CH|><|III1|>"``; None when
    the final is empty (a syllabic nasal, ``ng2``: no phoneme spells it)."""
    if not final:
        return None
    if final.startswith("i") and initial in _RETROFLEX:
        final = "iii" + final[1:]
    elif final.startswith("i") and initial in _SIBILANT:
        final = "ii" + final[1:]
    return "".join(f"<|{p.upper()}|>" for p in (initial, final) if p)


def _reading_phonemes(reading: str) -> str | None:
    """A TONE3 reading (``zhong4``, ``lv4``, ``de5``) as upstream's phonemes, by the same strict pypinyin split."""
    from pypinyin.contrib.tone_convert import to_finals_tone3, to_initials

    return syllable_phonemes(to_initials(reading, strict=True),
                             to_finals_tone3(reading, strict=True, neutral_tone_with_five=True))


def _upstream_readings(run: str) -> list[str | None]:
    """Per character of a run of Chinese characters, upstream's phonemes (``process_one``: jieba.posseg words,
    pypinyin strict initials + TONE3 finals per word), or None where pypinyin has no reading."""
    import jieba.posseg
    from pypinyin import Style, pinyin

    out: list[str | None] = []
    for word, _ in jieba.posseg.lcut(run.translate(_READ_AS)):
        initials = pinyin(word, style=Style.INITIALS, strict=True, neutral_tone_with_five=True)
        finals = pinyin(word, style=Style.FINALS_TONE3, strict=True, neutral_tone_with_five=True)
        if len(initials) != len(word) or len(finals) != len(word):  # characters pypinyin cannot read, grouped
            out.extend(None for _ in word)
            continue
        for char, (initial,), (final,) in zip(word, initials, finals):
            read = final != char and bool(re.fullmatch(r"[a-z]*[1-5]", final))
            out.append(syllable_phonemes(initial, final) if read else None)
    return out


def phoneme_input(text: str, readings: Mapping[int, str] | None = None, table: PhonemeTable = PhonemeTable()
                  ) -> str:
    """``text`` as GLM-TTS's phoneme mode writes it for its LM, with ``readings`` forced (see the module docstring).

    Args:
        text: one segment's normalised text (``TextSegment.source_text``), as upstream's ``text_normalize`` would
            leave it.
        readings: offset in ``text`` -> TONE3 reading (``"zhong4"``, ``"lv4"``, neutral tone ``"de5"``) of the
            characters to force: the user's overrides, optionally our own predictions. An offset that is not a
            Chinese character, or a reading with no final, is ignored (that character keeps upstream's handling).
        table: upstream's keep list and replacements (``load_phoneme_table``); default: none (overrides only).

    Returns:
        The hybrid string, e.g. ``"他很<|ZH|><|ONG4|>要"`` for ``"他很重要"`` with ``{2: "zhong4"}`` and no table.
        The tokenizer splits each ``<|...|>`` into one token.
    """
    readings = dict(readings or {})
    forced = {pos: ph for pos, r in readings.items() if 0 <= pos < len(text) and (ph := _reading_phonemes(r))}
    out: list[str] = []
    keys = sorted(table.replacements, key=len, reverse=True)
    pos, plain_start = 0, 0
    while pos < len(text):
        key = next((k for k in keys if k and text.startswith(k, pos)), None)
        value = _replacement(table.replacements[key], key, pos, forced) if key is not None else None
        if value is None:
            pos += 1
            continue
        out.append(_plain(text, plain_start, pos, forced, table))
        out.append(value)
        pos += len(key)
        plain_start = pos
    out.append(_plain(text, plain_start, len(text), forced, table))
    return "".join(out)


# One character's worth of a hybrid string: a syllable's phonemes (an initial, then a final with its tone number:
# upstream's inventory, configs/G2P_all_phonemes.json) or one character.
_UNIT = re.compile(r"(?:<\|[A-Z]+\|>)?<\|[A-Z]+[1-5]\|>|.", re.DOTALL)


def _replacement(value: str, key: str, pos: int, forced: dict[int, str]) -> str | None:
    """The replace dictionary's ``value`` for ``key`` found at ``pos``, with the forced characters' phonemes in it:
    when ``value`` spells one unit (character or syllable) per character of ``key`` the forced ones are swapped in
    (``乡音无改鬓毛衰`` -> ``乡音无改鬓毛<|SH|><|UAI1|>``), else None (the span is not replaced: the forced reading
    wins)."""
    if not any(p in forced for p in range(pos, pos + len(key))):
        return value
    units = _UNIT.findall(value)
    if len(units) != len(key):
        return None
    return "".join(forced.get(pos + i, unit) for i, unit in enumerate(units))


def _plain(text: str, start: int, end: int, forced: dict[int, str], table: PhonemeTable) -> str:
    """``text[start:end]`` (no replace-dictionary span in it) with its Chinese runs phonemised."""
    out: list[str] = []
    offset = start
    for piece in _CHINESE_RUNS.split(text[start:end]):
        if piece and _CHINESE_RUNS.fullmatch(piece):
            keep = table.keep_chars
            if keep is None or all(offset + i in forced or c in keep for i, c in enumerate(piece)):
                upstream: list[str | None] = [None] * len(piece)  # nothing here is read by upstream's G2P
            else:
                upstream = _upstream_readings(piece)  # the whole run: its words give the readings their context
            for i, char in enumerate(piece):
                phonemes = forced.get(offset + i)
                if phonemes is None and table.keep_chars is not None and char not in table.keep_chars:
                    phonemes = upstream[i]
                out.append(phonemes or char)
        else:
            out.append(piece)
        offset += len(piece)
    return "".join(out)


def phoneme_inputs(prepared: PreparedText, table: PhonemeTable = PhonemeTable(), *,
                   use_predictions: bool = False) -> list[str]:
    """One hybrid string per segment of ``prepared`` (``phoneme_input`` of each ``TextSegment.source_text``).

    Args:
        prepared: ``tts_app.frontend.prepare_text``'s result.
        table: as ``phoneme_input``.
        use_predictions: also force our own reading (lexicon + grammar rules, ``CharReading.pinyin``) of every
            polyphonic character, instead of upstream's G2P; default: the user's overrides only.

    Returns:
        ``len(prepared.segments)`` strings, in order.
    """
    norm = prepared.normalized_text
    forced = {r.position: r.pinyin for r in prepared.readings
              if r.pinyin and (r.source == "override" or (use_predictions and r.polyphonic))}
    out, cursor = [], 0
    for segment in prepared.segments:
        start = norm.find(segment.source_text, cursor)
        if start < 0:  # source_text is a stripped slice of norm, in order (types.PreparedText)
            raise ValueError(f"segment {segment.source_text!r} is not in the normalised text after offset {cursor}")
        end = start + len(segment.source_text)
        out.append(phoneme_input(segment.source_text, {p - start: r for p, r in forced.items() if start <= p < end},
                                 table))
        cursor = end
    return out


# A reading as the front end renders it for a model that reads pinyin (tts_app.frontend.render.pinyin_token).
_RENDERED_READING = re.compile(r"\{([a-z]+[1-5])\}")


def phoneme_input_from_rendered(rendered: str, table: PhonemeTable = PhonemeTable()) -> str:
    """``phoneme_input`` of a segment as the engine hands it to an adapter whose ``ModelFacts.supports_pinyin`` is
    True: each overridden character already replaced by its ``{zhong4}`` token (``tts_app.frontend.render``).

    The token becomes its phonemes. The character it stood for is gone, so for upstream's G2P of its neighbours a
    character with that one reading (``g2p.stand_in``) takes its place: their words can differ from those of the
    original text (``phoneme_inputs`` on the ``PreparedText`` keeps them exactly; prefer it where it is at hand).

    Args:
        rendered: ``TextSegment.text`` rendered with ``supports_pinyin=True``.
        table: as ``phoneme_input``.

    Returns:
        The hybrid string (``"他很{zhong4}要"`` -> ``"他很<|ZH|><|ONG4|>要"`` with no table).
    """
    from tts_app.frontend.g2p import stand_in

    parts: list[str] = []
    readings: dict[int, str] = {}
    length, pos = 0, 0
    for m in _RENDERED_READING.finditer(rendered):
        parts.append(rendered[pos:m.start()])
        length += m.start() - pos
        readings[length] = m.group(1)
        parts.append(stand_in(m.group(1)) or "字")  # any Chinese character: its reading is forced
        length += 1
        pos = m.end()
    parts.append(rendered[pos:])
    return phoneme_input("".join(parts), readings, table)
