"""The front end's entry points: ``prepare_text`` (once per request, for the engine) and ``preview_pronunciation``
(on every keystroke, for the UI).

Pipeline: markup (annotations, pause markers) -> normalisation of the plain text between markup (wetext per
language run) -> readings (pypinyin G2P, annotations override) -> segmentation -> rendering for the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from tts_app.config import DEFAULT_MAX_SEGMENT_CHARS, MIN_MAX_SEGMENT_CHARS, FrontendConfig
from tts_app.errors import InputError
from tts_app.frontend.g2p import char_candidates, common_readings, g2p, is_hanzi
from tts_app.frontend.markup import Annotation, TextPiece, parse_markup
from tts_app.frontend.normalize import default_language, is_speakable, normalize_chunk
from tts_app.frontend.render import render_char, render_text
from tts_app.frontend.segment import split_spans
from tts_app.frontend.types import CharReading, PreparedText, PronunciationPreview, TextSegment

__all__ = ["DEFAULT_MAX_SEGMENT_CHARS", "MIN_MAX_SEGMENT_CHARS", "prepare_text", "preview_pronunciation", "warm_up"]


@dataclass
class _Analysis:
    normalized_text: str
    overrides: dict[int, str] = field(default_factory=dict)  # offset in normalized_text -> TONE3
    boundaries: list[tuple[int, int | None]] = field(default_factory=list)  # (offset, pause ms or None=default)
    warnings: list[str] = field(default_factory=list)
    readings: list[CharReading] = field(default_factory=list)


def _is_word_char(char: str) -> bool:
    """Letters and digits of alphabetic scripts (two of them side by side form one word)."""
    return char.isalnum() and not is_hanzi(char)


def _apply_annotation(acc: str, ann: Annotation, analysis: _Analysis) -> str | None:
    """Record the overrides of one annotation against the normalised text so far (``acc``). Returns text to append
    to ``acc`` instead (a toneless "annotation" that splits no word is kept as ordinary text), or None. Policy for
    bad annotations: ``tts_app.frontend.markup``'s docstring."""
    end = len(acc.rstrip(" "))
    hanzi_start = end
    while hanzi_start > 0 and is_hanzi(acc[hanzi_start - 1]):
        hanzi_start -= 1
    where = f"annotation {ann.raw!r} at input position {ann.start}"
    kinds = [kind for kind, _ in ann.parsed]
    if not ann.closed or "not_pinyin" in kinds or ("toneless" in kinds and ann.inside_word):
        # An attempt that cannot be applied: removed, so the model never reads its letters inside Chinese text.
        char = acc[end - 1] if end > hanzi_start else ""
        if not ann.closed:
            chars = acc[max(hanzi_start, end - len(ann.tokens)):end]
            why = f" is not closed; write it as {chars}({' '.join(ann.tokens)})"
        else:
            why = ": " + "; ".join(p for k, p in ann.parsed if k != "ok")
        kept = (f"'{char}' keeps its default reading (valid readings of '{char}': "
                f"{', '.join(char_candidates(char)) or 'none known'})") if char else "nothing was applied"
        analysis.warnings.append(f"{where}{why}; it was removed and {kept}")
        return None
    if "toneless" in kinds:
        if end > hanzi_start:
            problems = "; ".join(p for k, p in ann.parsed if k != "ok")
            analysis.warnings.append(f"{where} is read as ordinary text: {problems}")
        return ann.raw
    if end == hanzi_start:
        after = repr(acc[end - 1]) if end else "the start of the text"
        analysis.warnings.append(f"{where} follows {after}, which is not a Chinese character; it was removed. Put "
                                 "the reading right after the character, e.g. 重(zhong4)")
        return None
    num_hanzi = end - hanzi_start
    if len(ann.tokens) > num_hanzi:
        analysis.warnings.append(f"{where} has {len(ann.tokens)} readings but only {num_hanzi} Chinese "
                                 f"character(s) {acc[hanzi_start:end]!r} precede it; it was ignored. Give one "
                                 "reading per character, e.g. 银行(yin2 hang2)")
        return None
    first = end - len(ann.tokens)
    for offset, token, (kind, value) in zip(range(first, end), ann.tokens, ann.parsed):
        char = acc[offset]
        known = char_candidates(char)
        valid = ", ".join(known) if known else "none known"
        if kind != "ok":
            analysis.warnings.append(f"{where}: {value}; '{char}' keeps its default reading (valid readings of "
                                     f"'{char}': {valid})")
            continue
        if known and value not in known:
            # Not applied: forcing a reading the character does not have makes a characters-only model read a
            # different character (银行(yin2) would become 银银). A character pypinyin cannot read at all takes any
            # reading (that is how its reading is supplied).
            hint = next((f"; {value} is a reading of '{acc[i]}': put it right after that character, "
                         f"{acc[i]}({token})" for i in range(end - 1, hanzi_start - 1, -1)
                         if i != offset and value in char_candidates(acc[i])), "")
            analysis.warnings.append(f"{where}: {value} is not a reading of '{char}' (valid: {valid}); it was not "
                                     f"applied and '{char}' keeps its default reading{hint}")
            continue
        analysis.overrides[offset] = value
    return None


