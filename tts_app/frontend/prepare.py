"""The front end's entry points: ``prepare_text`` (once per request, for the engine) and ``preview_pronunciation``
(on every keystroke, for the UI).

Pipeline: markup (pinyin in every syntax, pause markers, control tags, scene breaks) -> normalisation of the plain
text between markup (wetext per language run) -> readings (lexicon + jieba + grammar rules; annotations override)
-> segmentation -> rendering for the model (homophones or pinyin tokens, stand-ins for characters it cannot encode).
Every warning is a ``messages.Notice`` (English text, Chinese on ``render("zh")``).
"""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterable

from tts_app.config import DEFAULT_MAX_SEGMENT_CHARS, MIN_MAX_SEGMENT_CHARS, FrontendConfig
from tts_app.errors import InputError
from tts_app.frontend.g2p import (char_candidates, common_readings, homophone_candidates, is_hanzi, read_text_tuples,
                                  stand_in)
from tts_app.frontend.markup import Annotation, ControlTag, InlinePinyin, PauseMarker, TextPiece, parse_markup, tag_name
from tts_app.frontend.messages import Notice, join
from tts_app.frontend.normalize import default_language, is_speakable, normalize_chunk
from tts_app.frontend.render import render_char, render_text
from tts_app.frontend.segment import split_spans
from tts_app.frontend.types import CharReading, PreparedText, PronunciationPreview, TextSegment

__all__ = ["DEFAULT_MAX_SEGMENT_CHARS", "MIN_MAX_SEGMENT_CHARS", "prepare_text", "preview_pronunciation", "warm_up"]

# Characters whose other readings occur only inside words (的确 dí, 目的 dì, 打的 dī): read alone they are not
# ambiguous, so the preview does not flag them.
_BOUND_READINGS = frozenset("的")

UnencodableCheck = Callable[[Iterable[str]], set[str]]


@dataclass
class _Analysis:
    normalized_text: str
    overrides: dict[int, str] = field(default_factory=dict)  # offset in normalized_text -> TONE3
    written: dict[int, str] = field(default_factory=dict)  # offset -> the syllable as the user wrote it
    stand_ins: set[int] = field(default_factory=set)  # offsets of characters written for a typed syllable
    boundaries: list[tuple[int, int | None, bool]] = field(default_factory=list)  # (offset, ms|None, scene break)
    protected: list[tuple[int, int]] = field(default_factory=list)  # spans never cut (control tags)
    warnings: list[Notice] = field(default_factory=list)
    readings: list[CharReading] = field(default_factory=list)
    notation: str = "tone3"


def _is_word_char(char: str) -> bool:
    """Letters and digits of alphabetic scripts (two of them side by side form one word)."""
    return char.isalnum() and not is_hanzi(char)


def _valid(char: str) -> str:
    return ", ".join(char_candidates(char)) or Notice("none_known")


def _kept(char: str) -> Notice:
    return Notice("keeps_default", char=char, valid=_valid(char)) if char else Notice("nothing_applied")


def _apply_readings(acc: str, first: int, ann: Annotation, where: Notice, analysis: _Analysis,
                    hanzi_start: int, end: int) -> None:
    """Record the readings of ``ann`` for ``acc[first:first + len(tokens)]``."""
    for offset, token, (kind, value) in zip(range(first, first + len(ann.tokens)), ann.tokens, ann.parsed):
        char = acc[offset]
        known = char_candidates(char)
        if kind not in ("ok", "toneless"):
            analysis.warnings.append(Notice("bad_token", where=where, problem=value, char=char, valid=_valid(char)))
            continue
        if known and value not in known and not (value.endswith("5") and any(r[:-1] == value[:-1] for r in known)):
            # (The neutral tone of a syllable the character has is always valid: it belongs to the word, 东西 xi5.)
            # Not applied: forcing a reading the character does not have makes a characters-only model read a
            # different character (银行(yin2) would become 银银). A character with no known reading takes any.
            hint = next((Notice("reading_hint", reading=value, other=acc[i], token=token)
                         for i in range(end - 1, hanzi_start - 1, -1)
                         if i != offset and value in char_candidates(acc[i])), "")
            analysis.warnings.append(Notice("not_a_reading", where=where, reading=value, char=char,
                                            valid=_valid(char), hint=hint))
            continue
        analysis.overrides[offset] = value
        analysis.written[offset] = token


