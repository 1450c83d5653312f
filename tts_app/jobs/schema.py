"""JSONL job schema: reading and validation (path and ZIP safety: ``tts_app.jobs.safety``). Pure Python, no torch,
no model.

A *job* is a JSONL file: one JSON object per line, each one request. Fields (the GLM-TTS release names are accepted
as aliases, https://github.com/zai-org/GLM-TTS):

==================  =====================  ===============================================================
field               alias                  meaning
==================  =====================  ===============================================================
``input_text``      ``syn_text``           text to speak (required, non-empty)
``prompt_audio``    ``prompt_speech``      reference audio file, relative to the JSONL's folder or the audio
                                           folder/ZIP (required unless a default voice is given); a path
                                           written from the folder above (``examples/prompt/a.wav`` in
                                           ``examples/x.jsonl``, as GLM-TTS's examples are) is found too
                                           (``AudioSources.resolve``)
``prompt_text``                            transcript of the reference audio (optional)
``voice``                                  a saved voice of the voice library (``tts_app.voices``), instead of
                                           ``prompt_audio`` (its transcript is used unless ``prompt_text`` is given)
``script`` + ``speakers``                  a dialogue instead of ``input_text``: the script text (``Speaker 1:``,
                                           ``[S1]`` or ``Name:`` lines, ``tts_app.dialogue``) and per speaker
                                           (number or name) a saved voice's name or a reference audio file
``output_name``     ``uttid``              output file name without ``.wav`` (default: zero-padded line number and
                                           the text's first words, ``00003_今天天气很好``)
``format``                                 this line's audio format, ``wav``, ``flac``, ``mp3`` or ``opus``
                                           (default: the job's, ``batch --format`` / the Batch tab's choice)
``seed`` ``greedy`` ``temperature`` ``top_p`` ``top_k`` ``cfg_scale`` ``max_new_tokens`` ``num_beams``
``length_penalty`` ``num_diffusion_steps`` ``max_segment_chars`` ``pause_between_segments_ms`` ``speed`` ``duration_s`` ``loudness_lufs`` ``chapter_pause_ms``
``segment_durations_s`` (a list: seconds per line of the text, for dubbing) ``prompt_cache`` (GLM-TTS's long-text
prompt cache, true / false; not the KV cache) ``reference_cleanup`` (``auto``,
``full`` or ``off``: what is done to the line's reference audio; a saved voice is
cleaned as it was saved unless the line gives one) ``segment_context`` (true: each segment hears the earlier ones)
``take_check`` (``off``, ``score`` or ``reroll``: score each
segment's take, and generate one below the thresholds again) ``take_max_rerolls`` ``take_max_error_rate``
``take_min_similarity``
                                           per-line ``SynthesisParams`` overrides (optional)
``emo_audio_prompt`` ``emo_audio``         emotion clip (a path, resolved like ``prompt_audio``), IndexTTS 2 only
``emo_vector``                             8 emotion weights in [0, 1]: a list in the order happy, angry, sad,
                                           afraid, disgusted, melancholic, surprised, calm, or an object
                                           ``{"happy": 0.8}`` (missing names are 0)
``emo_alpha``       ``emo_weight``         emotion strength in [0, 1] (default 1)
``use_emo_text``                           read the emotion from ``emo_text`` (default: the line's text) with
                                           the checkpoint's emotion model
``emo_text``                               the text to read the emotion from (with ``use_emo_text``)
==================  =====================  ===============================================================

A line is written either with our names or with GLM-TTS's (``uttid``, ``prompt_text``, ``prompt_speech``,
``syn_text``: upstream's ``examples/example_zh.jsonl`` runs unchanged); a line mixing the two is refused with a
message naming both formats (``GLMTTS_FIELDS``).

The emotion fields (names as in IndexTTS 2's own ``infer``) take one source per line; a line with emotion fields
fails with a clear message when the loaded model has no emotion control.

Unknown fields give a warning. Reading is streaming: ``iter_job`` yields one parsed line at a time and keeps only
the set of output names (for duplicate detection), so a 10 000-line file validates in small memory.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from tts_app.config import REQUEST_LIMITS
from tts_app.errors import InputError, JobLineError
from tts_app.frontend.messages import message_of
from tts_app.jobs.messages import Notice, json_error
from tts_app.jobs.safety import MAX_ZIP_RATIO, AudioSources, rename_warning, sanitize_output_name
from tts_app.request import EMOTION_NAMES, SynthesisParams, check_emotion


@dataclass(frozen=True)
class JobConfig:
    """Settings of the JSONL job runner (defaults live here, once).

    Attributes:
        extra_allowed_roots: folders ``prompt_audio`` may point into besides the JSONL's own folder and the audio
            folder (absolute paths and ``..`` are refused unless they stay inside one of the allowed roots).
        max_zip_bytes: largest total uncompressed size of an uploaded audio ZIP, in bytes (zip-bomb guard).
        max_zip_members: most files in an uploaded audio ZIP.
        max_zip_ratio: most a ZIP member may unpack to, as a multiple of its packed size (zip-bomb guard; 100:
            audio barely deflates, a WAV of pure silence about 300-1000 times, so members under
            ``tts_app.jobs.safety.MIN_RATIO_CHECKED_BYTES`` unpacked are not held to it). A job unpacks only the
            members its lines name.
        max_in_flight_lines: most lines submitted to the engine and not yet finished (bounds memory: reference
            audio of at most this many lines is loaded at once); None = 4 x the engine's max batch size.
        output_name_digits: zero-padding of the default output name (the 1-based line number).
        voices_dir: folder of the voice library that ``voice`` fields name (``tts_app.voices.VoiceLibrary``);
            None = only the bundled example voices.
        audio_format: the lines' audio format, "wav", "flac", "mp3" or "opus" (``tts_app.audio.formats``).
    """

    extra_allowed_roots: tuple[str, ...] = ()
    max_zip_bytes: int = 2 * 1024**3
    max_zip_members: int = 10_000
    max_zip_ratio: float = MAX_ZIP_RATIO
    max_in_flight_lines: int | None = None
    output_name_digits: int = 5
    voices_dir: str | None = None
    audio_format: str = "wav"

    def __post_init__(self) -> None:
        from tts_app.audio.formats import AUDIO_FORMATS

        if self.audio_format not in AUDIO_FORMATS:
            raise InputError(f"audio format {self.audio_format!r} is unknown; use one of {', '.join(AUDIO_FORMATS)}")

    def voice_library(self):
        """The ``VoiceLibrary`` of ``voices_dir`` (bundled voices included)."""
        from tts_app.voices import VoiceLibrary

        return VoiceLibrary(self.voices_dir)


# canonical field -> accepted aliases (GLM-TTS names)
ALIASES: dict[str, tuple[str, ...]] = {
    "input_text": ("syn_text",),
    "prompt_audio": ("prompt_speech",),
    "prompt_text": (),
    "output_name": ("uttid",),
    "emo_audio_prompt": ("emo_audio",),
    "emo_vector": (),
    "emo_alpha": ("emo_weight",),
    "use_emo_text": (),
    "emo_text": (),
}
EMOTION_FIELDS = ("emo_audio_prompt", "emo_vector", "emo_alpha", "use_emo_text", "emo_text")

#: (our name, GLM-TTS's name) of the fields where the two formats differ (``prompt_text`` is the same in both). A
#: line is written in one format or the other (``_check_one_format``); upstream's ``examples/example_zh.jsonl``
#: lines hold exactly ``uttid``, ``prompt_text``, ``prompt_speech`` and ``syn_text``.
GLMTTS_FIELDS: tuple[tuple[str, str], ...] = (("output_name", "uttid"), ("prompt_audio", "prompt_speech"),
                                              ("input_text", "syn_text"))

# per-line SynthesisParams overrides and their JSON types
PARAM_TYPES: dict[str, type] = {
    "seed": int,
    "greedy": bool,
    "temperature": float,
    "top_p": float,
    "top_k": int,
    "cfg_scale": float,
    "max_new_tokens": int,
    "num_beams": int,  # beam search, for models that have it (IndexTTS 2)
    "length_penalty": float,
    "num_diffusion_steps": int,  # flow-matching Euler steps, for models that have them (IndexTTS 2: 25; fast 12)
    "max_segment_chars": int,
    "pause_between_segments_ms": int,
    "speed": float,
    "duration_s": float,
    "loudness_lufs": float,
    "chapter_pause_ms": int,
    "segment_durations_s": list,  # of numbers: seconds per line of the text
    "reference_cleanup": str,  # "auto" / "full" / "off" (tts_app.config.REFERENCE_CLEANUPS)
    "segment_context": bool,  # long text in one voice (CSM, Higgs Audio v2; GLM-TTS: its prompt cache; others warn)
    # the take policy (tts_app.quality.policy): "off" / "score" / "reroll" and its thresholds
    "take_check": str,
    "take_max_rerolls": int,
    "take_max_error_rate": float,
    "take_min_similarity": float,
    "prompt_cache": bool,  # long-text prompt cache, for models that have one (GLM-TTS); not the KV cache
}

#: fields that are neither aliased nor generation settings
OTHER_FIELDS = frozenset({"voice", "script", "speakers", "format"})

KNOWN_FIELDS = (frozenset(ALIASES) | {a for names in ALIASES.values() for a in names} | frozenset(PARAM_TYPES)
                | OTHER_FIELDS)

# Names people write for a required field (other TTS tools' JSONL, plain guesses); a line missing the field but
# holding one of these gets a "rename it" hint. Close spellings of the field are found by difflib as well.
NEAR_MISSES: dict[str, tuple[str, ...]] = {
    "input_text": ("text", "input", "tts_text", "target_text", "content", "sentence", "utterance"),
    "prompt_audio": ("audio", "prompt_wav", "ref_audio", "reference_audio", "speaker_audio", "wav", "voice"),
}

@dataclass(frozen=True)
class JobEmotion:
    """A line's emotion control, validated (``tts_app.request.check_emotion``); the runner loads the clip and makes
    the request's ``EmotionControl``.

    Attributes:
        audio: resolved emotion clip file (inside an allowed root), or None.
        vector: 8 weights in ``EMOTION_NAMES`` order, or None.
        weight: strength in [0, 1].
        from_text: read the emotion from ``text`` (None: the line's text).
        text: the text to read the emotion from, or None.
    """

    audio: Path | None
    vector: tuple[float, ...] | None
    weight: float
    from_text: bool
    text: str | None


@dataclass(frozen=True)
class JobLine:
    """One valid line of a job.

    Attributes:
        line_number: 1-based physical line number in the file (blank lines count).
        output_name: sanitised file name without extension; the audio goes to ``OUT_DIR/<output_name>.wav``.
        input_text: the text to speak.
        prompt_audio: resolved reference-audio file (inside an allowed root), or None = the job's default voice.
        prompt_text: transcript of the reference audio, or None.
        params: per-line ``SynthesisParams`` overrides, already type-checked (field name -> value).
        warnings: notices for the user (unknown fields, ...).
        emotion: the line's emotion control, or None.
        voice: name of a saved voice (checked to exist in the job's voice library) instead of ``prompt_audio``.
        script: a dialogue (``tts_app.dialogue.Script``) instead of ``input_text`` (which then holds the script's
            text), or None.
        speaker_voices: per script speaker, ("voice", name) or ("file", resolved path).
        audio_format: the line's own audio format (``format`` field: "wav", "flac", "mp3", "opus"), or None = the
            job's (``JobConfig.audio_format``).
    """

    line_number: int
    output_name: str
    input_text: str
    prompt_audio: Path | None
    prompt_text: str | None
    params: dict[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    emotion: JobEmotion | None = None
    voice: str | None = None
    script: Any = None
    speaker_voices: tuple[tuple[str, Any], ...] = ()
    audio_format: str | None = None

    def synthesis_params(self, base: SynthesisParams) -> SynthesisParams:
        """``base`` (the job's defaults) with this line's overrides applied.

        Raises:
            InputError: the combination is invalid (e.g. a bad value in ``base``).
        """
        return dataclasses.replace(base, **self.params)


@dataclass(frozen=True)
class InvalidLine:
    """A line that cannot run. ``output_name`` is the name it would have had, when known (for the results table)."""

    line_number: int
    error: JobLineError
    output_name: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def message(self) -> str:
        return self.error.reason


@dataclass
class ValidationRow:
    """One row of the validation table: ``status`` is "error" or "warning"."""

    line: int
    status: str
    message: str


@dataclass
class ValidationReport:
    """Outcome of ``validate_job``. Only problem rows are kept (errors and warnings), so memory stays small.

    Attributes:
        jsonl_path: the file validated.
        encoding: codec the file was read with ("utf-8", "utf-8-sig", "utf-16", "gb18030").
        num_lines: non-blank lines.
        num_valid, num_invalid: lines that can / cannot run.
        rows: one row per error or warning, in line order; ``line`` 0 means the whole file (shown as "job file").
    """

    jsonl_path: Path
    encoding: str = "utf-8"
    num_lines: int = 0
    num_valid: int = 0
    num_invalid: int = 0
    rows: list[ValidationRow] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.num_lines > 0 and self.num_invalid == 0

    @property
    def num_warnings(self) -> int:
        return sum(1 for r in self.rows if r.status == "warning")

    def as_table(self) -> list[list[Any]]:
        """Rows as ``[line, status, message]`` lists (for ``gr.Dataframe``)."""
        return [[r.line, r.status, r.message] for r in self.rows]

    def format_text(self, lang: str = "en") -> str:
        """Human-readable summary plus one line per problem, in ``lang`` ("en" or "zh")."""
        head = Notice("job_validation_head", path=str(self.jsonl_path), num_lines=self.num_lines,
                      num_valid=self.num_valid, num_invalid=self.num_invalid, num_warnings=self.num_warnings,
                      encoding=self.encoding)
        rows = [Notice("job_validation_row", where=Notice("job_job_file") if r.line == 0 else Notice(
            "job_line", line=r.line), status=Notice("job_row_" + r.status), message=r.message) for r in self.rows]
        return "\n".join(message.render(lang) for message in [head, *rows])


# --------------------------------------------------------------------------------------------------- encoding


def detect_encoding(path: Path, chunk_bytes: int = 1 << 16) -> tuple[str, list[str]]:
    """Codec to read a JSONL file with, decided by streaming it once (constant memory).

    UTF-8 with or without BOM is the expected encoding; a UTF-16 BOM is honoured; a file that is not valid UTF-8
    but decodes as GB18030 (superset of GBK/GB2312, what Chinese Windows editors save) is read as such with a
    warning.

    Returns:
        (codec name for ``open(encoding=...)``, warnings).

    Raises:
        InputError: the file cannot be read, or decodes neither as UTF-8 nor as GB18030.
    """
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise InputError(Notice("job_cannot_read", name=path.name, reason=exc.strerror or str(exc))) from exc
    if head.startswith(codecs.BOM_UTF8):
        candidates = ["utf-8-sig"]
    elif head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        candidates = ["utf-16"]
    else:
        candidates = ["utf-8", "gb18030"]
    first_error = ""
    for codec in candidates:
        bad = _first_decode_error(path, codec, chunk_bytes)
        if bad is None:
            warnings = []
            if codec == "gb18030":
                warnings.append(Notice("job_gbk", where=first_error))
            return codec, warnings
        first_error = first_error or bad
    raise InputError(Notice("job_not_utf8", name=path.name, where=first_error))


def _first_decode_error(path: Path, codec: str, chunk_bytes: int) -> str | None:
    """None when the whole file decodes with ``codec``; else where it first fails (line number, byte)."""
    decoder = codecs.getincrementaldecoder(codec)()
    line = 1
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(chunk_bytes)
            final = not chunk
            try:
                text = decoder.decode(chunk, final=final)
            except UnicodeDecodeError as exc:
                line += exc.object[: exc.start].count(b"\n")
                byte = exc.object[exc.start:exc.start + 1].hex() if exc.object else ""
                return Notice("job_bad_byte", byte=byte, line=line)
            line += text.count("\n")
            if final:
                return None


def default_output_name(line_number: int, digits: int, obj: Any = None) -> str:
    """The name of a line that gives no ``output_name``: the zero-padded 1-based line number and the first words
    of what it says (``tts_app.longform.name_from_text``), e.g. ``00003_今天天气很好``; for a dialogue, the first
    turn's words (not its speaker label); the number alone when the line has no text (``00007``)."""
    text = None
    if isinstance(obj, dict):
        script = obj.get("script")
        if isinstance(script, str) and script.strip():
            from tts_app.dialogue import parse_script

            try:
                turns = parse_script(script).turns
                text = turns[0].text if turns else None
            except InputError:  # the line fails validation with its own message; name it by its number
                text = None
        else:
            value = next((obj[n] for n in ("input_text", *ALIASES["input_text"]) if n in obj), None)
            text = value if isinstance(value, str) else None
    if text is None or not re.search(r"\w", text):  # nothing to name it by (no letters, digits or hanzi)
        return f"{line_number:0{digits}d}"
    from tts_app.longform import name_from_text

    return name_from_text(text, line_number, digits=digits)


# --------------------------------------------------------------------------------------------------- lines


def _check_text(text: str, field_name: str, line_number: int) -> None:
    """``REQUEST_LIMITS.max_text_chars`` for one line's text (``tts_app.request.check_text``)."""
    from tts_app.request import check_text

    try:
        check_text(text, field_name)
    except InputError as exc:
        raise JobLineError(line_number, exc.args[0], code="too_long") from None


def _bounded_number(text: str) -> int | float:
    """``json.loads``'s ``parse_int`` / ``parse_float``: a number of at most ``REQUEST_LIMITS.max_json_number_chars``
    characters (a 5,000-digit integer would otherwise stop the whole job in Python's int-to-str limit).

    Raises:
        _LineLimit: a longer number.
    """
    if len(text) > REQUEST_LIMITS.max_json_number_chars:
        raise _LineLimit(len(text))
    return float(text) if any(c in text for c in ".eE") else int(text)


class _LineLimit(ValueError):
    """A JSONL line over a ``RequestLimits`` bound while it is read (becomes that line's ``JobLineError``)."""


def _json_depth(value: Any) -> int:
    """How deeply objects and lists nest in a decoded JSON value (a scalar: 0)."""
    depth, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            depth = max(depth, level)
            stack.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return depth


def load_line(text: str, line_number: int) -> Any:
    """One JSONL line decoded, within ``REQUEST_LIMITS`` (length, nesting, number size).

    Raises:
        JobLineError: bad JSON (the column), or a line over a limit (which one).
    """
    max_chars = REQUEST_LIMITS.max_text_chars * 6 + 64 * 1024  # the text (as 6-character escapes, at worst), the rest
    if len(text) > max_chars:
        raise JobLineError(line_number, Notice("job_line_too_long", num_chars=len(text), max_chars=max_chars),
                           code="too_long")
    try:
        obj = json.loads(text, parse_int=_bounded_number, parse_float=_bounded_number)
    except json.JSONDecodeError as exc:
        key = "job_bad_json_backslash" if exc.msg.startswith("Invalid \\escape") else "job_bad_json"
        raise JobLineError(line_number, Notice(key, detail=json_error(exc.msg), column=exc.colno)) from exc
    except _LineLimit as exc:
        raise JobLineError(line_number, Notice("job_json_number", num_chars=exc.args[0],
                                               max_chars=REQUEST_LIMITS.max_json_number_chars),
                           code="too_long") from None
    except (RecursionError, ValueError) as exc:  # nesting beyond Python's recursion limit; any other refusal
        if isinstance(exc, RecursionError):
            raise JobLineError(line_number, Notice("job_json_nested",
                                                   max_depth=REQUEST_LIMITS.max_json_depth)) from None
        raise JobLineError(line_number, Notice("job_bad_json_other", detail=str(exc))) from None
    if _json_depth(obj) > REQUEST_LIMITS.max_json_depth:
        raise JobLineError(line_number, Notice("job_json_depth", depth=_json_depth(obj),
                                               max_depth=REQUEST_LIMITS.max_json_depth))
    return obj


def _pick(obj: dict, canonical: str, line_number: int) -> Any:
    """Value of ``canonical`` or of one of its aliases (an error when two disagree)."""
    names = [n for n in (canonical, *ALIASES.get(canonical, ())) if n in obj]
    if len(names) > 1 and len({json.dumps(obj[n], sort_keys=True) for n in names}) > 1:
        raise JobLineError(line_number, Notice("job_both_given", first=names[0], second=names[1]))
    return obj[names[0]] if names else None


def _line_params(obj: dict, line_number: int) -> dict[str, Any]:
    """The line's generation settings (``PARAM_TYPES`` fields given and not null), each of the right type and
    together valid ``SynthesisParams`` (a ``JobLineError`` names the line and the field otherwise)."""
    params = {k: _check_param(k, obj[k], line_number) for k in PARAM_TYPES if obj.get(k) is not None}
    try:
        SynthesisParams(**params)
    except InputError as exc:
        raise JobLineError(line_number, message_of(exc)) from exc
    return params


def _check_param(name: str, value: Any, line_number: int) -> Any:
    want = PARAM_TYPES[name]
    if want is list:
        if not (isinstance(value, list) and value and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)):
            raise JobLineError(line_number, Notice("job_param_list", name=name, value=value))
        return tuple(float(v) for v in value)
    if want is str:  # a named choice (reference_cleanup): SynthesisParams checks the name
        if not isinstance(value, str):
            raise JobLineError(line_number, f"{name}={value!r} must be a string")
        return value
    ok = (isinstance(value, bool) if want is bool
          else isinstance(value, int) and not isinstance(value, bool) if want is int
          else isinstance(value, (int, float)) and not isinstance(value, bool))
    if not ok:
        raise JobLineError(line_number, Notice(f"job_param_{want.__name__}", name=name, value=value))
    if want is float and not math.isfinite(value):  # json.loads accepts NaN and Infinity
        raise JobLineError(line_number, Notice("job_param_finite", name=name, value=value))
    return float(value) if want is float else value


def _parse_format(obj: dict, line_number: int) -> str | None:
    """The line's ``format`` field ("wav", "flac", "mp3", "opus"; case and a leading dot ignored), or None.

    Raises:
        JobLineError: any other value, naming the allowed ones.
    """
    from tts_app.audio.formats import AUDIO_FORMATS

    value = obj.get("format")
    if value is None:
        return None
    name = value.strip().lower().lstrip(".") if isinstance(value, str) else None
    if name not in AUDIO_FORMATS:
        raise JobLineError(line_number, Notice("job_format_unknown", value=value, allowed=", ".join(AUDIO_FORMATS)))
    return name


def _uses_glmtts_names(obj: dict) -> bool:
    """The line names its fields as GLM-TTS's examples do (``syn_text``, ``prompt_speech``, ``uttid``)."""
    return any(theirs in obj for _, theirs in GLMTTS_FIELDS)


def _check_one_format(obj: dict, line_number: int) -> None:
    """A line is written with GLM-TTS's field names or with ours, not both (``GLMTTS_FIELDS``).

    Raises:
        JobLineError: one field under both names (``syn_text`` and ``input_text``), or a line mixing the formats
            across fields (``syn_text`` with ``prompt_audio``); the message lists both formats' fields.
    """
    ours = [o for o, _ in GLMTTS_FIELDS if o in obj]
    theirs = [t for _, t in GLMTTS_FIELDS if t in obj]
    if not ours or not theirs:
        return
    twice = next(((o, t) for o, t in GLMTTS_FIELDS if o in obj and t in obj), None)
    if twice is not None:
        raise JobLineError(line_number, Notice("job_same_field_twice", ours=twice[0], theirs=twice[1]))
    raise JobLineError(line_number, Notice("job_mixed_formats", theirs=", ".join(theirs), ours=", ".join(ours)))


def _missing_field(canonical: str, meaning: Notice, obj: dict) -> Notice:
    """"missing field 'input_text' (found 'text'; rename it to input_text)" when the line holds a near-miss
    name (``NEAR_MISSES`` or a close spelling), else "missing field 'input_text' (the text to speak)". A line in
    GLM-TTS's format is told the field by GLM-TTS's name ("missing field 'syn_text' (...)")."""
    import difflib

    unknown = [k for k in obj if isinstance(k, str) and k not in KNOWN_FIELDS]
    near = [k for k in unknown if k.strip().lower() in NEAR_MISSES.get(canonical, ())]
    near = near or difflib.get_close_matches(canonical, unknown, n=1, cutoff=0.75)
    theirs = dict(GLMTTS_FIELDS).get(canonical) if _uses_glmtts_names(obj) else None
    if near:
        return Notice("job_missing_near", field=theirs or canonical, near=near[0])
    if theirs is not None:
        return Notice("job_missing_theirs", field=theirs, meaning=meaning)
    return Notice("job_missing", field=canonical, meaning=meaning)


def parse_line(obj: Any, line_number: int, sources: AudioSources, *, has_default_voice: bool,
               digits: int) -> JobLine:
    """Validate one decoded JSON value into a ``JobLine`` (output-name uniqueness is checked by ``iter_job``).

    Raises:
        JobLineError: not an object, a missing/empty/ill-typed field, a bad parameter value, an unsafe or missing
            ``prompt_audio``, an unsafe ``output_name``.
    """
    if not isinstance(obj, dict):
        raise JobLineError(line_number, Notice("job_not_object", type=type(obj).__name__))
    warnings = [Notice("job_unknown_field", field=k) for k in obj if k not in KNOWN_FIELDS]
    _check_one_format(obj, line_number)

    name_value = _pick(obj, "output_name", line_number)
    if name_value is None:
        output_name = default_output_name(line_number, digits, obj)
    elif isinstance(name_value, str) and not name_value.strip():
        output_name = default_output_name(line_number, digits, obj)
        warnings.append(Notice("job_name_empty", file=output_name + ".wav"))
    else:
        output_name = sanitize_output_name(name_value, line_number)
        renamed = rename_warning(name_value, output_name)
        if renamed is not None:
            warnings.append(renamed)

    if obj.get("script") is not None:
        return _parse_dialogue_line(obj, line_number, sources, output_name, warnings)
    text = _pick(obj, "input_text", line_number)
    if text is None:
        raise JobLineError(line_number, _missing_field("input_text", Notice("job_meaning_text"), obj))
    if not isinstance(text, str) or not text.strip():
        raise JobLineError(line_number, Notice("job_text_empty"))
    _check_text(text, "input_text", line_number)

    prompt_text = _pick(obj, "prompt_text", line_number)
    if prompt_text is not None and not isinstance(prompt_text, str):
        raise JobLineError(line_number, Notice("job_prompt_text_type"))
    if prompt_text is not None:
        prompt_text = prompt_text.strip() or None

    audio_value = _pick(obj, "prompt_audio", line_number)
    voice = obj.get("voice")
    if voice is not None:
        if not isinstance(voice, str) or not voice.strip():
            raise JobLineError(line_number, Notice("job_voice_type"))
        if audio_value not in (None, ""):
            raise JobLineError(line_number, Notice("job_voice_and_audio"))
        found = sources.voices.find(voice)
        if found is None:
            names = ", ".join(repr(n) for n in sources.voices.names()) or Notice("job_none")
            raise JobLineError(line_number, Notice("job_voice_unknown", voice=voice, names=names))
        prompt_audio = None
        voice = found.name
    elif audio_value in (None, ""):
        if not has_default_voice:
            raise JobLineError(line_number, Notice("job_missing_no_default", missing=_missing_field(
                "prompt_audio", Notice("job_meaning_audio"), obj)))
        prompt_audio = None
    elif not isinstance(audio_value, str):
        raise JobLineError(line_number, Notice("job_audio_type"))
    else:
        prompt_audio = sources.resolve(audio_value, line_number)
        found_as = sources.found_as(audio_value)
        if found_as is not None:
            warnings.append(Notice("job_audio_found_as", field="prompt_speech" if "prompt_speech" in obj
                                   else "prompt_audio", value=audio_value, found=found_as[0], root=found_as[1]))

    params = _line_params(obj, line_number)
    return JobLine(line_number=line_number, output_name=output_name, input_text=text, prompt_audio=prompt_audio,
                   prompt_text=prompt_text, params=params, warnings=tuple(warnings), voice=voice,
                   emotion=_parse_emotion(obj, line_number, sources), audio_format=_parse_format(obj, line_number))


def _parse_emotion(obj: dict, line_number: int, sources: AudioSources) -> JobEmotion | None:
    """The line's emotion fields (``EMOTION_FIELDS``), or None when it has none.

    Raises:
        JobLineError: an ill-typed field, a vector of the wrong size or with unknown emotion names, values out of
            range, no source or more than one, an unsafe or missing emotion clip.
    """
    values = {name: _pick(obj, name, line_number) for name in EMOTION_FIELDS}
    if all(v is None for v in values.values()):
        return None
    clip, vector, weight = values["emo_audio_prompt"], values["emo_vector"], values["emo_alpha"]
    from_text, text = values["use_emo_text"], values["emo_text"]
    if clip is not None and not isinstance(clip, str):
        raise JobLineError(line_number, Notice("job_emo_audio_type"))
    if isinstance(vector, dict):
        unknown = sorted(str(k) for k in vector if k not in EMOTION_NAMES)
        if unknown:
            raise JobLineError(line_number, Notice("job_emo_unknown", unknown=str(unknown),
                                                   allowed=", ".join(EMOTION_NAMES)))
        vector = [vector.get(name, 0.0) for name in EMOTION_NAMES]
    if vector is not None and (not isinstance(vector, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in vector)):
        raise JobLineError(line_number, Notice("job_emo_vector", count=len(EMOTION_NAMES)))
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float))):
        raise JobLineError(line_number, Notice("job_emo_alpha"))
    if from_text is not None and not isinstance(from_text, bool):
        raise JobLineError(line_number, Notice("job_emo_use_text"))
    if text is not None and not isinstance(text, str):
        raise JobLineError(line_number, Notice("job_emo_text_type"))
    if text is not None and not from_text:
        raise JobLineError(line_number, Notice("job_emo_text_alone"))
    try:
        vector = check_emotion(has_reference_audio=clip not in (None, ""), vector=vector,
                               weight=1.0 if weight is None else weight, from_text=bool(from_text),
                               text=text.strip() or None if text is not None else None)
    except InputError as exc:
        raise JobLineError(line_number, message_of(exc)) from exc
    audio = sources.resolve(clip, line_number) if clip not in (None, "") else None
    return JobEmotion(audio=audio, vector=vector, weight=1.0 if weight is None else float(weight),
                      from_text=bool(from_text), text=text.strip() or None if text is not None else None)