def _analyse(text: str) -> _Analysis:
    if not isinstance(text, str):
        raise InputError(f"text must be a string, got {type(text).__name__}")
    if not text.strip():
        raise InputError("text is empty; type the words to speak")
    items = parse_markup(text)
    default_lang = default_language(text)
    analysis = _Analysis("")
    acc = ""
    removed_markup = False  # markup was just removed: keep the words on either side apart ("hello[pause]world")
    for item in items:
        if isinstance(item, TextPiece):
            chunk, problems = normalize_chunk(item.text, default_lang)
            analysis.warnings.extend(f"text at input position {item.start}: {p}" for p in problems)
        elif isinstance(item, Annotation):
            chunk = _apply_annotation(acc, item, analysis) or ""
        else:  # PauseMarker
            chunk = ""
            if item.problem:
                analysis.warnings.append(f"pause marker {item.raw!r} at input position {item.start}: {item.problem}"
                                         + ("" if item.pause_ms is not None else "; the default pause is used"))
            if not is_speakable(acc):
                analysis.warnings.append(f"pause marker {item.raw!r} at input position {item.start} has no text "
                                         "before it; it was ignored (a pause can only follow speech)")
            else:
                analysis.boundaries.append((len(acc.rstrip()), item.pause_ms))
        if not acc or acc[-1].isspace():
            chunk = chunk.lstrip() if not acc else (chunk[1:] if chunk[:1].isspace() else chunk)
        elif removed_markup and chunk and _is_word_char(acc[-1]) and _is_word_char(chunk[0]):
            chunk = " " + chunk
        if chunk:
            removed_markup = False
        if not isinstance(item, TextPiece) and not chunk:
            removed_markup = True
        acc += chunk
    normalized = acc.rstrip()
    if not is_speakable(normalized):
        left = f"only {normalized!r} is" if normalized else "nothing is"
        raise InputError(f"text has nothing to speak: after removing emoji, symbols and markup, {left} left; "
                         "write words or numbers")
    analysis.normalized_text = normalized
    analysis.boundaries = [(min(off, len(normalized)), ms) for off, ms in analysis.boundaries]
    for pos, char, reading in g2p(normalized):
        candidates = char_candidates(char)
        source = "g2p"
        if pos in analysis.overrides:
            reading, source = analysis.overrides[pos], "override"
        elif not reading:
            analysis.warnings.append(f"no reading is known for '{char}' at position {pos} of the normalised text; "
                                     "annotate it, e.g. 字(zi4)")
        polyphonic = len(common_readings(char)) > 1
        analysis.readings.append(CharReading(char, reading, polyphonic, source, pos, candidates))
    return analysis


