"""The input processor: everything ``Engine.submit`` does before a row exists, pure and in the caller's thread.

Owns: the request front end (chapters, dialogue turns and dialogue rows, dubbing cues; ``tts_app.frontend``),
language and emotion checks, the reference clips' sampling rate, resolving the effective generation settings once
(``TTSAdapter.resolve``), the memory estimate of each segment and the message of a segment too large for the budget,
and, when a row runs, turning a segment (``tts_app.engine.state.SegmentState``) into the adapter's ``AdapterRow``.
vLLM v1's ``processor.py`` (../shared/STYLE.md): the engine core then only schedules and runs rows.

May touch: the adapter's pure methods (``resolve``, ``estimate_positions``, ``max_new_tokens``,
``count_text_tokens``, ``unencodable_characters``, facts) and the memory estimator. Never the scheduler, the running
batch, the engine lock or the device.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tts_app.adapters.base import AdapterRow, ModelFacts, RowContext, RowEmotion, RowTurn, RowVoice, TTSAdapter
from tts_app.config import MIN_MAX_SEGMENT_CHARS, REQUEST_LIMITS
from tts_app.dialogue import join_pieces
from tts_app.engine import messages as _messages  # noqa: F401 - registers the refusals' zh/en texts
from tts_app.engine.memory import MemoryEstimator, format_bytes, max_text_chars_for_budget
from tts_app.engine.scheduler import SegmentWork
from tts_app.errors import ConfigError, InputError, ReferenceAudioError
from tts_app.frontend.messages import Notice, message_of
from tts_app.request import SynthesisParams, SynthesisRequest
from tts_app.speaking_rate import expected_speech_s

if TYPE_CHECKING:
    from tts_app.engine.state import RequestState


def check_emotion_support(facts: ModelFacts, name: str, *, from_text: bool) -> None:
    """Refuse emotion control the family does not have: the engine's rule for every request, also run by JSONL
    validation (``tts_app.jobs.runner.model_line_checks``) so a job line bound to fail is flagged before it runs.

    Args:
        facts: the loaded model's facts (``supports_emotion``, ``supports_emotion_text``).
        name: the model's display name, for the message.
        from_text: the emotion is to be read from text.

    Raises:
        InputError: emotion control on a family without it, or emotion from text without an emotion model.
    """
    if not facts.supports_emotion:
        raise InputError(Notice("eng_emotion_unsupported", name=name))
    if from_text and not facts.supports_emotion_text:
        raise InputError(Notice("eng_emotion_text_unsupported", name=name))


@dataclass(frozen=True)
class _Part:
    """A piece of a request's text run through the front end on its own: a chapter, or a dialogue turn."""

    text: str
    chapter: int = 0
    title: str | None = None
    speaker: int | None = None  # index into request.speakers
    target_s: float | None = None  # a dubbing cue's target length (SynthesisParams.segment_durations_s)


@dataclass(frozen=True)
class _TurnPiece:
    """One front-end segment of a dialogue turn inside a dialogue row (``ModelFacts.max_dialogue_speakers``)."""

    speaker: int  # index into request.speakers
    model_text: str
    source_text: str


@dataclass
class _RequestText:
    """The front end's output for a whole request: its parts' segments in order, and which part each came from.
    ``texts`` / ``source_texts`` / ``pauses_after_ms`` are per segment; ``segment_turns[i]`` is empty, or the turn
    pieces segment ``i`` speaks in one generation (a dialogue row)."""

    normalized_text: str
    texts: list[str]
    source_texts: list[str]
    pauses_after_ms: list[int]
    warnings: list[str]
    segment_parts: list[int]
    parts: list[_Part]
    segment_turns: list[tuple[_TurnPiece, ...]]


def _request_parts(request: SynthesisRequest) -> list[_Part]:
    """Dialogue turns (each its own part, with its speaker), else the text's chapters (``tts_app.longform``)."""
    from tts_app.longform import split_chapters

    if request.turns:
        if request.params.segment_durations_s is not None:
            raise ConfigError("segment_durations_s", Notice("eng_durations_dialogue"))
        return [_Part(turn.text, 0, None, turn.speaker) for turn in request.turns]
    targets = request.params.segment_durations_s
    if targets is not None:  # dubbing cues: each non-blank line its own segment, with its target length
        lines = [line for line in request.text.splitlines() if line.strip()]
        if len(lines) != len(targets):
            raise ConfigError("segment_durations_s", Notice("eng_durations_count", num_targets=len(targets),
                                                            num_lines=len(lines)))
        return [_Part(line, 0, None, None, float(target)) for line, target in zip(lines, targets)]
    return [_Part(c.text, i, c.title) for i, c in enumerate(split_chapters(request.text))]