def _parse_dialogue_line(obj: dict, line_number: int, sources: AudioSources, output_name: str,
                         warnings: list[str]) -> JobLine:
    """A ``script`` + ``speakers`` line (see the module docstring)."""
    from tts_app.dialogue import check_voices, parse_script

    script_value = obj["script"]
    if isinstance(script_value, list):  # [{"speaker": 1, "text": "..."}, ...]
        try:
            script_value = "\n".join(f"Speaker {int(t['speaker'])}: {t['text']}" if str(t["speaker"]).isdigit()
                                     else f"{t['speaker']}: {t['text']}" for t in script_value)
        except (TypeError, KeyError, ValueError):
            raise JobLineError(line_number, Notice("job_script_list")) from None
    if not isinstance(script_value, str) or not script_value.strip():
        raise JobLineError(line_number, Notice("job_script_empty"))
    _check_text(script_value, "script", line_number)
    for clash in ("input_text", "syn_text", "prompt_audio", "prompt_speech", "voice"):
        if obj.get(clash) not in (None, ""):
            raise JobLineError(line_number, Notice("job_script_clash", field=clash))
    speakers = obj.get("speakers")
    if not isinstance(speakers, dict) or not speakers:
        raise JobLineError(line_number, Notice("job_script_speakers"))
    try:
        script = parse_script(script_value)
        values = check_voices(script, {str(k): v for k, v in speakers.items()})
    except InputError as exc:
        raise JobLineError(line_number, message_of(exc)) from None
    voices = []
    for speaker, value in zip(script.speakers, values):
        if not isinstance(value, str) or not value.strip():
            raise JobLineError(line_number, Notice("job_speaker_voice", label=speaker.label))
        found = sources.voices.find(value)
        voices.append(("voice", found.name) if found is not None else ("file", sources.resolve(value, line_number)))
    params = _line_params(obj, line_number)
    return JobLine(line_number=line_number, output_name=output_name, input_text=script_value, prompt_audio=None,
                   prompt_text=None, params=params, warnings=tuple(warnings), script=script,
                   speaker_voices=tuple(voices), emotion=_parse_emotion(obj, line_number, sources),
                   audio_format=_parse_format(obj, line_number))