def prepare_text(text: str, *, supports_pinyin: bool = False, max_segment_chars: int = DEFAULT_MAX_SEGMENT_CHARS,
                 default_pause_ms: int = FrontendConfig.default_pause_ms,
                 min_segment_chars: int = FrontendConfig.min_segment_chars) -> PreparedText:
    """Normalise, read and segment one request's text.

    Args:
        text: raw user text, Chinese and/or English, with optional pinyin annotations ``字(zhong4)`` /
            ``银行(yin2 hang2)`` and pause markers ``[pause:500ms]`` / ``[pause:1.5s]`` (see ``markup``).
        supports_pinyin: the model reads ``{pinyin}`` tokens; else overrides become single-reading homophones
            (trade-off in ``render``).
        max_segment_chars: most characters of normalised text per segment (>= 8); exceeded only where no allowed
            cut exists (e.g. one very long English word).
        default_pause_ms: silence between segments not separated by a pause marker, in ms (>= 0).
        min_segment_chars: segments with fewer speakable characters (letters, digits, Chinese characters) are merged
            into a neighbour, never across a pause marker (>= 0).

    Returns:
        PreparedText: normalised text, segments (rendered text, source text, pause after in ms), per-character
        readings and warnings. The pause after the last segment is 0 unless a marker ends the text.

    Raises:
        InputError: ``text`` is not a string, is empty or whitespace only, has nothing speakable (emoji or
            punctuation only), has an unclosed pause marker; or a knob is out of range.
    """
    if max_segment_chars < MIN_MAX_SEGMENT_CHARS:
        raise InputError(f"max_segment_chars={max_segment_chars} must be >= {MIN_MAX_SEGMENT_CHARS}")
    if default_pause_ms < 0:
        raise InputError(f"default_pause_ms={default_pause_ms} must be >= 0")
    if min_segment_chars < 0:
        raise InputError(f"min_segment_chars={min_segment_chars} must be >= 0")
    analysis = _analyse(text)
    norm = analysis.normalized_text
    boundaries = [(off, default_pause_ms if ms is None else ms) for off, ms in analysis.boundaries]
    spans = split_spans(norm, boundaries, max_segment_chars=max_segment_chars, min_segment_chars=min_segment_chars,
                        default_pause_ms=default_pause_ms)
    warnings = list(analysis.warnings)
    if not supports_pinyin:
        for pos, reading in sorted(analysis.overrides.items()):
            problem = render_char(norm[pos], reading, supports_pinyin=False)[1]
            if problem:
                warnings.append(f"override of '{norm[pos]}' at position {pos} of the normalised text: {problem}")
    segments = []
    for sp in spans:
        raw = norm[sp.start:sp.end]
        start = sp.start + (len(raw) - len(raw.lstrip()))
        end = sp.end - (len(raw) - len(raw.rstrip()))
        rendered = render_text(norm, start, end, analysis.overrides, supports_pinyin=supports_pinyin)
        segments.append(TextSegment(rendered, norm[start:end], sp.pause_after_ms))
    return PreparedText(norm, segments, list(analysis.readings), warnings)


@lru_cache(maxsize=256)
def preview_pronunciation(text: str) -> PronunciationPreview:
    """Per-character readings and warnings of ``text``, for the UI's live preview (no segmentation, no rendering).

    Same readings and warnings as ``prepare_text``, but never raises for bad text: an empty text gives an empty
    preview, and what ``prepare_text`` would raise comes back as the only warning. Cached (last 256 texts); the first
    call loads pypinyin's and wetext's dictionaries (about 1-2 s), later ones take milliseconds.
    """
    if not isinstance(text, str) or not text.strip():
        return PronunciationPreview((), (), "")
    try:
        analysis = _analyse(text)
    except InputError as exc:
        return PronunciationPreview((), (str(exc),), "")
    return PronunciationPreview(tuple(analysis.readings), tuple(analysis.warnings), analysis.normalized_text)


def warm_up() -> None:
    """Load everything the front end loads lazily (pypinyin's dictionaries, wetext's zh and en FSTs, the homophone
    table; about 2-5 s on a busy CPU), so the first request or keystroke does not pay for it. Call once at app
    start, e.g. in a background thread."""
    from tts_app.frontend.g2p import homophone_table

    prepare_text("预热：共3个，重(zhong4)要。Warm up 2 normalisers.")
    homophone_table()