def _prepare_text(text: str, *, supports_pinyin: bool, max_segment_chars: int, default_pause_ms: int,
                  control_tags: tuple[str, ...] = (), unencodable_characters=None, measure=None,
                  max_segment_units: int | None = None):
    """The text front end (``tts_app.frontend.prepare_text``), sentences packed up to the segment limits.

    Raises:
        ConfigError: field "text" for the front end's refusals of the text (nothing to speak, ...), so the
            request's finish names the field at fault (the API's ``param`` "input").
    """
    from tts_app.frontend import prepare_text

    try:
        return prepare_text(text, supports_pinyin=supports_pinyin, max_segment_chars=max_segment_chars,
                            default_pause_ms=default_pause_ms, control_tags=control_tags,
                            unencodable_characters=unencodable_characters, measure=measure,
                            max_segment_units=max_segment_units)
    except ConfigError:
        raise
    except InputError as exc:
        raise ConfigError("text", message_of(exc)) from exc


# ISO 639-1 code -> language name in messages, for the languages the text front end tells apart.
LANGUAGE_NAMES = {"en": "English", "zh": "Chinese"}


def segment_languages(text: str) -> set[str]:
    """Languages ("zh", "en") of the letters in ``text``: Chinese characters are "zh", Latin letters "en" (the text
    front end's ``language_runs``); digits, punctuation and symbols alone count as no language."""
    from tts_app.frontend.normalize import language_runs

    return {lang for lang, run in language_runs(text, "en") if any(ch.isalpha() for ch in run)}


def language_warnings(source_texts: list[str], languages: tuple[str, ...], model_name: str) -> list[str]:
    """One warning per language of ``source_texts`` (segment texts, in order) that is not in ``languages`` (the
    model's training languages), naming the segments (1-based) written in it.

    Why a warning and not a refusal: the speech of an untrained language is unreliable (mispronounced or garbled)
    but not always useless (an English sentence with one Chinese name still comes out mostly right), the language of
    a mixed segment is a guess from its script, and refusing would fail whole job lines or requests the user may
    still want. So the request runs and the result (UI, CLI, job line) says what to expect.
    """
    trained = set(languages)
    found: dict[str, list[int]] = {}
    for i, text in enumerate(source_texts):
        for lang in sorted(segment_languages(text) - trained):
            found.setdefault(lang, []).append(i + 1)
    trained_names = " and ".join(f"{LANGUAGE_NAMES.get(code, code)} ({code})" for code in languages)
    warnings = []
    for lang, segments in found.items():
        name = f"{LANGUAGE_NAMES.get(lang, lang)} ({lang})"
        if len(segments) == len(source_texts):
            where = "the text is"
        elif len(segments) == 1:
            where = f"segment {segments[0]} is"
        else:
            where = f"segments {', '.join(map(str, segments))} are"
        language, first = LANGUAGE_NAMES.get(lang, lang), LANGUAGE_NAMES.get(languages[0], languages[0])
        warnings.append(f"{where} in {name}, but {model_name} was trained on {trained_names} only: expect "
                        f"mispronounced or garbled speech there. Use a model trained on {language}, or write that "
                        f"text in {first}.")
    return warnings


@dataclass
class PreparedRequest:
    """``InputProcessor.prepare``'s output: the request's segments, what runs, and its warnings.

    Attributes:
        text: the front end's output (segments, pauses, parts, dialogue pieces).
        params: the request's knobs with the checkpoint defaults filled in (what runs; resolved once).
        warnings: front-end and language warnings, for the result.
        works: one ``SegmentWork`` per segment, for the scheduler (arrival ``time.monotonic()`` now).
        arrival_s: that arrival time.
        segment_context: the segments run in order, each hearing the earlier ones (``RequestState.segment_context``).
    """

    text: _RequestText
    params: SynthesisParams
    warnings: list[str]
    works: list[SegmentWork]
    arrival_s: float
    segment_context: bool = False