def _name_hint(obj: Any, line_number: int, digits: int) -> str | None:
    """Best-effort output name of a line that failed validation (for the results table); None when unsafe."""
    if not isinstance(obj, dict):
        return None
    try:
        value = _pick(obj, "output_name", line_number)
        return default_output_name(line_number, digits, obj) if value in (None, "") else sanitize_output_name(
            value, line_number)
    except JobLineError:
        return None


def iter_job(jsonl_path: str | Path, sources: AudioSources, *, has_default_voice: bool = False,
             config: JobConfig = JobConfig(), encoding: str | None = None) -> Iterator[JobLine | InvalidLine]:
    """Stream a job file: one ``JobLine`` or ``InvalidLine`` per non-blank line, in file order.

    Handles UTF-8 with or without BOM, CRLF line ends and blank lines. Duplicate output names (compared
    case-insensitively, as on Windows/macOS file systems) make the later line invalid, naming both lines.

    Raises:
        InputError: the file cannot be read or decoded (see ``detect_encoding``).
    """
    path = Path(jsonl_path)
    if encoding is None:
        encoding, _ = detect_encoding(path)
    seen: dict[str, int] = {}  # casefolded output name -> first line using it
    try:
        fh = open(path, encoding=encoding, newline=None)  # newline=None: CRLF and CR read as "\n"
    except OSError as exc:
        raise InputError(Notice("job_cannot_read", name=path.name, reason=exc.strerror or str(exc))) from exc
    with fh:
        for line_number, raw in enumerate(fh, start=1):
            text = raw.strip()
            if not text:
                continue
            obj: Any = None
            try:
                obj = load_line(text, line_number)
                parsed = parse_line(obj, line_number, sources, has_default_voice=has_default_voice,
                                    digits=config.output_name_digits)
            except JobLineError as exc:
                name = _name_hint(obj, line_number, config.output_name_digits)
                if name is not None and name.casefold() in seen:
                    name = None  # a duplicate name must not be used for this line's (failed) record either
                if name is not None:
                    seen[name.casefold()] = line_number
                yield InvalidLine(line_number, exc, name)
                continue
            key = parsed.output_name.casefold()
            if key in seen:
                yield InvalidLine(line_number, JobLineError(line_number, Notice(
                    "job_duplicate_name", name=parsed.output_name, first=seen[key], line=line_number)),
                    None, parsed.warnings)
                continue
            seen[key] = line_number
            yield parsed