def _apply_annotation(acc: str, ann: Annotation, analysis: _Analysis) -> str | None:
    """Record the overrides of one ``字(pinyin)`` annotation against the normalised text so far (``acc``). Returns
    text to append to ``acc`` instead (an annotation kept as ordinary text), or None. Policy: ``markup``'s
    docstring."""
    end = len(acc.rstrip(" "))
    hanzi_start = end
    while hanzi_start > 0 and is_hanzi(acc[hanzi_start - 1]):
        hanzi_start -= 1
    where = Notice("where_annotation", raw=ann.raw, start=ann.start)
    kinds = [kind for kind, _ in ann.parsed]
    char = acc[end - 1] if end > hanzi_start else ""
    if ann.kind == "typo":
        problems = join([p for k, p in ann.parsed if k == "not_pinyin"])
        analysis.warnings.append(Notice("gloss_typo", where=where, problems=problems))
        return ann.raw
    if not ann.closed:
        chars = acc[max(hanzi_start, end - len(ann.tokens)):end]
        analysis.warnings.append(Notice("not_closed", where=where, fixed=f"{chars}({' '.join(ann.tokens)})",
                                        kept=_kept(char)))
        return None
    if "not_pinyin" in kinds:
        problems = join([p for k, p in ann.parsed if k in ("not_pinyin", "bad_tone")])
        analysis.warnings.append(Notice("attempt_removed", where=where, problems=problems, kept=_kept(char)))
        return None
    if end == hanzi_start:
        after = repr(acc[end - 1]) if end else Notice("start_of_text")
        analysis.warnings.append(Notice("after_non_hanzi", where=where, after=after))
        return None
    num_hanzi = end - hanzi_start
    if len(ann.tokens) > num_hanzi:
        analysis.warnings.append(Notice("too_many_readings", where=where, num_tokens=len(ann.tokens),
                                        num_hanzi=num_hanzi, chars=acc[hanzi_start:end]))
        return None
    if any(c in "āáǎàēéěèīíǐìōóǒòūúǔùǖǘǚǜ" for c in ann.raw):
        analysis.notation = "marks"
    _apply_readings(acc, end - len(ann.tokens), ann, where, analysis, hanzi_start, end)
    return None


def _apply_angle(acc: str, ann: Annotation, analysis: _Analysis) -> str:
    """``<字|PINYIN>``: the characters are emitted; their readings recorded when one syllable per character."""
    chars = ann.chars or ""
    where = Notice("where_annotation", raw=ann.raw, start=ann.start)
    if not chars or not all(is_hanzi(c) for c in chars):
        analysis.warnings.append(Notice("angle_not_hanzi", where=where, chars=chars))
        return chars
    if len(ann.tokens) != len(chars):
        analysis.warnings.append(Notice("angle_count", where=where, num_tokens=len(ann.tokens), num_chars=len(chars),
                                        chars=chars))
        return chars
    if any(c in "āáǎàēéěèīíǐìōóǒòūúǔùǖǘǚǜ" for c in ann.raw):
        analysis.notation = "marks"
    joined = acc + chars
    _apply_readings(joined, len(acc), ann, where, analysis, len(acc), len(joined))
    return chars