class InputProcessor:
    """Turns requests into segments and rows for one loaded model (module docstring).

    Args:
        adapter: the loaded ``TTSAdapter``.
        estimator: the engine's ``MemoryEstimator`` (bytes of a row from its positions).
    """

    def __init__(self, adapter: TTSAdapter, estimator: MemoryEstimator):
        self.adapter = adapter
        self.estimator = estimator

    @property
    def facts(self) -> ModelFacts:
        """The loaded model's facts, read from the adapter each time."""
        return self.adapter.facts

    def prepare(self, request: SynthesisRequest) -> PreparedRequest:
        """Everything before a row exists: the front end, the reference clips' sampling rate, emotion support, the
        effective settings (resolved once here: "not given" and "given as the default" then share batches, and the
        result records what really ran), language warnings and each segment's ``SegmentWork`` (expected decode steps,
        KV positions at its cap).

        Raises:
            InputError: nothing to speak, a bad dialogue or dubbing cue, emotion control the model lacks.
            ReferenceAudioError: a reference or emotion clip not at the model's sampling rate.
        """
        prepared = self.segments_of(request)
        warnings = list(prepared.warnings)
        for ref in [request.reference_audio] + [speaker.reference_audio for speaker in request.speakers]:
            if ref is None or int(ref.sampling_rate) == self.facts.sampling_rate:
                continue
            raise ReferenceAudioError(Notice("eng_reference_rate", rate_hz=int(ref.sampling_rate),
                                             model_rate_hz=self.facts.sampling_rate))
        self.check_emotion(request)
        params = self.adapter.resolve(request.params)
        warnings += language_warnings(prepared.source_texts, self.facts.languages, self.adapter.display_name)
        ref_s, ref_chars, max_new = self.row_context(request)
        now = time.monotonic()
        works: list[SegmentWork] = []
        for i, text in enumerate(prepared.texts):
            steps = max(1, min(max_new, math.ceil(expected_speech_s(text) * self.facts.frames_per_second)))
            works.append(SegmentWork(
                request_id=request.request_id, index=i, text=text, seed=params.seed + i,
                batch_key=params.batch_key(), priority=request.priority, expected_steps=steps,
                row_positions=self.positions(len(text), ref_s, ref_chars, max_new), arrival_s=now,
                max_steps=max_new,
            ))
        context = self.segment_context(request, warnings)
        # what runs (False when ignored); a family whose long-form context is its prompt cache (GLM-TTS) runs it
        # there, not through the engine's segment context
        params = replace(params, segment_context=context or self.context_by_prompt_cache(request, params, warnings))
        return PreparedRequest(text=prepared, params=params, warnings=warnings, works=works, arrival_s=now,
                               segment_context=context)

    def segment_context(self, request: SynthesisRequest, warnings: list) -> bool:
        """Whether the request's segments run with segment context (``SynthesisParams.segment_context``): asked
        for, on a family that offers it (``ModelFacts.supports_segment_context``), and not a dialogue (its turns are
        other voices). Otherwise a warning is appended to ``warnings`` when it was asked for: a warning, not a
        refusal, because the setting is a quality hint (a job file's lines run on whatever model is loaded, as
        ``num_beams`` on a model without beams) and the audio without it is what every other setting promised."""
        if not request.params.segment_context:
            return False
        if not self.facts.supports_segment_context:
            if self.facts.generation_defaults.prompt_cache is None:  # else: context_by_prompt_cache
                warnings.append(Notice("eng_segment_context_unsupported", name=self.adapter.display_name))
            return False
        if request.turns:
            warnings.append(Notice("eng_segment_context_dialogue"))
            return False
        return True

    def context_by_prompt_cache(self, request: SynthesisRequest, params: SynthesisParams, warnings: list) -> bool:
        """Whether ``segment_context`` runs as the family's long-text prompt cache (``SynthesisParams.prompt_cache``;
        GLM-TTS's upstream ``--use_cache``, its own way for a segment to hear the earlier ones): asked for, on a
        family with a prompt cache (``GenerationDefaults.prompt_cache`` not None) and without an engine segment
        context, not a dialogue, and the request's resolved ``params.prompt_cache`` on (the model's default when
        not given). A request that turned the prompt cache off gets a warning; a dialogue gets the dialogue
        warning."""
        if (not request.params.segment_context or self.facts.supports_segment_context
                or self.facts.generation_defaults.prompt_cache is None):
            return False
        if request.turns:
            warnings.append(Notice("eng_segment_context_dialogue"))
            return False
        if not params.prompt_cache:
            warnings.append(Notice("eng_segment_context_prompt_cache_off", name=self.adapter.display_name))
            return False
        return True

    def context_window(self, state: "RequestState", index: int, budget_bytes: int | None = None
                       ) -> tuple[int | None, int]:
        """The earlier segments segment ``index`` hears as segment context, and its row's positions with them.

        Rule: the most recent earlier segments, newest first, as long as the row's estimated positions (its own
        ``estimate_positions`` plus ``TTSAdapter.context_positions`` of each context segment, all upper bounds)
        stay within the model's input limit (``TTSAdapter.max_input_positions``, the limit the adapter enforces)
        and the row's bytes within ``budget_bytes`` (the memory budget; None = none). The first earlier segment
        that does not fit ends the window, so the context is always the latest stretch of speech. A segment that
        made no audio adds nothing (it is skipped in ``segment_row``). Boson AI's long-form generation keeps every
        earlier chunk unless told a buffer size (``generation_chunk_buffer_size``); a bound by the input limit
        keeps the same chunks until they no longer fit.

        Returns:
            (index of the oldest earlier segment heard, or None when none fits or there is none; the row's
            estimated positions, ``SegmentWork.row_positions``).
        """
        segments = state.segments
        ref_s, ref_chars, max_new = self.row_context(state.request)
        positions = self.positions(len(segments[index].text), ref_s, ref_chars, max_new)
        limit = self.adapter.max_input_positions()
        oldest = None
        for j in range(index - 1, -1, -1):
            earlier = segments[j]
            if earlier.wave is None:
                break  # not finished: nothing before it is heard either (never the case when run in order)
            if earlier.wave.size == 0:
                continue
            more = positions + self.adapter.context_positions(len(earlier.text),
                                                              earlier.wave.size / self.facts.sampling_rate)
            if (limit is not None and more > limit) or (
                    budget_bytes is not None and self.estimator.row_bytes(more) > budget_bytes):
                break
            positions, oldest = more, j
        return oldest, positions

    def estimate_request_bytes(self, request: SynthesisRequest) -> int:
        """See ``Engine.estimate_request_bytes``."""
        texts = self.segments_of(request).texts
        ref_s, ref_chars, max_new = self.row_context(request)
        return max(self.estimator.row_bytes(self.positions(len(t), ref_s, ref_chars, max_new)) for t in texts)

    def positions(self, text_chars: int, reference_s: float, reference_text_chars: int, max_new_tokens: int) -> int:
        return int(self.adapter.estimate_positions(text_chars, reference_s, reference_text_chars, max_new_tokens))

    def segments_of(self, request: SynthesisRequest) -> _RequestText:
        """The front end's output for the request: normalised text and segments (each with the model text, which
        may hold homophone stand-ins or pinyin tokens, the source text the user wrote, for subtitles, and the pause
        after it in ms) and warnings. Each chapter or dialogue turn (``_request_parts``) goes through the front end
        on its own; the last segment of a chapter is followed by ``chapter_pause_ms``, that of a turn by the usual
        pause.

        Raises:
            InputError: the text has nothing to speak; a turn names a speaker the request does not have.
        """
        import dataclasses

        params = request.params
        # The model's own segment unit and limit (``ModelFacts.max_segment_chars`` / ``max_segment_tokens``); a
        # request's max_segment_chars is the user's own character limit instead of the model's (0 or None = none;
        # a token limit still applies).
        max_chars = params.max_segment_chars or self.facts.max_segment_chars
        measure = self.adapter.segment_measure() if self.facts.max_segment_tokens else None
        parts = _request_parts(request)
        segments, warnings, normalized, owners = [], [], [], []
        for index, part in enumerate(parts):
            if part.speaker is not None and not 0 <= part.speaker < len(request.speakers):
                raise ConfigError("text", Notice("eng_turn_speaker", turn=index + 1, speaker=part.speaker + 1,
                                                 num_speakers=len(request.speakers)))
            prepared = _prepare_text(part.text, supports_pinyin=self.facts.supports_pinyin,
                                     max_segment_chars=max_chars, default_pause_ms=params.pause_between_segments_ms,
                                     control_tags=self.facts.control_tags,
                                     unencodable_characters=self.adapter.unencodable_characters,
                                     measure=measure, max_segment_units=self.facts.max_segment_tokens)
            if part.target_s is not None and not prepared.segments:
                raise ConfigError("text", Notice("eng_line_target_empty", line=index + 1, text=part.text.strip()[:40]))
            if not prepared.segments:
                if len(parts) > 1 and part.speaker is not None:
                    raise ConfigError("text", Notice("eng_turn_empty", turn=index + 1))
                continue
            part_segments = list(prepared.segments)
            if part.target_s is not None and len(part_segments) != 1:
                raise ConfigError("text", Notice("eng_line_target_split", line=index + 1, text=part.text.strip()[:40],
                                                 num_segments=len(part_segments), max_chars=max_chars))
            if index < len(parts) - 1:  # the pause after a part: a chapter's is longer
                last_pause = (params.chapter_pause_ms if part.speaker is None and part.target_s is None
                              else max(part_segments[-1].pause_after_ms, params.pause_between_segments_ms))
                part_segments[-1] = dataclasses.replace(part_segments[-1], pause_after_ms=last_pause)
            segments += part_segments
            owners += [index] * len(part_segments)
            warnings += list(prepared.warnings)
            normalized.append(prepared.normalized_text)
        if not segments:
            raise ConfigError("text", Notice("eng_nothing_to_speak"))
        silence_s = sum(int(seg.pause_after_ms) for seg in segments[:-1]) / 1000.0
        if silence_s > REQUEST_LIMITS.max_silence_s:  # e.g. [pause:10s] after every word
            raise ConfigError("text", Notice("limit_silence", value_s=round(silence_s, 1),
                                             max_s=REQUEST_LIMITS.max_silence_s))
        out = _RequestText(normalized_text="\n\n".join(normalized), texts=[seg.text for seg in segments],
                           source_texts=[seg.source_text for seg in segments],
                           pauses_after_ms=[int(seg.pause_after_ms) for seg in segments], warnings=warnings,
                           segment_parts=owners, parts=parts, segment_turns=[()] * len(segments))
        if request.turns and self.facts.max_dialogue_speakers:
            if self.dialogue_rows(request):
                return self.pack_dialogue(out, max_chars)
            warnings.append(f"{self.adapter.display_name}'s dialogue prompt takes at most "
                            f"{self.facts.max_dialogue_speakers} speakers; with {len(request.speakers)} each turn is "
                            "synthesised on its own with its speaker's voice")
        return out

    def dialogue_rows(self, request: SynthesisRequest) -> bool:
        """The request is a dialogue the family speaks from its own multi-speaker prompt (dialogue rows)."""
        return bool(request.turns) and 0 < len(request.speakers) <= self.facts.max_dialogue_speakers

    @staticmethod
    def pack_dialogue(text: _RequestText, max_chars: int) -> _RequestText:
        """Pack the turns' segments, in order, into dialogue rows of at most ``max_chars`` characters
        (``tts_app.dialogue.pack_turn_pieces``); a row's pause is its last piece's."""
        from tts_app.dialogue import pack_turn_pieces

        groups = pack_turn_pieces([len(t) for t in text.texts], max_chars)
        pieces = [_TurnPiece(text.parts[part].speaker, model, source)
                  for part, model, source in zip(text.segment_parts, text.texts, text.source_texts)]
        return _RequestText(
            normalized_text=text.normalized_text,
            texts=["\n".join(text.texts[i] for i in group) for group in groups],
            source_texts=["\n".join(text.source_texts[i] for i in group) for group in groups],
            pauses_after_ms=[text.pauses_after_ms[group[-1]] for group in groups], warnings=text.warnings,
            segment_parts=[text.segment_parts[group[0]] for group in groups], parts=text.parts,
            segment_turns=[tuple(pieces[i] for i in group) for group in groups])

    def row_context(self, request: SynthesisRequest) -> tuple[float, int, int]:
        """(reference seconds, reference-text characters, decode-step cap) a row of the request may carry: for a
        dialogue, its longest speaker reference (every row is estimated as the largest); for dialogue rows, all
        speakers' references together (each row's prompt holds every voice)."""
        if request.turns:
            voices = [(s.reference_audio, s.reference_text) for s in request.speakers]
        else:
            voices = [(request.reference_audio, request.reference_text)]
        seconds = [ref.duration_s for ref, _ in voices if ref is not None]
        chars = [len(text or "") for _, text in voices]
        together = self.dialogue_rows(request)
        ref_s = sum(seconds) if together else max(seconds, default=0.0)
        ref_chars = sum(chars) if together else max(chars, default=0)
        return ref_s, ref_chars, int(self.adapter.max_new_tokens(request.params))

    def too_large_message(self, request: SynthesisRequest, index: int, text: str, budget: int) -> str:
        ref_s, ref_chars, max_new = self.row_context(request)
        need = self.estimator.row_bytes(self.positions(len(text), ref_s, ref_chars, max_new))
        fit_chars = max_text_chars_for_budget(
            lambda n: self.estimator.row_bytes(self.positions(n, ref_s, ref_chars, max_new)), budget,
            upper_chars=max(len(text), 1))
        head = (f"out of memory (estimated): segment {index + 1} ({len(text)} characters) needs "
                f"{format_bytes(need)} but the memory budget is {format_bytes(budget)}")
        if fit_chars > 0:
            return (f"{head}; segments of at most {fit_chars} characters fit — shorten the text or set "
                    f"max_segment_chars <= {max(MIN_MAX_SEGMENT_CHARS, fit_chars)}, or lower max_new_tokens (now {max_new})")
        return (f"{head}; even an empty segment does not fit with max_new_tokens={max_new} and a {ref_s:.1f} s "
                "reference — lower max_new_tokens, use a shorter reference, or raise the memory budget")

    def check_emotion(self, request: SynthesisRequest) -> None:
        """Refuse emotion control the loaded family does not have (``ModelFacts.supports_emotion`` /
        ``supports_emotion_text``), and an emotion clip at the wrong sampling rate.

        Raises:
            InputError: emotion control on a family without it, or emotion from text without an emotion model.
            ReferenceAudioError: the emotion clip is not at ``engine.sampling_rate``.
        """
        emotion = request.emotion
        if emotion is None:
            return
        check_emotion_support(self.facts, self.adapter.display_name,
                              from_text=emotion.from_text)
        clip = emotion.reference_audio
        if clip is not None and int(clip.sampling_rate) != self.facts.sampling_rate:
            raise ReferenceAudioError(Notice("eng_emotion_reference_rate", rate_hz=int(clip.sampling_rate),
                                             model_rate_hz=self.facts.sampling_rate))

    @staticmethod
    def row_emotion(request: SynthesisRequest) -> RowEmotion | None:
        """The request's emotion control as adapters take it: the clip as samples, and for emotion from text the
        request's whole text when it gave no text of its own (IndexTTS 2's ``infer`` reads the emotion of the whole
        input, not of each segment)."""
        emotion = request.emotion
        if emotion is None:
            return None
        clip = emotion.reference_audio
        text = None
        if emotion.from_text:
            text = emotion.text if emotion.text is not None else request.text
        return RowEmotion(reference_audio=None if clip is None else clip.samples, vector=emotion.vector,
                          weight=emotion.weight, text=text)

    def segment_row(self, state: "RequestState", work: SegmentWork) -> AdapterRow:
        """The adapter row of segment ``work.index``: a dialogue row (every speaker's voice and the turns it
        speaks), else the text with its dialogue speaker's reference, else with the request's, and with segment
        context the earlier segments ``context_window`` chose (``SegmentState.context_from``)."""
        request = state.request
        segment = state.segments[work.index]
        turns = segment.turns
        if turns:
            voices = tuple(RowVoice(None if s.reference_audio is None else s.reference_audio.samples,
                                    s.reference_text) for s in request.speakers)
            runs: list[tuple[int, list[str]]] = []  # consecutive pieces of one speaker make one turn line
            for piece in turns:
                if runs and runs[-1][0] == piece.speaker:
                    runs[-1][1].append(piece.model_text)
                else:
                    runs.append((piece.speaker, [piece.model_text]))
            return AdapterRow(text=work.text, reference_audio=None, reference_text=None, seed=work.seed,
                              emotion=self.row_emotion(request), voices=voices,
                              turns=tuple(RowTurn(k, join_pieces(texts)) for k, texts in runs))
        part = state.parts[segment.part] if state.parts else None
        if part is not None and part.speaker is not None:
            speaker = request.speakers[part.speaker]
            ref, ref_text = speaker.reference_audio, speaker.reference_text
        else:
            ref, ref_text = request.reference_audio, request.reference_text
        context = ()
        if segment.context_from is not None:  # segment context: the earlier segments that made audio, oldest first
            context = tuple(RowContext(earlier.text, earlier.wave, earlier.context_tokens)
                            for earlier in state.segments[segment.context_from:work.index]
                            if earlier.wave is not None and earlier.wave.size)
        return AdapterRow(text=work.text, reference_audio=None if ref is None else ref.samples,
                          reference_text=ref_text, seed=work.seed, emotion=self.row_emotion(request), context=context,
                          request_id=work.request_id, segment_index=work.index)

