"""The model-adapter protocol: one file per model family implements it and holds ALL of that family's quirks.

The engine only ever talks to ``TTSAdapter``: ``preprocess -> generate -> postprocess`` on a batch of rows, plus the
``ModelFacts`` it needs for memory estimation. Pattern from transformers' ``pipelines/text_to_audio.py``
(preprocess -> forward -> postprocess returning audio plus ``sampling_rate``), with the model-type branches kept here
instead of in a generic layer.

Adapters whose decode loop is their own can also offer the **step interface** (``supports_decode_steps = True``,
``start_decode``), named after the decode phases as in gpt-fast's ``generate.py``: a ``DecodeBatch`` takes new rows
into the running batch (``prefill``), advances every live row by one decode step (``decode_step``, returning each
row's new audio and whether it finished) and lets rows go (``release``). The engine then schedules per iteration
(continuous batching): a finished row frees its slot at once and a waiting row takes it. Rows sharing a prompt prefix
(the same reference voice) may reuse its prefill through the engine's ``PrefixCache``.
"""

from __future__ import annotations

import abc
import math
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Iterable

import numpy as np

from tts_app.frontend.messages import Notice, register
from tts_app.request import StopReason, SynthesisParams

# The refusals every adapter shares, in English and Chinese (``tts_app.frontend.messages``).
BASE_EN = {
    "adapter_row": "row {row}: ",
    "adapter_prompt_positions": "{where}the prompt (reference audio + text) takes {prompt_positions} positions, but "
                                "the checkpoint's max_length (total length) is {max_length}; use a shorter reference "
                                "clip or shorter text",
}
BASE_ZH = {
    "adapter_row": "第 {row} 行：",
    "adapter_prompt_positions": "{where}提示（参考音频 + 文本）占用 {prompt_positions} 个位置，但检查点的 max_length"
                                "（总长度）是 {max_length}；请用更短的参考音频或更短的文本",
}
register(__name__, BASE_EN, BASE_ZH)

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

#: Framing positions of one context turn when a family does not measure its own (``TTSAdapter.context_positions``):
#: role headers, begin/end tokens, audio stream markers. Our bound; the families that offer segment context measure
#: theirs at load (CSM: 6 on the tiny checkpoint; Higgs: its ``reference_overhead_positions``).
CONTEXT_TURN_POSITIONS = 16

#: ``GenerationDefaults.sources`` value of a knob read from the loaded checkpoint's ``generation_config.json``.
SOURCE_CHECKPOINT = "checkpoint generation_config"

# GenerationDefaults field -> the transformers GenerationConfig attribute it is read from.
_CONFIG_KEYS = {"greedy": "do_sample", "temperature": "temperature", "top_p": "top_p", "top_k": "top_k",
                "cfg_scale": "guidance_scale", "max_new_tokens": "max_new_tokens", "ras_win_len": "ras_win_len",
                "ras_win_max_num_repeat": "ras_win_max_num_repeat"}


#: Departures from upstream shared by every family (``ModelFacts.departures``).
COMMON_DEPARTURES: tuple[str, ...] = (
    "segment i of a request draws from its own generator seeded with seed + i (upstream draws one random stream "
    "across its calls), so the segments of a request batch together and each is reproducible alone",
)


def checkpoint_max_length(generation_config: Any) -> int | None:
    """The ``max_length`` a checkpoint's generation config sets (total length, prompt included), or None when it
    sets none: transformers' ``GenerationConfig`` always holds a ``max_length`` (20 when unset, its placeholder), so
    only a value in ``to_diff_dict()`` (differing from ``GenerationConfig()``) counts. ``generation_config`` may be
    None (a family without one)."""
    if generation_config is None or not hasattr(generation_config, "to_diff_dict"):
        return None
    value = generation_config.to_diff_dict().get("max_length")
    return int(value) if value is not None else None


