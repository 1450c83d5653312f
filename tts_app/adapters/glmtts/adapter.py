"""The GLM-TTS adapter: loading, the language-model stage on the step interface, and speech tokens -> audio.

See the package docstring (``tts_app/adapters/glmtts/__init__.py``) for what upstream does and where this differs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from tts_app.adapters.base import (DTYPE_BYTES, AdapterRow, DecodeBatch, GenerationDefaults, ModelFacts, PrefixCache,
                                   RowStep, TTSAdapter, count_parameters)
from tts_app.adapters.decode_stream import DecoderStream
from tts_app.errors import InputError, ModelLoadError, ReferenceAudioError
from tts_app.frontend.messages import Notice, register
from tts_app.request import StopReason, SynthesisParams

HUB_ID = "zai-org/GLM-TTS"
LANGUAGES = ("zh", "en")  # zai-org/GLM-TTS model card: Chinese and English (mixed)

# upstream's constants (glmtts_inference.py, llm/glmtts.py GLMTTS.inference, cosyvoice/utils/common.ras_sampling)
MIN_TOKEN_TEXT_RATIO = 2  # GLMTTS.inference min_token_text_ratio: EOS is masked for the first 2 x text tokens
MAX_TOKEN_TEXT_RATIO = 20  # GLMTTS.inference max_token_text_ratio: at most 20 x text tokens speech tokens
RAS_TOP_P = 0.8  # ras_sampling top_p
RAS_TOP_K = 25  # ras_sampling top_k (and glmtts_inference's sampling=25)
RAS_WIN_SIZE = 10  # ras_sampling win_size
RAS_TAU_R = 0.1  # ras_sampling tau_r: a draw seen >= win_size x tau_r times in the window is redrawn
MAX_LLM_SEQ_INP_LEN = 750  # glmtts_inference.MAX_LLM_SEQ_INP_LEN: the prompt cache's speech-token budget
PROMPT_CACHE_DEFAULT = True  # glmtts_inference --use_cache: action="store_true", default=True
MAX_SEGMENT_CHARS = 60  # TextFrontEnd.split_by_len max_text_len (min_text_len 30)
SPEECH_TOKENS_PER_S = 25  # glmtts_inference.TOKEN_RATE
NUM_AUDIO_TOKENS = 32768  # <|audio_0|> ... <|audio_32767|>
_UPSTREAM = "zai-org/GLM-TTS llm/glmtts.py GLMTTS.inference + cosyvoice/utils/common.py ras_sampling"

#: Special tokens by upstream's names (glmtts_inference.get_special_token_ids).
SPECIAL_TOKENS = {"ats": "<|audio_0|>", "ate": f"<|audio_{NUM_AUDIO_TOKENS - 1}|>", "boa": "<|begin_of_audio|>",
                  "eoa": "<|user|>", "pad": "<|endoftext|>"}

GLM_EN = {
    "glm_needs_audio": "row {row}: GLM-TTS clones a voice; give a reference clip",
    "glm_needs_text": "row {row}: GLM-TTS needs the transcript of the reference clip (reference text)",
    "glm_audio_shape": "row {row}: the reference clip must be a non-empty mono array at {rate_hz} Hz, got shape "
                       "{shape}",
    "glm_audio_not_finite": "row {row}: the reference clip holds NaN or infinite samples",
    "glm_no_speech_tokens": "row {row}: the reference clip is too short for any speech token; use at least 1 s",
    "glm_nothing_readable": "row {row}: nothing in {text!r} is readable for GLM-TTS",
}
GLM_ZH = {
    "glm_needs_audio": "第 {row} 行：GLM-TTS 需要克隆音色，请提供参考音频",
    "glm_needs_text": "第 {row} 行：GLM-TTS 需要参考音频的文字稿（参考文本）",
    "glm_audio_shape": "第 {row} 行：参考音频必须是 {rate_hz} Hz 的非空单声道数组，收到的形状是 {shape}",
    "glm_audio_not_finite": "第 {row} 行：参考音频含有 NaN 或无穷大的采样",
    "glm_no_speech_tokens": "第 {row} 行：参考音频太短，提取不到语音 token；请至少用 1 秒",
    "glm_nothing_readable": "第 {row} 行：{text!r} 中没有 GLM-TTS 能读的内容",
}
register(__name__, GLM_EN, GLM_ZH)


# ---------------------------------------------------------------------------------------------------- layout

@dataclass(frozen=True)
class CheckpointLayout:
    """Where a GLM-TTS checkpoint's parts are (upstream's layout: ``ROOT/ckpt/...`` + ``ROOT/frontend/``, or the hub
    snapshot itself, which is the ``ckpt/`` level)."""

    ckpt: Path
    campplus: Path

    @property
    def llm(self) -> Path:
        return self.ckpt / "llm"

    @property
    def text_tokenizer(self) -> Path:
        return self.ckpt / "vq32k-phoneme-tokenizer"

    @property
    def speech_tokenizer(self) -> Path:
        return self.ckpt / "speech_tokenizer"

    @property
    def flow(self) -> Path:
        return self.ckpt / "flow"


def is_checkpoint_folder(folder: Path) -> bool:
    """True for a folder in GLM-TTS's layout (``ckpt/llm`` + ``ckpt/vq32k-phoneme-tokenizer``, or the hub snapshot's
    ``llm`` + ``vq32k-phoneme-tokenizer``)."""
    return any((base / "llm" / "config.json").is_file() and (base / "vq32k-phoneme-tokenizer").is_dir()
               for base in (folder / "ckpt", folder))


def checkpoint_layout(id_or_path: str | Path) -> CheckpointLayout:
    """The layout of a local folder or a hub id (``zai-org/GLM-TTS``, from the hub cache or downloaded).

    Raises:
        ModelLoadError: not a GLM-TTS folder, or a hub id not cached while the hub cannot be reached.
    """
    folder = Path(str(id_or_path)).expanduser()
    if not folder.exists():
        from huggingface_hub import snapshot_download

        from tts_app.adapters.loading import hub_error_message

        try:
            folder = Path(snapshot_download(str(id_or_path)))
        except Exception as exc:  # huggingface_hub raises many types (offline, gated, unknown id)
            raise ModelLoadError(hub_error_message(str(id_or_path), exc)
                                 or f"cannot download {id_or_path!r}: {exc}") from exc
    ckpt = folder / "ckpt" if (folder / "ckpt" / "llm").is_dir() else folder
    if not is_checkpoint_folder(folder):
        raise ModelLoadError(f"{str(folder)!r} is not a GLM-TTS checkpoint: it needs ckpt/llm/ and "
                             "ckpt/vq32k-phoneme-tokenizer/ (or llm/ and vq32k-phoneme-tokenizer/ of the hub "
                             f"snapshot: huggingface-cli download {HUB_ID} --local-dir DIR)")
    candidates = [folder / "frontend" / "campplus.onnx", ckpt / "frontend" / "campplus.onnx",
                  folder.parent / "frontend" / "campplus.onnx"]
    campplus = next((c for c in candidates if c.is_file()), candidates[0])
    return CheckpointLayout(ckpt=ckpt, campplus=campplus)


# ---------------------------------------------------------------------------------------------------- processor

class GLMTTSProcessor:
    """Everything around the LM: text tokenizer, speech tokenizer, CAM++ speaker encoder, prompt mel, special token
    ids, and (loaded on first use) the flow model and vocoder.

    Attributes:
        layout: the checkpoint's ``CheckpointLayout``.
        text_tokenizer: ``GLMTextTokenizer``.
        speech_tokenizer: ``SpeechTokenizer``.
        speaker_encoder: ``SpeakerEncoder``.
        prompt_mel: ``PromptMel`` at ``sampling_rate``.
        special: upstream's special token ids (``ats``, ``ate``, ``boa``, ``eoa``, ``pad``).
        sampling_rate: output rate (24000 HiFT, 32000 Vocos2D).
    """

    def __init__(self, layout: CheckpointLayout, device: str, sampling_rate: int):
        from tts_app.adapters.glmtts.speaker import PromptMel, SpeakerEncoder
        from tts_app.adapters.glmtts.speech_tokenizer import SpeechTokenizer
        from tts_app.adapters.glmtts.text_tokenizer import GLMTextTokenizer

        self.layout = layout
        self.device = device
        self.sampling_rate = sampling_rate
        self.text_tokenizer = GLMTextTokenizer(layout.text_tokenizer)
        self.special = {name: self.text_tokenizer.token_id(token) for name, token in SPECIAL_TOKENS.items()}
        if self.special["ate"] - self.special["ats"] != NUM_AUDIO_TOKENS - 1:
            raise ModelLoadError(f"the GLM-TTS text tokenizer's speech tokens are not consecutive ({self.special})")
        self.speech_tokenizer = SpeechTokenizer(layout.speech_tokenizer, device)
        self.speaker_encoder = SpeakerEncoder(layout.campplus)
        self.prompt_mel = PromptMel(sampling_rate)
        self._token2wav = None

    @property
    def token2wav(self):
        """(flow, vocoder), loaded on first use (``tts_app.adapters.glmtts.flow`` / ``.vocoder``)."""
        if self._token2wav is None:
            from tts_app.adapters.glmtts.flow import load_flow
            from tts_app.adapters.glmtts.vocoder import load_vocoder

            self._token2wav = (load_flow(self.layout.flow, self.device),
                               load_vocoder(self.layout.ckpt, self.sampling_rate, self.device))
        return self._token2wav


@dataclass
class GLMTTSPrompt:
    """One row's prompt, as upstream builds it for ``GLMTTS.inference`` (plus what the flow needs).

    Attributes:
        text_ids: the target text's token ids (``text`` in upstream; its length sets the min / max lengths).
        prompt_text_ids: the reference transcript's ids (``prompt_text``: ``text_normalize(prompt_text) + " "``).
        prompt_speech_tokens: the reference clip's speech tokens (0-based, before the ``ats`` offset).
        speaker_embedding: float32 ``(192,)`` CAM++ embedding (flow).
        prompt_mel: float32 ``(frames, 80)`` (flow).
        seed: the row's seed.
    """

    text_ids: list[int]
    prompt_text_ids: list[int]
    prompt_speech_tokens: list[int]
    speaker_embedding: Any = None
    prompt_mel: Any = None
    seed: int = 0
    request_id: str | None = None
    segment_index: int = 0
    reference_key: str = ""
    cached_prompt: tuple[list[int], list[int]] | None = None

    def input_ids(self, special: dict[str, int]) -> list[int]:
        """``[prompt text][text][<|begin_of_audio|>][prompt speech tokens + ats]`` (``GLMTTS.inference``,
        PRETRAIN mode); the prompt part is ``cached_prompt`` (text ids, speech tokens) when the prompt cache gave
        one (the flow keeps the reference's own ``prompt_speech_tokens``)."""
        text, speech = self.cached_prompt or (self.prompt_text_ids, self.prompt_speech_tokens)
        return text + self.text_ids + [special["boa"]] + [t + special["ats"] for t in speech]

    @property
    def min_len(self) -> int:
        return int(len(self.text_ids) * MIN_TOKEN_TEXT_RATIO)

    @property
    def max_len(self) -> int:
        return int(len(self.text_ids) * MAX_TOKEN_TEXT_RATIO)


# ---------------------------------------------------------------------------------------------------- sampling

class RowSelector:
    """One row's token choice per decode step, upstream's ``sample_method="ras"`` (default) drawn from the row's own
    ``torch.Generator`` (upstream: the global RNG, re-seeded with the seed before each segment; a CPU generator
    seeded alike gives the same stream).

    ``ras`` (``cosyvoice/utils/common.ras_sampling``, repetition-aware sampling of VALL-E 2): nucleus sampling over
    the softmax of the step's log-probabilities (divided by ``temperature``) sorted descending (stable): tokens are
    taken while the running sum (float32, in order) is below ``top_p`` and fewer than ``top_k`` are taken, one is
    drawn (``multinomial``); when it occurs ``>= win_size x tau_r`` times among the row's last ``win_size`` tokens it
    is replaced by a draw from the full softmax. Greedy: the argmax. EOS (``<|user|>``) is masked (``-inf``) for the
    first ``min_len`` steps.

    A draw outside the speech tokens (a text token: upstream then fails in the flow) is replaced by the most likely
    speech token or EOS (after the same draws, so the stream is unchanged).
    """

    def __init__(self, params: SynthesisParams, seed: int, allowed):
        import torch

        self.greedy = bool(params.greedy)
        self.temperature = float(params.temperature) if params.temperature is not None else 1.0
        self.top_p = float(params.top_p) if params.top_p is not None else RAS_TOP_P
        self.top_k = int(params.top_k) if params.top_k is not None else RAS_TOP_K
        self.generator = torch.Generator().manual_seed(int(seed))
        self.allowed = allowed  # (vocab,) bool: speech tokens + EOS

    def pick(self, logits, history: list[int], mask_eos: bool, eos: int) -> int:
        """One token id from ``logits`` ``(vocab,)`` float32 (CPU) given the row's ``history`` (absolute ids)."""
        logp = logits.log_softmax(dim=-1)
        if mask_eos:
            logp[eos] = -float("inf")
        if self.greedy:
            token = int(logp.argmax())
        else:
            token = self._ras(logp, history)
        if not bool(self.allowed[token]):
            masked = logp.masked_fill(~self.allowed, -float("inf"))
            token = int(masked.argmax())
        return token

    def _ras(self, logp, history: list[int]) -> int:
        import torch

        values, indices = (logp / self.temperature).softmax(dim=0).sort(descending=True, stable=True)
        head = values[: self.top_k].tolist()
        taken, cum = [], np.float32(0.0)
        for value in head:  # upstream's loop: float32 running sum, checked before adding
            if cum < self.top_p and len(taken) < self.top_k:
                cum = np.float32(cum + np.float32(value))
                taken.append(value)
            else:
                break
        prob = torch.tensor(taken, dtype=torch.float32)
        token = int(indices[int(prob.multinomial(1, replacement=True, generator=self.generator))])
        window = history[-RAS_WIN_SIZE:]
        if sum(1 for t in window if t == token) >= RAS_WIN_SIZE * RAS_TAU_R:
            token = int(logp.softmax(dim=0).multinomial(1, replacement=True, generator=self.generator))
        return token


# ---------------------------------------------------------------------------------------------------- prompt cache

class PromptCache:
    """GLM-TTS's long-text prompt cache (upstream's ``use_cache``; not the KV cache), for every request at once.

    Upstream (``glmtts_inference.generate_long`` + ``get_cached_prompt``) keeps per text a list of (text ids, speech
    tokens) items, the reference's first; each finished segment is appended. A later segment's prompt is the items'
    text ids followed by its own text, then ``<|begin_of_audio|>`` and the items' speech tokens; before that, while
    the items' speech tokens plus an estimate of the new segment's (their speech/text token ratio x its text tokens)
    exceed ``MAX_LLM_SEQ_INP_LEN`` (750) and more than the reference's item is left, the oldest segment's item is
    dropped for good. The flow model keeps the reference's own tokens.

    Here a request's segments therefore run in order: segment k joins the running batch once segments 0 .. k-1 have
    finished (``ready``); items are kept per reference clip (a request with several voices chains each voice's
    segments). The most recent ``max_requests`` requests are kept.
    """

    def __init__(self, max_requests: int = 64):
        from collections import OrderedDict

        self.max_requests = max_requests
        # request id -> {"finished": {index: (reference key, reference item, segment item)},
        #                 "items": {reference key: [items]}, "applied": segments appended so far}
        self._requests: "OrderedDict[str, dict]" = OrderedDict()

    def _request(self, request_id: str) -> dict:
        if request_id not in self._requests:
            self._requests[request_id] = {"finished": {}, "items": {}, "applied": 0}
            while len(self._requests) > self.max_requests:
                self._requests.popitem(last=False)
        self._requests.move_to_end(request_id)
        return self._requests[request_id]

    def ready(self, prompt: GLMTTSPrompt) -> bool:
        """All earlier segments of the prompt's request have finished."""
        finished = self._request(prompt.request_id)["finished"]
        return all(k in finished for k in range(prompt.segment_index))

    def finish(self, prompt: GLMTTSPrompt, speech_tokens: list[int]) -> None:
        """Record a finished segment (its text ids and 0-based speech tokens)."""
        self._request(prompt.request_id)["finished"][prompt.segment_index] = (
            prompt.reference_key, (list(prompt.prompt_text_ids), list(prompt.prompt_speech_tokens)),
            (list(prompt.text_ids), list(speech_tokens)))

    def cached_prompt(self, prompt: GLMTTSPrompt) -> tuple[list[int], list[int]] | None:
        """(text ids, speech tokens) of the prompt for ``prompt``'s segment (``ready`` must hold), or None when the
        voice has no earlier segment (the reference alone, as upstream's first segment). Prunes as upstream."""
        state = self._request(prompt.request_id)
        while state["applied"] < prompt.segment_index:  # append the finished segments in their order
            key, reference, item = state["finished"][state["applied"]]
            state["items"].setdefault(key, [reference]).append(item)
            state["applied"] += 1
        items = state["items"].get(prompt.reference_key)
        if not items or len(items) < 2:
            return None
        num_text = sum(len(t) for t, _ in items)
        ratio = sum(len(s) for _, s in items) / (num_text if num_text > 0 else 1.0)
        estimate = int(ratio * len(prompt.text_ids))
        while sum(len(s) for _, s in items) + estimate > MAX_LLM_SEQ_INP_LEN and len(items) > 1:
            items.pop(1)
        return [t for text, _ in items for t in text], [t for _, speech in items for t in speech]


# ---------------------------------------------------------------------------------------------------- decode batch

@dataclass
class _StepRow:
    """One row (segment) of a running GLM-TTS batch."""

    key: Any
    prompt: GLMTTSPrompt
    selector: RowSelector
    max_steps: int
    tokens: list = field(default_factory=list)  # absolute ids (speech tokens + ats)
    stop_reason: StopReason | None = None

    def speech_tokens(self, ats: int) -> list[int]:
        return [t - ats for t in self.tokens]


class GLMTTSDecodeBatch(DecodeBatch):
    """A running GLM-TTS batch (step interface): the Llama stream of speech tokens for rows that join and leave at any
    decode step. Per row exactly ``GLMTTS.inference``: the prompt prefilled (left padding masked, positions from the
    mask), one token per live row per step with the row's ``RowSelector``, EOS masked for its first ``min_len`` steps,
    at most ``min(max_len, max_new_tokens)`` tokens. A row's audio (flow + vocoder) comes in the step that ends it.

    Atomic: on an exception (``torch.OutOfMemoryError``) the stream is rolled back and the rows' generators restored.
    ``GLMTTSAdapter.generate`` runs its rows through this same loop (``make_audio=False``).
    """

    def __init__(self, adapter: "GLMTTSAdapter", params: SynthesisParams, make_audio: bool = True):
        import torch

        super().__init__(params)
        self.adapter = adapter
        self.llama = adapter.model
        self.device = torch.device(adapter.device)
        self.make_audio = make_audio
        self.max_new_tokens = adapter.max_new_tokens(params)
        hidden = int(self.llama.config.hidden_size)
        self.stream = DecoderStream(self.llama.model, hidden, self.device, self.llama.dtype, params.use_cache)
        self.rows: list[_StepRow] = []
        self.next_logits = torch.zeros((0, int(self.llama.config.vocab_size)), dtype=torch.float32)
        #: the prompt cache is on (the request's setting; None = upstream's default, on)
        self.prompt_cache = params.prompt_cache is not False
        #: (key, prompt) of rows waiting for their request's earlier segments (prompt cache)
        self.waiting: list[tuple[Any, GLMTTSPrompt]] = []

    @property
    def keys(self) -> list:
        return [r.key for r in self.rows] + [k for k, _ in self.waiting]

    def _embed(self, ids):
        return self.llama.model.embed_tokens(ids)

    def _logits(self, hidden):
        return self.llama.lm_head(hidden).float().cpu()

    def prefill(self, rows) -> None:
        import torch

        t0 = time.perf_counter()
        keys = [k for k, _ in rows]
        if len(set(map(id, keys))) != len(keys) or set(map(id, keys)) & set(map(id, self.keys)):
            raise ValueError("prefill got a key already in the batch")
        with torch.no_grad():
            prompts = [self.adapter.prompt(i, row) for i, (_, row) in enumerate(rows)]
        later = [self._chained(p) and p.segment_index > 0 for p in prompts]
        now = [(k, p) for k, p, wait in zip(keys, prompts, later) if not wait]
        if now:
            self.join([k for k, _ in now], [p for _, p in now])
        self.waiting += [(k, p) for k, p, wait in zip(keys, prompts, later) if wait]
        self.prefill_s += time.perf_counter() - t0

    def _chained(self, prompt: GLMTTSPrompt) -> bool:
        """The row takes part in the prompt cache (on, and a segment of an engine request)."""
        return self.prompt_cache and prompt.request_id is not None

    def _join_ready(self) -> None:
        """Prefill the waiting rows whose earlier segments have all finished, with their cached prompts. Raises
        ``torch.OutOfMemoryError``; nothing joins then."""
        cache = self.adapter.prompt_cache
        ready = [(k, p) for k, p in self.waiting if cache.ready(p)]
        if not ready:
            return
        prompts = [replace(p, cached_prompt=cache.cached_prompt(p)) for _, p in ready]
        self.join([k for k, _ in ready], prompts)
        joined = {id(k) for k, _ in ready}
        self.waiting = [(k, p) for k, p in self.waiting if id(k) not in joined]

    def join(self, keys: list, prompts: list[GLMTTSPrompt]) -> None:
        """Prefill ``prompts`` (row ``i`` under ``keys[i]``) into the running batch. Raises
        ``torch.OutOfMemoryError``; nothing joins then."""
        import torch

        special = self.adapter.processor.special
        ids = [p.input_ids(special) for p in prompts]
        longest = max(len(i) for i in ids)
        input_ids = torch.full((len(ids), longest), special["pad"], dtype=torch.long)
        mask = torch.zeros((len(ids), longest), dtype=torch.long)
        for r, row_ids in enumerate(ids):  # left padding
            input_ids[r, longest - len(row_ids):] = torch.tensor(row_ids, dtype=torch.long)
            mask[r, longest - len(row_ids):] = 1
        with torch.no_grad():
            sub = DecoderStream(self.llama.model, self.stream.hidden_size, self.device, self.stream.dtype,
                                self.params.use_cache)
            logits = self._logits(sub.forward(self._embed(input_ids.to(self.device)), mask.to(self.device)))
            merged = self.stream.prepare_merge(sub)
        allowed = self.adapter.allowed_tokens
        new_rows = [_StepRow(key=k, prompt=p, selector=RowSelector(self.params, p.seed, allowed),
                             max_steps=min(p.max_len, self.max_new_tokens)) for k, p in zip(keys, prompts)]
        self.stream.commit(merged)
        self.next_logits = torch.cat([self.next_logits, logits])
        self.rows += new_rows

    def decode_step(self) -> list[RowStep]:
        """One token per live row (see the class docstring); rows waiting for their request's earlier segments
        (prompt cache) join first when those have finished, and make an empty step while they wait."""
        import torch

        if self.waiting:
            with torch.no_grad():
                self._join_ready()
        waiting = [RowStep(key=k, audio=np.zeros(0, dtype=np.float32)) for k, _ in self.waiting]
        live = self._count_step([r.stop_reason is not None for r in self.rows] + [False] * len(self.waiting))
        live = [i for i in live if i < len(self.rows)]
        if not live:
            return waiting
        eos = self.adapter.processor.special["eoa"]
        generators = [self.rows[i].selector.generator for i in live]
        states = [g.get_state() for g in generators]
        mark = self.stream.checkpoint()
        try:
            with torch.no_grad():
                commit = self._step(live, eos)
        except BaseException:
            self.stream.rollback(mark)
            for g, state in zip(generators, states):
                g.set_state(state)
            raise
        return commit() + waiting

    def _step(self, live: list[int], eos: int):
        import torch

        picked = {}
        for i in live:
            row = self.rows[i]
            picked[i] = row.selector.pick(self.next_logits[i].clone(), row.tokens, len(row.tokens) < row.prompt.min_len,
                                          eos)
        ends = {i for i in live if picked[i] == eos}
        capped = {i for i in live if i not in ends and len(self.rows[i].tokens) + 1 >= self.rows[i].max_steps}
        ats = self.adapter.processor.special["ats"]
        audio = {}
        for i in ends | capped:
            row = self.rows[i]
            tokens = row.tokens + ([picked[i]] if i not in ends else [])
            audio[i] = self._row_audio(row, [t - ats for t in tokens])
        continuing = [i for i in live if i not in ends and i not in capped]
        new_logits = None
        if continuing:
            num_rows = len(self.rows)
            ids = torch.full((num_rows, 1), self.adapter.processor.special["pad"], dtype=torch.long)
            feed = torch.zeros((num_rows, 1), dtype=torch.long)
            for i in continuing:
                ids[i, 0], feed[i, 0] = picked[i], 1
            new_logits = self._logits(self.stream.forward(self._embed(ids.to(self.device)), feed.to(self.device)))

        def commit() -> list[RowStep]:  # assignments only
            if new_logits is not None:
                index = torch.tensor(continuing, dtype=torch.long)
                self.next_logits[index] = new_logits[index]
            out = []
            for i in live:
                row = self.rows[i]
                if i in ends:
                    row.stop_reason = StopReason.END_OF_SPEECH
                else:
                    row.tokens.append(picked[i])
                    if i in capped:
                        row.stop_reason = StopReason.MAX_NEW_TOKENS
                if row.stop_reason is not None and self._chained(row.prompt):
                    self.adapter.prompt_cache.finish(row.prompt, row.speech_tokens(ats))
                out.append(RowStep(key=row.key, audio=audio.get(i, np.zeros(0, dtype=np.float32)),
                                   stop_reason=row.stop_reason))
            return out

        return commit

    def _row_audio(self, row: _StepRow, speech_tokens: list[int]) -> np.ndarray:
        """A finishing row's waveform (``GLMTTSAdapter.token_to_audio``), the flow's noise drawn from the row's
        generator after its LM draws (upstream: the global RNG, seeded once per segment before the LM)."""
        if not speech_tokens or not self.make_audio:
            return np.zeros(0, dtype=np.float32)
        return self.adapter.token_to_audio([speech_tokens], [row.prompt], [row.selector.generator])[0]

    def release(self, keys) -> None:
        import torch

        gone = {id(k) for k in keys}
        self.waiting = [(k, p) for k, p in self.waiting if id(k) not in gone]
        keep = [i for i, r in enumerate(self.rows) if id(r.key) not in gone]
        if len(keep) == len(self.rows):
            return
        with torch.no_grad():
            self.stream.keep_rows(torch.tensor(keep, dtype=torch.long, device=self.device))
            self.next_logits = self.next_logits[torch.tensor(keep, dtype=torch.long)]
        self.rows = [self.rows[i] for i in keep]


@dataclass
class GLMTTSInputs:
    """``preprocess`` output: one prompt per row."""

    prompts: list[GLMTTSPrompt]


@dataclass
class GLMTTSOutputs:
    """``generate`` output: each row's speech tokens (0-based), whether it hit its cap, and its generator (where
    its LM draws left it: the flow draws from it next)."""

    speech_tokens: list[list[int]]
    hit_max_new_tokens: list[bool]
    generators: list = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------- adapter

class GLMTTSAdapter(TTSAdapter):
    """Adapter for GLM-TTS checkpoints (upstream's ``ckpt/`` + ``frontend/`` folder, or the hub snapshot
    ``zai-org/GLM-TTS``)."""

    family = "glmtts"
    display_name = "GLM-TTS"
    supports_decode_steps = True
    departures = (  # tts_app.adapters.base.ModelFacts.departures
        "the language model decodes rows in batches (left padding masked, positions from the mask) with a KV cache; "
        "upstream decodes one segment at a time",
        "a draw outside the speech tokens (a text token) is replaced by the most likely speech token or the end "
        "token: upstream keeps it and then fails in the flow model",
        "the reference clip reaches the speech tokenizer and CAM++ resampled from the app's reference rate "
        "(torchaudio) instead of from the file's own rate",
        "segment i draws from a generator seeded with seed + i; upstream re-seeds every segment with the same seed",
    )

    def __init__(self, model, processor: GLMTTSProcessor, device: str, dtype: str):
        self._allowed = None
        self._speaker_cache: dict = {}
        #: the long-text prompt cache of every request (upstream's use_cache; not the KV cache)
        self.prompt_cache = PromptCache()
        super().__init__(model, processor, device, dtype)

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_pretrained(cls, id_or_path: str | Path, *, device: str = "cpu", dtype: str = "float32",
                        sampling_rate: int | None = None) -> "GLMTTSAdapter":
        """Load a GLM-TTS checkpoint: ``ckpt/llm`` with transformers' ``LlamaForCausalLM``, the text tokenizer, the
        Whisper-VQ speech tokenizer, CAM++ (onnxruntime) and the prompt mel settings; the flow model and vocoder load
        on first use.

        Args:
            id_or_path: upstream's folder (``ckpt/`` + ``frontend/``), the hub snapshot folder, or ``zai-org/GLM-TTS``.
            device: "cpu", "cuda", "cuda:N".
            dtype: "float32" | "bfloat16" | "float16": the LM's weights and KV cache (upstream: float32).
            sampling_rate: 24000 (HiFT) or 32000 (Vocos2D); None = 24000 when ``ckpt/hift`` exists, else 32000.

        Raises:
            ModelLoadError: not a GLM-TTS checkpoint, a missing or unreadable part, an unknown dtype or rate.
            torch.OutOfMemoryError: the weights do not fit.
        """
        import torch
        from transformers import LlamaForCausalLM

        if dtype not in DTYPE_BYTES:
            raise ModelLoadError(f"dtype {dtype!r} is not supported for {cls.display_name}; "
                                 f"choose one of {sorted(DTYPE_BYTES)}")
        layout = checkpoint_layout(id_or_path)
        if sampling_rate is None:
            sampling_rate = 24000 if (layout.ckpt / "hift").is_dir() or not (layout.ckpt / "vocos2d").is_dir() \
                else 32000
        try:
            model = LlamaForCausalLM.from_pretrained(layout.llm, dtype=getattr(torch, dtype))
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:  # transformers / safetensors raise many types for bad files
            raise ModelLoadError(f"cannot load the GLM-TTS language model in {str(layout.llm)!r}: {exc}. "
                                 "`python -m tts_app make-tiny-model --family glmtts --out DIR` writes a tiny "
                                 "random checkpoint") from exc
        try:
            model = model.to(device).eval()
        except torch.OutOfMemoryError:
            raise
        except (RuntimeError, AssertionError) as exc:
            raise ModelLoadError(f"cannot move {cls.display_name} to device {device!r}: {exc}") from exc
        processor = GLMTTSProcessor(layout, device, sampling_rate)
        return cls(model, processor, device=device, dtype=dtype)

    @classmethod
    def make_tiny_checkpoint(cls, out_dir: str | Path, seed: int = 0) -> Path:
        """Write a tiny random GLM-TTS checkpoint in upstream's folder layout (``tts_app.adapters.glmtts.tiny``)."""
        from tts_app.adapters.glmtts.tiny import write_tiny_checkpoint

        return write_tiny_checkpoint(Path(out_dir), seed)

    def _measure_facts(self) -> ModelFacts:
        config = self.model.config
        heads = int(config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
        texts = ("今天天气很好，我们去公园散步。", "The quick brown fox jumps over the lazy dog.")
        text_positions_per_char = max(len(self.processor.text_tokenizer.encode(t)) / len(t) for t in texts)
        defaults = GenerationDefaults.from_generation_config(
            None,  # upstream reads no generation config: every knob is GLMTTS.inference's / ras_sampling's
            family_defaults={
                "greedy": (False, f"{_UPSTREAM}: sample_method='ras' (samples)"),
                "temperature": (1.0, f"{_UPSTREAM}: temperature=1"),
                "top_p": (RAS_TOP_P, f"{_UPSTREAM}: top_p=0.8"),
                "top_k": (RAS_TOP_K, f"{_UPSTREAM}: top_k=25"),
                "ras_win_len": (RAS_WIN_SIZE, f"{_UPSTREAM}: win_size=10"),
                "ras_win_max_num_repeat": (max(1, int(RAS_WIN_SIZE * RAS_TAU_R)), f"{_UPSTREAM}: tau_r=0.1"),
                "max_new_tokens": (MAX_TOKEN_TEXT_RATIO * 200,
                                   "upstream caps each segment at 20 x its text tokens (max_token_text_ratio); this "
                                   "default only bounds a request that does not give one"),
                "prompt_cache": (PROMPT_CACHE_DEFAULT, "upstream default: glmtts_inference.py --use_cache (default "
                                 "True): earlier segments join the next segment's prompt"),
            },
            absent={"cfg_scale": "GLM-TTS's language model has no guidance"})
        return self._model_facts(
            num_parameters=count_parameters(self.model),
            sampling_rate=self.processor.sampling_rate,
            num_layers=int(config.num_hidden_layers),
            num_kv_heads=int(getattr(config, "num_key_value_heads", None) or heads),
            head_dim=head_dim,
            cfg_multiplier=1,
            frames_per_second=float(SPEECH_TOKENS_PER_S),
            text_positions_per_char=text_positions_per_char,
            reference_positions_per_second=float(SPEECH_TOKENS_PER_S),
            max_segment_chars=MAX_SEGMENT_CHARS,
            generation_defaults=defaults,
            languages=LANGUAGES,
            supports_pinyin=True,
            supports_phoneme_in=True,  # model_text: overrides become upstream's phoneme-in phonemes
            needs_reference_text=True,
        )

    @property
    def allowed_tokens(self):
        """``(vocab,)`` bool CPU: the ids a row may produce (the speech tokens and EOS)."""
        import torch

        if self._allowed is None:
            special = self.processor.special
            allowed = torch.zeros(int(self.model.config.vocab_size), dtype=torch.bool)
            allowed[special["ats"]: special["ate"] + 1] = True
            allowed[special["eoa"]] = True
            self._allowed = allowed
        return self._allowed

    # ------------------------------------------------------------------ text

    def model_text(self, text: str) -> str:
        """The segment text as the LM reads it: pinyin overrides from the front end (``{zhong4}``, ``supports_pinyin``)
        become upstream's phoneme-in phonemes (``<|ZH|><|ONG4|>``, ``tts_app.frontend.phoneme_in``); the rest is
        unchanged, as upstream's default mode (no ``--use_phoneme``) reads it."""
        if "{" not in text:
            return text
        from tts_app.frontend.phoneme_in import phoneme_input_from_rendered

        return phoneme_input_from_rendered(text)

    def count_text_tokens(self, text: str) -> int:
        return len(self.processor.text_tokenizer.encode(self.model_text(text)))

    def unencodable_characters(self, chars) -> set[str]:
        return set()  # byte-level BPE encodes every character

    # ------------------------------------------------------------------ prompts

    def _conditioning(self, audio: np.ndarray):
        """(speech tokens, speaker embedding, prompt mel, clip hash) of a reference clip at ``facts.sampling_rate``,
        cached per clip (most recent 16)."""
        import hashlib

        import torch
        import torchaudio

        key = hashlib.sha1(np.ascontiguousarray(audio, dtype=np.float32).tobytes()).hexdigest()
        if key not in self._speaker_cache:
            from tts_app.adapters.glmtts.speech_tokenizer import SAMPLING_RATE_HZ

            wave = torch.from_numpy(np.asarray(audio, dtype=np.float32))
            wave_16k = torchaudio.functional.resample(wave, self.facts.sampling_rate, SAMPLING_RATE_HZ).numpy()
            tokens = self.processor.speech_tokenizer.tokens(wave_16k)
            embedding = self.processor.speaker_encoder.embedding(wave_16k)
            mel = self.processor.prompt_mel(np.asarray(audio, dtype=np.float32))
            if len(self._speaker_cache) >= 16:
                self._speaker_cache.pop(next(iter(self._speaker_cache)))
            self._speaker_cache[key] = (tokens, embedding, mel, key)
        return self._speaker_cache[key]

    def prompt(self, index: int, row: AdapterRow) -> GLMTTSPrompt:
        """Row -> ``GLMTTSPrompt``.

        Raises:
            InputError: empty text, no reference transcript, or a text with no token.
            ReferenceAudioError: no reference clip, a bad one, or one too short for a speech token.
        """
        if not row.text or not row.text.strip():
            raise InputError(Notice("glm_nothing_readable", row=index, text=row.text))
        audio = row.reference_audio
        if audio is None:
            raise ReferenceAudioError(Notice("glm_needs_audio", row=index))
        audio = np.asarray(audio)
        if audio.ndim != 1 or audio.size == 0:
            raise ReferenceAudioError(Notice("glm_audio_shape", row=index, shape=tuple(audio.shape),
                                             rate_hz=self.facts.sampling_rate))
        if not np.isfinite(audio).all():
            raise ReferenceAudioError(Notice("glm_audio_not_finite", row=index))
        if not row.reference_text or not row.reference_text.strip():
            raise InputError(Notice("glm_needs_text", row=index))
        tokenizer = self.processor.text_tokenizer
        text_ids = tokenizer.encode(self.model_text(row.text))
        if not text_ids:
            raise InputError(Notice("glm_nothing_readable", row=index, text=row.text))
        speech_tokens, embedding, mel, clip_key = self._conditioning(audio)
        if not speech_tokens:
            raise ReferenceAudioError(Notice("glm_no_speech_tokens", row=index))
        reference_text = row.reference_text.strip()
        return GLMTTSPrompt(text_ids=text_ids, prompt_text_ids=tokenizer.encode(reference_text + " "),
                            prompt_speech_tokens=list(speech_tokens), speaker_embedding=embedding, prompt_mel=mel,
                            seed=row.seed, request_id=row.request_id, segment_index=row.segment_index,
                            reference_key=f"{clip_key}:{reference_text}")

    # ------------------------------------------------------------------ batch pipeline

    def preprocess(self, rows: list[AdapterRow], params: SynthesisParams) -> GLMTTSInputs:
        if not rows:
            raise InputError("preprocess got an empty batch; pass at least one row")
        return GLMTTSInputs([self.prompt(i, row) for i, row in enumerate(rows)])

    def start_decode(self, params: SynthesisParams, prefix_cache: PrefixCache | None = None) -> GLMTTSDecodeBatch:
        """An empty running batch (step interface); ``prefix_cache`` is not used (a voice's tokens, embedding and
        mel are cached per clip)."""
        return GLMTTSDecodeBatch(self, self.resolve(params))

    def speech_tokens(self, prompts: list[GLMTTSPrompt], params: SynthesisParams) -> GLMTTSOutputs:
        """The LM stage alone: each prompt's speech tokens (0-based), the rows decoded together in one batch."""
        batch = GLMTTSDecodeBatch(self, self.resolve(params), make_audio=False)
        batch.join(list(range(len(prompts))), prompts)
        while any(row.stop_reason is None for row in batch.rows):
            batch.decode_step()
        ats = self.processor.special["ats"]
        return GLMTTSOutputs([row.speech_tokens(ats) for row in batch.rows],
                             [row.stop_reason is StopReason.MAX_NEW_TOKENS for row in batch.rows],
                             [row.selector.generator for row in batch.rows])

    def generate(self, inputs: GLMTTSInputs, params: SynthesisParams) -> GLMTTSOutputs:
        return self.speech_tokens(inputs.prompts, params)

    def stop_reasons(self, outputs: GLMTTSOutputs, inputs: GLMTTSInputs) -> list[StopReason]:
        return [StopReason.MAX_NEW_TOKENS if hit else StopReason.END_OF_SPEECH for hit in outputs.hit_max_new_tokens]

    def postprocess(self, outputs: GLMTTSOutputs, inputs: GLMTTSInputs) -> list[np.ndarray]:
        return self.token_to_audio(outputs.speech_tokens, inputs.prompts, outputs.generators)

    def token_to_audio(self, speech_tokens: list[list[int]], prompts: list[GLMTTSPrompt],
                       generators: list) -> list[np.ndarray]:
        """Speech tokens (0-based) of rows -> float32 waveforms at ``facts.sampling_rate``: the flow model from the
        row's prompt tokens, prompt mel and speaker embedding (its noise from the row's ``generators[i]``), then the
        vocoder (``flow.py`` / ``vocoder.py``)."""
        import torch

        flow, vocoder = self.processor.token2wav
        out = []
        for tokens, prompt, generator in zip(speech_tokens, prompts, generators):
            if not tokens:
                out.append(np.zeros(0, dtype=np.float32))
                continue
            dev = self.device
            mel, mel_lengths = flow.token_to_mel(
                torch.tensor([tokens], dtype=torch.long, device=dev), torch.tensor([len(tokens)], device=dev),
                torch.tensor([prompt.prompt_speech_tokens], dtype=torch.long, device=dev),
                torch.tensor([len(prompt.prompt_speech_tokens)], device=dev),
                prompt.prompt_mel[None].to(dev), torch.tensor([prompt.prompt_mel.shape[0]], device=dev),
                torch.from_numpy(prompt.speaker_embedding)[None].to(dev), generators=[generator])
            wav, lengths = vocoder(mel, mel_lengths, generators=[generator])
            out.append(wav[0, : int(lengths[0])].float().cpu().numpy())
        return out

    def estimate_positions(self, text_chars: int, reference_s: float, reference_text_chars: int,
                           max_new_tokens: int) -> int:
        """LM KV positions of one row at the end of decoding: reference transcript + text tokens,
        ``<|begin_of_audio|>``, the reference clip's speech tokens (25 per second) and the new speech tokens (at most
        ``min(max_new_tokens, 20 x text tokens)``)."""
        f = self.facts
        text = int(math.ceil((text_chars + reference_text_chars + 1) * f.text_positions_per_char))
        new = min(max_new_tokens, int(math.ceil(text_chars * f.text_positions_per_char)) * MAX_TOKEN_TEXT_RATIO)
        return text + 1 + int(math.ceil(reference_s * SPEECH_TOKENS_PER_S)) + new + 8