def _analyse(text: str, control_tags: tuple[str, ...] = ()) -> _Analysis:
    if not isinstance(text, str):
        raise InputError(Notice("text_not_str", type=type(text).__name__))
    if not text.strip():
        raise InputError(Notice("text_empty"))
    model_tags = {tag_name(t): t for t in control_tags}
    items = parse_markup(text, frozenset(n for n, t in model_tags.items() if t.lstrip()[:1] in "(（"))
    default_lang = default_language(text)
    analysis = _Analysis("")
    acc = ""
    removed_markup = False  # markup was just removed: keep the words on either side apart ("hello[pause]world")
    for item in items:
        protected = False
        if isinstance(item, TextPiece):
            chunk, problems = normalize_chunk(item.text, default_lang)
            analysis.warnings.extend(Notice("text_at", start=item.start, problem=p) for p in problems)
        elif isinstance(item, Annotation):
            chunk = (_apply_angle(acc, item, analysis) if item.kind == "angle"
                     else _apply_annotation(acc, item, analysis) or "")
        elif isinstance(item, InlinePinyin):
            char = stand_in(item.reading)
            if char is None:
                analysis.warnings.append(Notice("inline_no_char", token=item.raw, start=item.start,
                                                reading=item.reading))
                chunk = ""
            else:
                chunk = char
                if acc.endswith(" ") and acc.rstrip(" ")[-1:] and is_hanzi(acc.rstrip(" ")[-1]):
                    acc = acc.rstrip(" ")
                analysis.overrides[len(acc)] = item.reading
                analysis.written[len(acc)] = item.raw
                analysis.stand_ins.add(len(acc))
        elif isinstance(item, ControlTag):
            model_form = model_tags.get(item.name)
            if model_form is None:
                supported = ", ".join(control_tags) if control_tags else Notice("tag_none")
                analysis.warnings.append(Notice("tag_stripped", raw=item.raw, start=item.start, supported=supported))
                chunk = ""
            else:
                chunk, protected = model_form, True
        else:  # PauseMarker
            chunk = ""
            if item.problem:
                suffix = "" if item.pause_ms is not None else Notice("pause_default_used")
                analysis.warnings.append(Notice("pause_problem", raw=item.raw, start=item.start, problem=item.problem,
                                                suffix=suffix))
            if not is_speakable(acc):
                if not item.scene_break:
                    analysis.warnings.append(Notice("pause_nothing_before", raw=item.raw, start=item.start))
            else:
                analysis.boundaries.append((len(acc.rstrip()), item.pause_ms, item.scene_break))
        if not acc or acc[-1].isspace():
            chunk = chunk.lstrip() if not acc else (chunk[1:] if chunk[:1].isspace() else chunk)
        elif removed_markup and chunk and _is_word_char(acc[-1]) and _is_word_char(chunk[0]):
            chunk = " " + chunk
        elif protected and _is_word_char(acc[-1]):
            chunk = " " + chunk
        if chunk:
            removed_markup = False
        if not isinstance(item, TextPiece) and not chunk:
            removed_markup = True
        if protected:
            analysis.protected.append((len(acc) + len(chunk) - len(chunk.lstrip()), len(acc) + len(chunk)))
        acc += chunk
    normalized = acc.rstrip()
    if not is_speakable(normalized):
        left = Notice("only_left", text=normalized) if normalized else Notice("nothing_left")
        raise InputError(Notice("nothing_to_speak", left=left))
    analysis.normalized_text = normalized
    analysis.boundaries = [(min(off, len(normalized)), ms, scene) for off, ms, scene in analysis.boundaries]
    overrides, written, readings = analysis.overrides, analysis.written, analysis.readings
    for pos, char, reading, basis, rule in read_text_tuples(normalized):
        source = "g2p"
        if pos in overrides:
            reading, source, basis = overrides[pos], "override", "override"
        elif not reading:
            analysis.warnings.append(Notice("no_reading", char=char, pos=pos))
        polyphonic = len(common_readings(char)) > 1
        ambiguous = (polyphonic and source == "g2p" and basis in ("char", "rule")
                     and not (basis == "char" and char in _BOUND_READINGS))
        readings.append(CharReading(char, reading, polyphonic, source, pos, char_candidates(char), ambiguous, basis,
                                    rule, written.get(pos)))
    return analysis