def make_sources(jsonl_path: str | Path, audio_root: str | Path | None, config: JobConfig, *,
                 audio_label: str | None = None) -> AudioSources:
    """``AudioSources`` for a job: search the audio folder (when given) then the JSONL's folder. Messages call
    them ``audio_label`` and "the job file's folder" (no server paths); ``voice`` fields name voices of
    ``config.voice_library()``."""
    search = ([Path(audio_root)] if audio_root is not None else []) + [Path(jsonl_path).parent]
    labels = {Path(jsonl_path).parent: Notice("job_root_job_folder")}
    if audio_root is not None:
        labels[Path(audio_root)] = audio_label or Notice("job_root_audio_folder")
    return AudioSources(search, [Path(r) for r in config.extra_allowed_roots], has_audio_source=audio_root is not None,
                        root_labels=labels, voices=config.voice_library())


def check_default_voice(path: str | Path | None) -> Path | None:
    """The default voice file given by the operator (trusted: not limited to the allowed roots).

    Raises:
        InputError: the file does not exist.
    """
    if path is None:
        return None
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_file():
        raise InputError(Notice("job_default_voice_missing", path=str(path)))
    return resolved


def validate_lines(jsonl_path: str | Path, sources: AudioSources, *, has_default_voice: bool = False,
                   config: JobConfig = JobConfig(), check_line=None) -> ValidationReport:
    """Validate a job file without running anything (streaming; keeps only problem rows).

    Args:
        check_line: ``check_line(line)`` -> ``[(status, message)]`` for a valid ``JobLine``: the loaded model's own
            checks (``tts_app.jobs.runner.model_line_checks``); an "error" makes the line invalid, a "warning" is
            listed. None: none.

    Raises:
        InputError: the file cannot be read or decoded.
    """
    path = Path(jsonl_path)
    encoding, file_warnings = detect_encoding(path)
    report = ValidationReport(jsonl_path=path, encoding=encoding)
    report.rows.extend(ValidationRow(0, "warning", w) for w in file_warnings)
    num_not_found = 0
    for item in iter_job(path, sources, has_default_voice=has_default_voice, config=config, encoding=encoding):
        report.num_lines += 1
        if isinstance(item, InvalidLine):
            report.num_invalid += 1
            report.rows.append(ValidationRow(item.line_number, "error", item.message))
            num_not_found += item.error.code == "audio_not_found"
        else:
            problems = list(check_line(item)) if check_line is not None else []
            errors = [message for status, message in problems if status == "error"]
            report.rows.extend(ValidationRow(item.line_number, "error", m) for m in errors)
            report.rows.extend(ValidationRow(item.line_number, "warning", m) for s, m in problems if s != "error")
            if errors:
                report.num_invalid += 1
            else:
                report.num_valid += 1
        report.rows.extend(ValidationRow(item.line_number, "warning", w) for w in item.warnings)
    if num_not_found and not sources.has_audio_source:
        report.rows.insert(len(file_warnings), ValidationRow(0, "error", Notice("job_not_found_no_zip",
                                                                                count=num_not_found)))
    if report.num_lines == 0:
        report.rows.append(ValidationRow(0, "error", Notice("job_no_lines")))
    return report