@dataclass(frozen=True)
class GenerationDefaults:
    """The effective generation defaults of the loaded checkpoint: what runs when a request leaves a knob out
    (``SynthesisParams`` field None). Resolved once per adapter, at load, from the checkpoint's generation config
    (transformers ``GenerationConfig``), falling back to the family's documented defaults
    (``GenerationDefaults.from_generation_config``). The UI builds its controls from it; the engine resolves every
    request with ``resolve``.

    A knob the family does not have is None (e.g. ``cfg_scale`` for CSM, ``temperature`` for VibeVoice, whose
    language model always takes the argmax); ``max_new_tokens`` always has a value.

    Attributes:
        greedy: True = argmax decoding, False = sampling (the checkpoint's ``not do_sample``); None = no such choice.
        temperature: softmax temperature when sampling (> 0); None = no such knob.
        top_p: nucleus-sampling mass in (0, 1]; 1.0 = off; None = no such knob.
        top_k: keep the k most likely tokens (>= 1); None = no such knob.
        cfg_scale: classifier-free guidance scale; None = the family has no guidance.
        max_new_tokens: decode-step cap per segment (codec frames; Dia counts its delay-pattern flush steps too):
            transformers' ``max_new_tokens``, new steps only. A checkpoint that sets only ``max_length`` gives that
            value here (no row can make more new steps than the total); the per-row cap is then
            ``max_length - prompt length`` (``TTSAdapter.row_max_new_tokens``).
        max_length: the checkpoint's total-length cap, prompt included (transformers' ``max_length``: "the maximum
            length the generated tokens can have. Corresponds to the length of the input prompt +
            max_new_tokens", GenerationConfig docs), or None when the checkpoint does not set one (transformers'
            unset default of 20 counts as not set). Both caps apply to every row: its new steps are at most
            ``min(max_new_tokens, max_length - its prompt length)``.
        ras_win_len, ras_win_max_num_repeat: repetition-aware sampling (Higgs Audio v2: a token repeated
            ``ras_win_max_num_repeat`` times in the last ``ras_win_len`` frames is redrawn); None = not used.
        num_beams, length_penalty: beam search width and length penalty (``SynthesisParams``), from the family's
            defaults only (every transformers ``GenerationConfig`` has ``num_beams=1`` / ``length_penalty=1.0``,
            which says nothing about how the family is run); None = the family has no beams.
        num_diffusion_steps: Euler steps of a flow-matching second stage (``SynthesisParams``), from the family's
            defaults only (no generation config holds it); None = the family has no such stage.
        prompt_cache: the long-text prompt cache's default (``SynthesisParams.prompt_cache``; GLM-TTS: upstream's
            ``--use_cache``, on), from the family's defaults only; None = the family has no prompt cache. Not the KV
            cache.
        sources: field name -> where its value came from: ``SOURCE_CHECKPOINT`` plus the key and value, or the
            family default with its documented source, or why the family has no such knob.
    """

    greedy: bool | None
    temperature: float | None
    top_p: float | None
    top_k: int | None
    cfg_scale: float | None
    max_new_tokens: int
    ras_win_len: int | None = None
    ras_win_max_num_repeat: int | None = None
    num_beams: int | None = None
    length_penalty: float | None = None
    num_diffusion_steps: int | None = None
    prompt_cache: bool | None = None
    max_length: int | None = None
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    @classmethod
    def from_generation_config(cls, generation_config: Any, *, family_defaults: Mapping[str, tuple[Any, str]],
                               absent: Mapping[str, str] = ()) -> "GenerationDefaults":
        """Each field from ``generation_config`` (a transformers ``GenerationConfig``) when the checkpoint sets it
        (not None), else from ``family_defaults``.

        Args:
            generation_config: the loaded model's ``generation_config``; ``do_sample`` gives ``greedy`` (inverted),
                ``guidance_scale`` gives ``cfg_scale``, the other fields have their own names.
            family_defaults: field -> (value, documented source), used when the checkpoint leaves the field unset.
                ``max_new_tokens`` must be present.
            absent: field -> why the family has no such knob; the field is None whatever the checkpoint says.

        ``max_length`` is read only when the checkpoint sets it (a key of ``to_diff_dict()``, i.e. not transformers'
        placeholder 20); a checkpoint with ``max_length`` but no ``max_new_tokens`` (transformers' Dia conversion
        writes ``max_length=3072`` alone) gets ``max_new_tokens = max_length``, the most new steps the total allows,
        not the family default: what runs is then bounded by the total, as in transformers.

        Raises:
            KeyError: ``max_new_tokens`` is in neither the checkpoint nor ``family_defaults``.
        """
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        max_length = checkpoint_max_length(generation_config)
        if max_length is not None:
            values["max_length"] = max_length
            sources["max_length"] = (f"{SOURCE_CHECKPOINT} (max_length={max_length}: total length, prompt "
                                     "included)")
        else:
            values["max_length"], sources["max_length"] = None, "not set by the checkpoint (no total-length cap)"
        for name, key in _CONFIG_KEYS.items():
            if name in absent:
                values[name], sources[name] = None, absent[name]
                continue
            value = getattr(generation_config, key, None)
            if value is not None:
                values[name] = (not value) if name == "greedy" else value
                sources[name] = f"{SOURCE_CHECKPOINT} ({key}={value!r})"
            elif name == "max_new_tokens" and max_length is not None:
                values[name] = max_length
                sources[name] = (f"{SOURCE_CHECKPOINT} (max_length={max_length} and no max_new_tokens: each row "
                                 "makes at most max_length - its prompt length new steps)")
            elif name in family_defaults:
                values[name], sources[name] = family_defaults[name]
            elif name == "max_new_tokens":
                raise KeyError("max_new_tokens needs a family default when the checkpoint gives none")
            else:
                values[name], sources[name] = None, "not used by this checkpoint"
        for name in ("num_beams", "length_penalty", "num_diffusion_steps", "prompt_cache"):  # family defaults only (class docstring)
            values[name], sources[name] = family_defaults.get(name, (None, "not used by this checkpoint"))
        for name in ("temperature", "top_p", "cfg_scale", "length_penalty"):
            if values[name] is not None:
                values[name] = float(values[name])
        for name in ("top_k", "max_new_tokens", "ras_win_len", "ras_win_max_num_repeat", "num_beams",
                     "num_diffusion_steps", "max_length"):
            if values[name] is not None:
                values[name] = int(values[name])
        return cls(**values, sources=sources)

    def with_value(self, name: str, value: Any, source: str) -> "GenerationDefaults":
        """A copy with field ``name`` set to ``value`` and its source to ``source`` (e.g. a family cap applied on
        top of the checkpoint's value)."""
        return replace(self, **{name: value}, sources={**self.sources, name: source})

    def resolve(self, params: SynthesisParams) -> SynthesisParams:
        """``params`` with every knob left None (not given) set to this default. A knob the family does not have
        (default None) comes back None even when given, so the result says what really runs. ``seed``,
        ``use_cache``, ``max_segment_chars`` and the pause are kept as given.

        Raises:
            InputError: a resolved value ``SynthesisParams`` refuses (e.g. a checkpoint temperature of 0).
        """
        def pick(given, default):
            if default is None:
                return None
            return given if given is not None else default

        return replace(params, greedy=pick(params.greedy, self.greedy),
                       temperature=pick(params.temperature, self.temperature), top_p=pick(params.top_p, self.top_p),
                       top_k=pick(params.top_k, self.top_k), cfg_scale=pick(params.cfg_scale, self.cfg_scale),
                       max_new_tokens=pick(params.max_new_tokens, self.max_new_tokens),
                       num_beams=pick(params.num_beams, self.num_beams),
                       length_penalty=pick(params.length_penalty, self.length_penalty),
                       num_diffusion_steps=pick(params.num_diffusion_steps, self.num_diffusion_steps),
                       prompt_cache=pick(params.prompt_cache, self.prompt_cache))