def _substitutions(analysis: _Analysis, unencodable_characters: UnencodableCheck, supports_pinyin: bool
                   ) -> tuple[dict[int, str], list[Notice], Callable[[str], bool]]:
    """Stand-ins for the characters the model cannot encode, and the warnings saying so (one per character)."""
    norm = analysis.normalized_text
    by_pos = {r.position: r for r in analysis.readings}
    bad = unencodable_characters({c for c in norm if not c.isspace() and not c.isascii()})
    cache: dict[str, bool] = {}

    def usable(char: str) -> bool:
        if char not in cache:
            cache[char] = not unencodable_characters({char})
        return cache[char]

    subs: dict[int, str] = {}
    warnings: list[Notice] = []
    decided: dict[tuple[str, str], tuple[str, Notice]] = {}
    for pos, char in enumerate(norm):
        if char not in bad:
            continue
        reading = by_pos[pos].pinyin if pos in by_pos else ""
        key = (char, reading)
        if key not in decided:
            if reading and supports_pinyin:
                decided[key] = ("{" + reading + "}", Notice("unencodable_pinyin", char=char, pos=pos, reading=reading))
            else:
                sub = next((c for c in homophone_candidates(reading) if usable(c)), None) if reading else None
                if sub is not None:
                    decided[key] = (sub, Notice("unencodable_replaced", char=char, pos=pos, sub=sub, reading=reading))
                else:
                    decided[key] = ("", Notice("unencodable_skipped", char=char, pos=pos))
            warnings.append(decided[key][1])
        subs[pos] = decided[key][0]
    return subs, warnings, usable


def prepare_text(text: str, *, supports_pinyin: bool = False, max_segment_chars: int = DEFAULT_MAX_SEGMENT_CHARS,
                 default_pause_ms: int = FrontendConfig.default_pause_ms,
                 min_segment_chars: int = FrontendConfig.min_segment_chars,
                 scene_break_pause_ms: int = FrontendConfig.scene_break_pause_ms,
                 control_tags: tuple[str, ...] = (),
                 unencodable_characters: UnencodableCheck | None = None, pack_sentences: bool = True,
                 measure: Callable[[str], int] | None = None,
                 max_segment_units: int | None = None) -> PreparedText:
    """Normalise, read and segment one request's text.

    Args:
        text: raw user text, Chinese and/or English, with optional markup (``tts_app.frontend.markup``): pinyin
            ``字(zhong4)`` / ``<行|HANG2>`` / ``DE5`` / whole pinyin lines, pause markers ``[pause:500ms]``, scene
            breaks (``***`` lines), control tags ``[laugh]``.
        supports_pinyin: the model reads ``{pinyin}`` tokens (``ModelFacts.supports_pinyin``); else overrides become
            single-reading homophones (trade-off in ``render``).
        max_segment_chars: most characters of normalised text per segment (>= 8), a hard limit (``segment``).
        pack_sentences: consecutive sentences share a segment while it stays within the limits (the default, as
            every model's upstream tool speaks them); False = one segment per sentence at least.
        measure, max_segment_units: the model's own segment unit (e.g. IndexTTS 2's text tokens: a function
            counting them in a piece of normalised text) and its limit per segment; None = characters only.
        default_pause_ms: silence between segments not separated by a pause marker, in ms (>= 0).
        min_segment_chars: segments with fewer speakable characters (letters, digits, Chinese characters) are merged
            into a neighbour, never across a pause marker (>= 0).
        scene_break_pause_ms: silence for a scene-break line (``***``, ``---``), in ms (>= 0).
        control_tags: the tags the model understands, in its syntax (``ModelFacts.control_tags``); other tags are
            removed with a warning.
        unencodable_characters: ``TTSAdapter.unencodable_characters`` of the model, or None (no check): characters
            it returns are replaced in the model's text by a character that reads the same and that it can encode
            (``{pinyin}`` when the model supports pinyin), or skipped, with a warning each.

    Returns:
        PreparedText: normalised text, segments (rendered text, source text, pause after in ms), per-character
        readings and warnings (``Notice`` s). The pause after the last segment is 0 unless a marker ends the text.

    Raises:
        InputError: ``text`` is not a string, is empty or whitespace only, has nothing speakable (emoji or
            punctuation only), has an unclosed pause marker; or a knob is out of range. Its message is a ``Notice``.
    """
    for name, value, minimum in (("max_segment_chars", max_segment_chars, MIN_MAX_SEGMENT_CHARS),
                                 ("default_pause_ms", default_pause_ms, 0), ("min_segment_chars", min_segment_chars, 0),
                                 ("scene_break_pause_ms", scene_break_pause_ms, 0)):
        if value < minimum:
            raise InputError(Notice("knob_min", name=name, value=value, minimum=minimum))
    analysis = _analyse(text, tuple(control_tags))
    norm = analysis.normalized_text
    boundaries = [(off, scene_break_pause_ms if scene else default_pause_ms if ms is None else ms)
                  for off, ms, scene in analysis.boundaries]
    spans = split_spans(norm, boundaries, max_segment_chars=max_segment_chars, min_segment_chars=min_segment_chars,
                        default_pause_ms=default_pause_ms, protected=analysis.protected,
                        pack_sentences=pack_sentences, measure=measure, max_segment_units=max_segment_units)
    warnings = list(analysis.warnings)
    subs: dict[int, str] = {}
    usable = None
    if unencodable_characters is not None:
        subs, problems, usable = _substitutions(analysis, unencodable_characters, supports_pinyin)
        warnings.extend(problems)
    if not supports_pinyin:
        for pos, reading in sorted(analysis.overrides.items()):
            if pos in analysis.stand_ins or pos in subs:
                continue
            if not render_char(norm[pos], reading, supports_pinyin=False, usable=usable)[1]:
                warnings.append(Notice("no_homophone", char=norm[pos], pos=pos, reading=reading))
    stand_in_chars = {pos: norm[pos] for pos in analysis.stand_ins if pos not in subs}
    segments = []
    for sp in spans:
        raw = norm[sp.start:sp.end]
        start = sp.start + (len(raw) - len(raw.lstrip()))
        end = sp.end - (len(raw) - len(raw.rstrip()))
        overrides = {p: r for p, r in analysis.overrides.items() if supports_pinyin or p not in stand_in_chars}
        rendered = render_text(norm, start, end, overrides, supports_pinyin=supports_pinyin,
                               substitutions=subs, usable=usable)
        if usable is not None and not any(c.isalnum() for c in rendered):
            # every word of it was skipped as unencodable (a Cyrillic sentence for a zh/en vocabulary): the model
            # would get punctuation alone; its pause stays after the previous segment
            if segments:
                segments[-1] = dataclasses.replace(segments[-1], pause_after_ms=max(segments[-1].pause_after_ms,
                                                                                    sp.pause_after_ms))
            continue
        segments.append(TextSegment(rendered, norm[start:end], sp.pause_after_ms))
    if not segments:
        skipped = sorted({norm[int(n.params["pos"])] for n in warnings
                          if getattr(n, "code", None) == "unencodable_skipped"})
        raise InputError(Notice("nothing_the_model_reads", chars="".join(skipped) or norm.strip()[:40]))
    return PreparedText(norm, segments, list(analysis.readings), warnings, notation=analysis.notation)