@dataclass(frozen=True)
class ModelFacts:
    """Per-family facts the engine needs (memory estimation, scheduling, front end).

    Attributes:
        family: "vibevoice" | "dia" | "csm" | "higgs" | "indextts2".
        sampling_rate: Hz of the output audio and of the reference audio the adapter expects.
        num_layers: decoder layers that keep a KV cache (sum over all stacks that keep one, e.g. backbone + depth
            decoder are counted by ``kv_positions_per_step`` instead when they do not persist).
        num_kv_heads: key/value heads per layer.
        head_dim: dimension per head.
        dtype_bytes: bytes per element of the KV cache (4 float32, 2 bfloat16/float16).
        cfg_multiplier: forward rows per user row (2 when classifier-free guidance doubles the batch, else 1).
        frames_per_second: decode steps per second of output audio (codec frame rate).
        text_positions_per_char: sequence positions one text character occupies (tokenizer-dependent estimate).
        reference_positions_per_second: sequence positions one second of reference audio occupies.
        max_segment_chars: the segment limit in characters: sentences are packed into one segment up to it (the
            whole text when it fits, as the family's upstream tool speaks it), derived from the checkpoint's decode
            cap (``tts_app.speaking_rate.max_chars_for_speech_s``) so a segment never hits that cap. A request's
            ``max_segment_chars`` caps it further.
        max_segment_tokens: the family's segment unit is its text tokens (IndexTTS 2: upstream's
            ``max_text_tokens_per_segment``): sentences are packed while their tokens (``TTSAdapter.count_text_tokens``)
            stay within this many, as well as within ``max_segment_chars``. None = characters only.
        generation_defaults: the checkpoint's effective generation defaults (``GenerationDefaults``); also gives
            ``default_max_new_tokens``, ``has_cfg`` and ``has_top_k``.
        languages: ISO 639-1 codes of the languages the family was trained on (from its model card), e.g.
            ``("en",)``; text in another language gets a warning.
        supports_pinyin: whether the tokenizer understands pinyin tokens (else overrides become homophones).
        num_parameters: total parameter count.
        needs_reference_text: True when cloning from reference audio also needs its transcript (the UI marks the
            reference-text box as required).
        control_tags: the non-speech tags the model understands, each written in the model's own syntax (e.g.
            ``"(laughs)"`` for Dia). The front end passes a tag of the user's text through, in this syntax, when its
            name (the letters between the brackets, case-insensitive) matches one of these, and strips it with a
            warning otherwise. Empty: the model knows no tags.
        supports_emotion: the model takes ``EmotionControl`` (emotion reference clip, emotion vector); requests
            with emotion control are refused by families without it.
        supports_emotion_text: the checkpoint also has an emotion model that reads the emotion from text
            (``EmotionControl.from_text``).
        max_dialogue_speakers: how many speakers the family's own multi-speaker prompt takes (VibeVoice 4, Dia 2).
            A dialogue with at most that many speakers runs as dialogue rows (``AdapterRow.turns``: consecutive turns
            packed into one segment, every speaker's voice in each row's prompt); 0 (the default), or a dialogue
            with more speakers, runs each turn as its own segment(s) with its speaker's reference.
        supports_segment_context: the family takes earlier segments' text and generated audio as context for the
            next segment by a mechanism of its own (CSM's conversation turns, Higgs Audio's chat turns;
            ``AdapterRow.context``), so a request's ``segment_context`` setting applies; False = it is ignored with a
            warning, unless the family has a prompt cache (``GenerationDefaults.prompt_cache``: GLM-TTS), which
            then is its segment context.
        supports_phoneme_in: the family's language model reads Chinese characters written as their phonemes inside
            the text (GLM-TTS's "Phoneme-in", ``tts_app.frontend.phoneme_in``): a pinyin override reaches it as
            phonemes (``TTSAdapter.model_text``), and the page's pronunciation preview shows that text.
        departures: how this app runs the family differently from its upstream tool, one sentence each with
            its reason (``COMMON_DEPARTURES`` + ``TTSAdapter.departures``); written into every output's sidecar
            (``departures``); the README's "How each model is run" table holds the same sentences (a test checks).
    """

    family: str
    sampling_rate: int
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype_bytes: int
    cfg_multiplier: int
    frames_per_second: float
    text_positions_per_char: float
    reference_positions_per_second: float
    max_segment_chars: int
    generation_defaults: GenerationDefaults
    languages: tuple[str, ...]
    supports_pinyin: bool = False
    num_parameters: int = 0
    needs_reference_text: bool = False
    control_tags: tuple[str, ...] = ()
    supports_emotion: bool = False
    supports_emotion_text: bool = False
    max_dialogue_speakers: int = 0
    max_segment_tokens: int | None = None
    supports_segment_context: bool = False
    supports_phoneme_in: bool = False
    departures: tuple[str, ...] = ()

    @property
    def default_max_new_tokens(self) -> int:
        """Decode-step cap used when the request does not give one (``generation_defaults.max_new_tokens``)."""
        return self.generation_defaults.max_new_tokens

    @property
    def has_cfg(self) -> bool:
        """The family has classifier-free guidance (a ``cfg_scale`` knob)."""
        return self.generation_defaults.cfg_scale is not None

    @property
    def has_top_k(self) -> bool:
        """The family has a top-k knob."""
        return self.generation_defaults.top_k is not None

    @property
    def kv_bytes_per_position(self) -> int:
        """Bytes of KV cache one sequence position costs for one forward row: 2 (K and V) x layers x KV heads x
        head dim x dtype bytes. Source: the standard decoder-only KV cache layout (e.g. transformers DynamicCache)."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes


@dataclass(frozen=True)
class RowEmotion:
    """A row's emotion control, as adapters take it (made by the engine from ``SynthesisRequest.emotion``, an
    ``EmotionControl``, which has checked that exactly one source is given).

    Attributes:
        reference_audio: the emotion clip, float32 ``(num_samples,)`` at ``ModelFacts.sampling_rate``, or None.
        vector: one weight in [0, 1] per name of ``tts_app.request.EMOTION_NAMES``, or None.
        weight: strength in [0, 1] (IndexTTS 2's ``emo_alpha``).
        text: the text to read the emotion from (emotion from text), or None.
    """

    reference_audio: np.ndarray | None = None
    vector: tuple[float, ...] | None = None
    weight: float = 1.0
    text: str | None = None


@dataclass(frozen=True)
class RowVoice:
    """One speaker's voice in a dialogue row (``AdapterRow.voices``).

    Attributes:
        reference_audio: float32 mono waveform ``(num_samples,)`` at ``ModelFacts.sampling_rate``, or None.
        reference_text: its transcript, or None.
    """

    reference_audio: np.ndarray | None
    reference_text: str | None = None


@dataclass(frozen=True)
class RowTurn:
    """One turn of a dialogue row: ``speaker`` is a 0-based index into ``AdapterRow.voices``; ``text`` is what that
    speaker says, rendered for the model by the front end."""

    speaker: int
    text: str


@dataclass(frozen=True)
class RowContext:
    """One earlier segment of the same request, carried as context into a row (``AdapterRow.context``; a request's
    ``segment_context`` setting, for a family with ``ModelFacts.supports_segment_context``).

    Attributes:
        text: the segment's text as the model read it (front-end output).
        audio: its generated audio, float32 ``(num_samples,)`` at ``ModelFacts.sampling_rate`` (non-empty).
        tokens: what the adapter handed back for it (``RowStep.context``, e.g. Higgs Audio's generated codec
            frames), or None when the family re-encodes ``audio`` (CSM).
    """

    text: str
    audio: np.ndarray
    tokens: Any = None


@dataclass(frozen=True)
class AdapterRow:
    """One row of a batch.

    Attributes:
        text: the segment text, already normalised and rendered for this model by the front end (a dialogue row:
            its turns' texts joined by newlines, for logs and length estimates).
        reference_audio: float32 mono waveform, shape ``(num_samples,)``, at ``ModelFacts.sampling_rate``; or None.
        reference_text: transcript of the reference audio, or None.
        seed: this row's seed. Every random draw for the row (sampling, diffusion noise) comes from a generator seeded
            with it, so the row's audio does not depend on its batch-mates.
        emotion: the request's emotion control (only for ``ModelFacts.supports_emotion`` families), or None.
        voices, turns: a dialogue row (only for a family with ``ModelFacts.max_dialogue_speakers``): every
            speaker's voice, in the dialogue's speaker order, and the turns to speak in one generation;
            ``reference_audio``/``reference_text`` are then None. Empty for an ordinary row.
        context: the earlier segments of the request this row hears before its text, oldest first (segment
            context; only for a family with ``ModelFacts.supports_segment_context``); empty = none, the row as
            without the setting.
        request_id, segment_index: the request the row is a segment of and its 0-based index there (set by the
            engine; None / 0 for rows made elsewhere): a family whose segments carry context from the earlier ones
            (GLM-TTS's prompt cache) links them by these.
    """

    text: str
    reference_audio: np.ndarray | None
    reference_text: str | None
    seed: int = 0
    emotion: RowEmotion | None = None
    voices: tuple[RowVoice, ...] = ()
    turns: tuple[RowTurn, ...] = ()
    context: tuple[RowContext, ...] = ()
    request_id: str | None = None
    segment_index: int = 0

    @property
    def is_dialogue(self) -> bool:
        """The row holds turns of a dialogue (the family's multi-speaker prompt)."""
        return bool(self.turns)


@dataclass(frozen=True)
class RowStep:
    """What one decode step made for one row of a running batch (``DecodeBatch.decode_step``).

    Attributes:
        key: the row's key, as given to ``DecodeBatch.prefill``.
        audio: float32 ``(num_samples,)`` at ``ModelFacts.sampling_rate``: the row's new audio from this step (empty
            when the step made none, e.g. a span marker or the end token). A row's audio is the concatenation of
            its steps' audio, in order.
        stop_reason: None while the row goes on; ``END_OF_SPEECH`` / ``MAX_NEW_TOKENS`` when this step ended it.
        context: with ``stop_reason`` set, what the row hands to its request's next segment as segment context
            (``TTSAdapter.segment_contexts``; ``RowContext.tokens``), or None.
    """

    key: Hashable
    audio: np.ndarray
    stop_reason: StopReason | None = None
    context: Any = None


class PrefixCache:
    """Least-recently-used store of prefilled prompt prefixes (e.g. a reference voice's part of the prompt), shared
    by the rows of every running batch. Plain Python, no tensors of its own: values are whatever the adapter keeps
    (its KV-cache tensors), each stored with its size, so the engine can count the cache in the memory budget.

    Args:
        max_entries: most prefixes kept (0 = off: ``get`` misses, ``put`` keeps nothing).
        max_bytes: most bytes kept (None = no byte bound); the engine lowers it with the memory budget.

    Attributes:
        num_hits, num_misses: ``get`` calls that found / did not find their key.
    """

    def __init__(self, max_entries: int = 16, max_bytes: int | None = None):
        if max_entries < 0:
            raise ValueError(f"max_entries={max_entries} must be >= 0")
        self.max_entries = int(max_entries)
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._num_bytes = 0
        self._lock = threading.Lock()  # the worker stores and looks up; gauges read the size from other threads
        self.num_hits = 0
        self.num_misses = 0

    @property
    def num_bytes(self) -> int:
        """Bytes held by the stored values (as given to ``put``)."""
        return self._num_bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Hashable) -> Any | None:
        """The value stored under ``key`` (and mark it recently used), or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.num_misses += 1
                return None
            self._entries.move_to_end(key)
            self.num_hits += 1
            return entry[0]

    def put(self, key: Hashable, value: Any, num_bytes: int) -> bool:
        """Store ``value`` (``num_bytes`` big), evicting the least recently used entries beyond the bounds. Returns
        False (nothing stored) when the cache is off or the value alone is over ``max_bytes``."""
        with self._lock:
            if self.max_entries == 0 or (self.max_bytes is not None and num_bytes > self.max_bytes):
                return False
            old = self._entries.pop(key, None)
            if old is not None:
                self._num_bytes -= old[1]
            self._entries[key] = (value, int(num_bytes))
            self._num_bytes += int(num_bytes)
            self._trim_locked()
            return key in self._entries

    def trim(self, max_bytes: int | None = None) -> int:
        """Evict least recently used entries until within the bounds (``max_bytes`` replaces the byte bound when
        given). Returns the bytes freed."""
        with self._lock:
            if max_bytes is not None:
                self.max_bytes = max_bytes
            return self._trim_locked()

    def _trim_locked(self) -> int:
        freed = 0
        while self._entries and (len(self._entries) > self.max_entries
                                 or (self.max_bytes is not None and self._num_bytes > self.max_bytes)):
            _, (_, size) = self._entries.popitem(last=False)
            self._num_bytes -= size
            freed += size
        return freed

    def evict(self, num_bytes: int) -> int:
        """Evict least recently used entries until at least ``num_bytes`` are freed (or the cache is empty), the
        bounds unchanged: room the engine's scheduler asked for (``StepPlan.evict_bytes``). Returns the bytes freed."""
        with self._lock:
            freed = 0
            while self._entries and freed < num_bytes:
                _, (_, size) = self._entries.popitem(last=False)
                self._num_bytes -= size
                freed += size
            return freed

    def clear(self) -> int:
        """Drop every entry (after an out-of-memory error). Returns the bytes freed."""
        with self._lock:
            freed = self._num_bytes
            self._entries.clear()
            self._num_bytes = 0
            return freed


class DecodeBatch(abc.ABC):
    """A running batch of an adapter with a step interface (``TTSAdapter.start_decode``): rows join, advance one
    decode step at a time together, and leave (continuous batching).

    Contract the engine relies on:

    * A row's audio depends only on the row (text, reference, seed) and the batch's ``params``: never on its
      batch-mates, nor on when it joined or who left meanwhile (greedy or seeded sampling alike).
    * ``prefill`` and ``decode_step`` are atomic: when they raise (``torch.OutOfMemoryError`` above all) the batch is
      exactly as before the call, so the engine can release some rows and go on with the rest.
    * A finished row stays in the batch (and in its forward calls, as padding) until it is released.

    Attributes:
        params: the batch's generation knobs (resolved; equal for every row, as ``SynthesisParams.batch_key``).
        num_row_steps: rows run in all decode steps so far (each step counts every row in the batch).
        num_padded_row_steps: of those, rows that had already finished (kept until released).
        prefill_s: seconds spent in ``prefill`` so far.
    """

    params: SynthesisParams

    def __init__(self, params: SynthesisParams):
        self.params = params
        self.num_row_steps = 0
        self.num_padded_row_steps = 0
        self.prefill_s = 0.0

    @property
    @abc.abstractmethod
    def keys(self) -> list[Hashable]:
        """Keys of the rows in the batch (live and finished-but-not-released), in batch order."""

    @property
    def num_rows(self) -> int:
        return len(self.keys)

    def _count_step(self, finished: Sequence[bool]) -> list[int]:
        """Start of a ``decode_step``: indices of the rows still decoding (``finished[i]`` False, one flag per row
        in batch order), with this step counted in ``num_row_steps`` / ``num_padded_row_steps``."""
        live = [i for i, done in enumerate(finished) if not done]
        self.num_row_steps += len(finished)
        self.num_padded_row_steps += len(finished) - len(live)
        return live

    @abc.abstractmethod
    def prefill(self, rows: Sequence[tuple[Hashable, AdapterRow]]) -> None:
        """Prefill ``rows`` (key, row) into the batch: each key is new to the batch. After it, the next
        ``decode_step`` advances them too.

        Raises:
            InputError / ReferenceAudioError: a row the adapter refuses (nothing joins).
            torch.OutOfMemoryError: nothing joins; the batch is as before.
        """

    @abc.abstractmethod
    def decode_step(self) -> list[RowStep]:
        """Advance every live (not finished) row by one decode step. Returns one ``RowStep`` per live row.

        Raises:
            torch.OutOfMemoryError: the batch is as before the call.
        """

    @abc.abstractmethod
    def release(self, keys: Iterable[Hashable]) -> None:
        """Take rows out of the batch and free their cache. Unknown keys are ignored."""


def count_parameters(*modules) -> int:
    """Parameters of ``modules`` together, each tensor once (tied or shared weights are not counted twice)."""
    seen: dict[int, int] = {}
    for module in modules:
        for p in module.parameters():
            seen[id(p)] = p.numel()
    return sum(seen.values())


class TTSAdapter(abc.ABC):
    """Base class of every model adapter.

    Subclasses set ``family`` and ``display_name`` and implement ``from_pretrained`` (usually ``_load_pretrained``
    plus the family's processor quirks), ``_measure_facts`` (usually through ``_model_facts``), ``preprocess``,
    ``generate``, ``postprocess`` and ``make_tiny_checkpoint``. Rows of a batch are left-padded; ``postprocess``
    returns one waveform per row trimmed to that row's own length (never padding audio).
    """

    family: ClassVar[str]
    #: the family's name in messages ("CSM", "Higgs Audio v2", ...)
    display_name: ClassVar[str]
    #: True when ``start_decode`` gives a ``DecodeBatch`` (the engine then batches continuously)
    supports_decode_steps: ClassVar[bool] = False
    #: how this family is run differently from its upstream tool, one sentence each with its reason
    #: (``ModelFacts.departures``, the sidecar, the README's "How each model is run" table)
    departures: ClassVar[tuple[str, ...]] = ()
    #: hub ids of original-format releases (that transformers cannot load) -> the transformers conversion to use
    original_format_repos: ClassVar[Mapping[str, str]] = {}
    facts: ModelFacts

    @classmethod
    def original_format_hint(cls, config: Mapping[str, Any]) -> str | None:
        """The converted repo to use when ``config`` (a raw ``config.json`` dict) is an original-format release of
        this family that transformers cannot load, else None. Families with such releases override it."""
        return None

    def __init__(self, model, processor, device: str, dtype: str):
        """Keep the loaded model and processor, then measure ``facts`` (``_measure_facts``).

        Args:
            model: the transformers model, already on ``device`` and in eval mode.
            processor: the checkpoint's processor (tokenizer, feature extractor, codec where it holds one).
            device: torch device string ("cpu", "cuda", "cuda:N").
            dtype: "float32" | "bfloat16" | "float16", the model's weights and KV cache.
        """
        self.model = model
        self.processor = processor
        self.device = device
        self.dtype = dtype
        self._unencodable: dict[str, bool] = {}  # character -> maps to the unknown token (unencodable_characters)
        self.facts = self._measure_facts()

    def _measure_facts(self) -> ModelFacts:
        """ModelFacts from the loaded model and processor; every family measures its own."""
        raise NotImplementedError(f"{type(self).__name__} does not measure its ModelFacts")

    def _model_facts(self, *, num_parameters: int | None = None, **family_facts: Any) -> ModelFacts:
        """``ModelFacts(**family_facts)`` plus the fields every family fills the same way: ``family``,
        ``dtype_bytes`` (``DTYPE_BYTES[self.dtype]``) and ``num_parameters`` (of ``self.model``, each tensor once,
        i.e. tied embeddings counted once; pass it when the family counts more, e.g. a codec outside the model)."""
        if num_parameters is None:
            num_parameters = count_parameters(self.model)
        family_facts.setdefault("departures", COMMON_DEPARTURES + self.departures)
        return ModelFacts(family=self.family, dtype_bytes=DTYPE_BYTES[self.dtype], num_parameters=num_parameters,
                          **family_facts)

    @classmethod
    def _load_pretrained(cls, model_class, id_or_path: str | Path, device: str, dtype: str):
        """``model_class.from_pretrained(id_or_path, dtype=...)`` and ``AutoProcessor.from_pretrained(id_or_path)``
        (hub id or local folder, the same calls for both), the model moved to ``device`` in eval mode. A codec the
        processor holds (``processor.audio_tokenizer``: Dia's DAC, Higgs' audio tokenizer) goes to ``device`` too and
        stays float32.

        Args:
            model_class: the transformers model class, e.g. ``CsmForConditionalGeneration``.
            id_or_path: hub id or a folder written by ``save_pretrained``.
            device: "cpu", "cuda", "cuda:N".
            dtype: "float32" | "bfloat16" | "float16" (keys of ``DTYPE_BYTES``).

        Returns:
            (model, processor).

        Raises:
            ModelLoadError: unknown dtype; a hub failure named by its cause (``tts_app.adapters.loading``: gated repo,
                unknown id, not cached while the hub cannot be reached - the message names ``--model DIR``); files
                that are missing, corrupt or of another architecture; a device the model cannot be moved to.
            torch.OutOfMemoryError: the weights do not fit (the caller decides what to do).
        """
        import torch
        from transformers import AutoProcessor

        from tts_app.adapters.loading import hub_error_message
        from tts_app.errors import ModelLoadError

        if dtype not in DTYPE_BYTES:
            raise ModelLoadError(f"dtype {dtype!r} is not supported for {cls.display_name}; "
                                 f"choose one of {sorted(DTYPE_BYTES)}")
        id_or_path = str(id_or_path)
        try:
            model = model_class.from_pretrained(id_or_path, dtype=getattr(torch, dtype))
            processor = AutoProcessor.from_pretrained(id_or_path)
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:  # transformers/safetensors raise many types for a missing, bad or foreign checkpoint
            message = None if Path(id_or_path).exists() else hub_error_message(id_or_path, exc)
            if message is not None:  # gated, unknown id, or not cached while the hub is unreachable
                raise ModelLoadError(message) from exc
            raise ModelLoadError(
                f"cannot load {cls.display_name} checkpoint {id_or_path!r}: {exc}. Point --model at a "
                f"{cls.display_name} checkpoint folder or hub id; `python -m tts_app make-tiny-model --family "
                f"{cls.family} --out DIR` writes a tiny random one."
            ) from exc
        try:
            model = model.to(device).eval()
            codec = getattr(processor, "audio_tokenizer", None)
            if isinstance(codec, torch.nn.Module):
                codec.to(device=device, dtype=torch.float32).eval()
        except torch.OutOfMemoryError:
            raise
        except (RuntimeError, AssertionError) as exc:  # bad device string / CUDA not compiled in
            raise ModelLoadError(f"cannot move {cls.display_name} to device {device!r}: {exc}") from exc
        return model, processor

    @classmethod
    @abc.abstractmethod
    def from_pretrained(cls, id_or_path: str | Path, *, device: str = "cpu", dtype: str = "float32") -> "TTSAdapter":
        """Load model + processor through transformers' ``from_pretrained(id_or_path)`` (hub id or local folder).

        Raises:
            ModelLoadError: the checkpoint cannot be loaded (message names ``--model DIR`` as the way out when the
                hub is unreachable).
        """

    @classmethod
    @abc.abstractmethod
    def make_tiny_checkpoint(cls, out_dir: str | Path, seed: int = 0) -> Path:
        """Build a tiny random checkpoint of the real architecture (config, tokenizer/processor built in code) and
        ``save_pretrained`` it into ``out_dir``. Returns ``out_dir``."""

    @abc.abstractmethod
    def preprocess(self, rows: list[AdapterRow], params: SynthesisParams) -> Any:
        """Turn rows into model inputs (tensors on the adapter's device), left-padded."""

    @abc.abstractmethod
    def generate(self, inputs: Any, params: SynthesisParams) -> Any:
        """Run the decode loop. Must honour ``params.use_cache`` (same greedy tokens on or off) and
        ``params.greedy`` / sampling knobs / ``params.max_new_tokens``. May raise ``torch.OutOfMemoryError``."""

    @abc.abstractmethod
    def postprocess(self, outputs: Any, inputs: Any) -> list[np.ndarray]:
        """Decode generated tokens to audio: list of float32 arrays ``(num_samples,)`` at ``facts.sampling_rate``,
        one per row, each trimmed to its own length."""

    @abc.abstractmethod
    def stop_reasons(self, outputs: Any, inputs: Any) -> list[StopReason]:
        """Why each row's decoding stopped, one ``StopReason`` per row of ``outputs`` (of ``generate``):
        ``MAX_NEW_TOKENS`` when the row was still speaking at its cap, else ``END_OF_SPEECH``. The engine turns
        ``MAX_NEW_TOKENS`` into a per-segment warning."""

    def segment_contexts(self, outputs: Any, inputs: Any) -> list[Any] | None:
        """Per row of a finished batch, what its next segment takes as segment context besides the row's audio
        (``RowContext.tokens``; e.g. Higgs Audio's generated codec frames), or None when the family needs only the
        audio (it re-encodes it, as CSM does) or offers no segment context. Must be picklable (ZeroGPU)."""
        return None

    def max_input_positions(self) -> int | None:
        """The model's input limit in sequence positions (prompt and new steps together), as the adapter enforces
        it, or None when it sets none; segment context is carried only within it
        (``tts_app.engine.input.InputProcessor.context_window``)."""
        return self.facts.generation_defaults.max_length

    def context_positions(self, text_chars: int, audio_s: float) -> int:
        """Prompt positions one earlier segment takes as segment context: its text at
        ``facts.text_positions_per_char``, its audio at ``facts.reference_positions_per_second`` (both the
        reference's rates, an upper bound), plus ``CONTEXT_TURN_POSITIONS`` for the turn's framing tokens. Families
        that measure their framing override it."""
        f = self.facts
        return int(math.ceil(text_chars * f.text_positions_per_char + audio_s * f.reference_positions_per_second)) \
            + CONTEXT_TURN_POSITIONS

    def start_decode(self, params: SynthesisParams, prefix_cache: PrefixCache | None = None) -> DecodeBatch:
        """An empty running batch for rows with these knobs (step interface; see ``DecodeBatch``).

        Args:
            params: the knobs (``resolve``d); every row of the batch runs with them (its own seed aside).
            prefix_cache: where the batch may keep and find prefilled prompt prefixes (shared voices); None = none.

        Raises:
            NotImplementedError: the family has no step interface (``supports_decode_steps`` is False).
        """
        raise NotImplementedError(f"{self.display_name} has no step-wise decode loop; the engine batches its "
                                  "requests whole")

    def synthesize(self, rows: list[AdapterRow], params: SynthesisParams) -> list[np.ndarray]:
        """preprocess -> generate -> postprocess for one batch."""
        inputs = self.preprocess(rows, params)
        outputs = self.generate(inputs, params)
        return self.postprocess(outputs, inputs)

    def unencodable_characters(self, chars: Iterable[str]) -> set[str]:
        """The characters of ``chars`` that the model's text tokenizer maps to its unknown token (rare hanzi such as
        囧 in a vocabulary without them), so the front end can replace them by a homophone or warn that they are
        skipped instead of letting them become ``<unk>`` silently.

        Default: each character is tokenized alone with ``self.processor.tokenizer`` (no special tokens); it is
        unencodable when the ids hold ``unk_token_id`` or are empty. A tokenizer without an unknown token
        (byte-level BPE: Qwen2, Llama 3, Dia's bytes) encodes everything, so the answer is empty. Answers are
        cached per character. Families whose text tokenizer lives elsewhere override this.

        Args:
            chars: characters (strings of length 1; longer strings are checked as a whole).

        Returns:
            The subset of ``chars`` the tokenizer cannot encode.
        """
        tokenizer = self.processor.tokenizer
        unk_id = tokenizer.unk_token_id
        if unk_id is None:
            return set()
        out = set()
        for char in set(chars):
            if char not in self._unencodable:
                ids = tokenizer(char, add_special_tokens=False)["input_ids"]
                self._unencodable[char] = not ids or unk_id in ids
            if self._unencodable[char]:
                out.add(char)
        return out

    def count_text_tokens(self, text: str) -> int:
        """Text tokens of ``text`` for the model (the segment unit of a family with ``facts.max_segment_tokens``):
        ``self.processor.tokenizer`` without special tokens. Families whose text tokenizer lives elsewhere override
        it."""
        return len(self.processor.tokenizer(text, add_special_tokens=False)["input_ids"])

    def segment_measure(self):
        """The family's segment unit for the front end (``tts_app.frontend.segment.SegmentMeasure``), used when
        ``facts.max_segment_tokens`` is set: ``count_text_tokens``, sentences as the pieces that are packed. A family
        whose upstream also cuts inside sentences names those characters (``piece_ends``)."""
        from tts_app.frontend.segment import SegmentMeasure

        return SegmentMeasure(self.count_text_tokens)

    def max_new_tokens(self, params: SynthesisParams) -> int:
        """The request's decode-step cap, else the checkpoint default (``facts.generation_defaults``)."""
        return params.max_new_tokens if params.max_new_tokens is not None else self.facts.default_max_new_tokens

    def row_max_new_tokens(self, params: SynthesisParams, prompt_positions: int, *, row: int | None = None,
                           extra_steps: int = 0) -> int:
        """The decode-step cap of one row whose prompt takes ``prompt_positions`` positions, as transformers'
        ``generate`` counts them: the request's ``max_new_tokens`` (``max_new_tokens``), bounded by the checkpoint's
        total length (``generation_defaults.max_length``, prompt included) when it sets one:
        ``min(max_new_tokens, max_length + extra_steps - prompt_positions)``.

        Args:
            params: the request's knobs.
            prompt_positions: the row's own prompt length (not its padded length: a row's cap never depends on its
                batch-mates).
            row: the row's index in its batch, for the message.
            extra_steps: steps the family's ``generate`` adds past ``max_length`` (Dia's delay-pattern flush).

        Raises:
            InputError: the prompt alone reaches the checkpoint's ``max_length``.
        """
        from tts_app.errors import InputError

        cap = self.max_new_tokens(params)
        max_length = self.facts.generation_defaults.max_length
        if max_length is None:
            return cap
        left = max_length + extra_steps - prompt_positions
        if left <= extra_steps:
            where = Notice("adapter_row", row=row) if row is not None else ""
            raise InputError(Notice("adapter_prompt_positions", where=where, prompt_positions=prompt_positions,
                                    max_length=max_length))
        return min(cap, left)

    def resolve(self, params: SynthesisParams) -> SynthesisParams:
        """``params`` with every knob not given set to the checkpoint default (``GenerationDefaults.resolve``)."""
        return self.facts.generation_defaults.resolve(params)

    def estimate_positions(self, text_chars: int, reference_s: float, reference_text_chars: int,
                           max_new_tokens: int) -> int:
        """Sequence positions one row occupies at the end of decoding (reference + text + new tokens), used by
        the engine's KV-cache estimate. Families with a different layout override this."""
        f = self.facts
        prompt = int(round(reference_s * f.reference_positions_per_second
                           + (text_chars + reference_text_chars) * f.text_positions_per_char))
        return cap_total_positions(prompt, max_new_tokens, f.generation_defaults.max_length) + 8


def cap_total_positions(prompt_positions: int, max_new_tokens: int, max_length: int | None) -> int:
    """Positions a row holds at the end of decoding: ``prompt + max_new_tokens``, at most ``max_length`` when the
    checkpoint caps the total (``GenerationDefaults.max_length``); never below the prompt itself."""
    total = prompt_positions + max_new_tokens
    if max_length is not None:
        total = min(total, max(max_length, prompt_positions))
    return total