@lru_cache(maxsize=256)
def preview_pronunciation(text: str) -> PronunciationPreview:
    """Per-character readings and warnings of ``text``, for the UI's live preview (no segmentation, no rendering).

    Same readings and warnings as ``prepare_text``, but never raises for bad text: an empty text gives an empty
    preview, and what ``prepare_text`` would raise comes back as the only warning. Cached (last 256 texts); the first
    call loads the dictionaries (``warm_up`` does it at start-up), later ones take milliseconds.
    """
    if not isinstance(text, str) or not text.strip():
        return PronunciationPreview((), (), "")
    try:
        analysis = _analyse(text)
    except InputError as exc:
        return PronunciationPreview((), (exc.args[0],), "")
    return PronunciationPreview(tuple(analysis.readings), tuple(analysis.warnings), analysis.normalized_text,
                                analysis.notation)


def warm_up() -> None:
    """Load everything the front end loads lazily (lexicon, jieba, OpenCC, wetext's zh and en FSTs, the homophone
    table; about 2-3 s), so the first request or keystroke does not pay for it. Call once at app start, e.g. in a
    background thread."""
    from tts_app.frontend.g2p import homophone_table

    prepare_text("预热：共3个，重(zhong4)要。Warm up 2 normalisers.")
    homophone_table()
