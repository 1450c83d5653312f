"""Automatic transcription of reference audio (the "reference text" Dia needs and Higgs / CSM clone better with),
through transformers' automatic-speech-recognition pipeline and a Whisper checkpoint.

    transcriber = Transcriber("openai/whisper-large-v3-turbo", device="cuda")   # nothing loads yet
    text = transcriber.transcribe(prepared.audio.samples, prepared.audio.sampling_rate)   # loads on first use

Default checkpoint: ``openai/whisper-large-v3-turbo`` (809 M parameters, 1.6 GB in float16): large-v3's encoder with
a 4-layer decoder, about as accurate as large-v3 on Chinese and English at several times its speed (OpenAI's model
card) — the checkpoint F5-TTS uses for the same job. ``--asr-model`` picks another (``openai/whisper-small`` for
a small machine) or ``none``. It runs on the TTS model's device, loaded lazily once and shared by every caller.

When it runs (``fill_transcript``, the same for the web app, ``synth`` and ``batch``): for a reference that has no
transcript, when the family needs one (``ModelFacts.needs_reference_text``: Dia), or for every family when
``--asr-model`` was given explicitly (Higgs and CSM clone better with a transcript). The transcript is used for the
request, stored in its sidecar (``reference.text``) and named in a warning, so the user can check and correct it.
``make_tiny_whisper`` writes a tiny random Whisper (real architecture and file layout) for offline tests.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np

from tts_app.errors import ModelLoadError
from tts_app.frontend.messages import Notice, message_of, register

DEFAULT_ASR_MODEL = "openai/whisper-large-v3-turbo"
#: ``--asr-model`` value that turns automatic transcription off
NO_ASR = "none"
#: Whisper's input rate (its feature extractor's ``sampling_rate``).
WHISPER_SAMPLING_RATE = 16000


# Messages in English and Chinese (``tts_app.frontend.messages``).
EN: dict[str, str] = {
    "asr_off": "automatic transcription is off (--asr-model none); type the reference text, or start with "
               "--asr-model ID_OR_DIR (a Whisper checkpoint)",
    "asr_cannot_load": "cannot load the speech-recognition model {model!r} ({error}); type the reference text "
                       "yourself, or start with --asr-model DIR (a local Whisper checkpoint) or --asr-model none",
    "asr_no_words": "the speech-recognition model {model!r} heard no words in the reference audio; give its "
                    "transcript yourself",
    "asr_transcribed": "reference text transcribed automatically by {model}: {text!r} (give the transcript yourself "
                       "if it is wrong)",
}
ZH: dict[str, str] = {
    "asr_off": "自动识别已关闭（--asr-model none）；请手动输入参考文本，或用 --asr-model ID_OR_DIR（Whisper 模型）启动",
    "asr_cannot_load": "无法加载语音识别模型 {model!r}（{error}）；请手动输入参考文本，或用 --asr-model DIR（本地 Whisper "
                       "模型）或 --asr-model none 启动",
    "asr_no_words": "语音识别模型 {model!r} 在参考音频中没有听到任何话；请手动输入它的文字内容",
    "asr_transcribed": "参考文本已由 {model} 自动识别：{text!r}（如有错误请手动修改）",
}
register(__name__, EN, ZH)


class AsrUnavailableError(ModelLoadError):
    """No speech-recognition model can be loaded; the message says how to give one or type the transcript."""


class Transcriber:
    """A lazily loaded transformers ASR pipeline (thread-safe; one load for everyone).

    Args:
        model_id: hub id or local folder of a Whisper checkpoint; None or "none" = transcription off.
        device: "cpu", "cuda", "cuda:N".
        for_every_family: ``fill_transcript`` transcribes for every family, not only those that need a transcript.
    """

    def __init__(self, model_id: str | None = DEFAULT_ASR_MODEL, device: str = "cpu", *,
                 for_every_family: bool = False):
        self.model_id = None if model_id in (None, "", NO_ASR) else str(model_id)
        self.device = device
        self.for_every_family = bool(for_every_family)
        self._pipeline = None
        self._error: Notice | None = None
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.model_id is not None

    def _load(self):
        with self._lock:
            if self._pipeline is not None:
                return self._pipeline
            if self.model_id is None:
                raise AsrUnavailableError(Notice("asr_off"))
            if self._error is not None:
                raise AsrUnavailableError(self._error)
            import torch
            from transformers import pipeline

            dtype = torch.float16 if str(self.device).startswith("cuda") else torch.float32
            try:
                self._pipeline = pipeline("automatic-speech-recognition", model=self.model_id, device=self.device,
                                          dtype=dtype)
            except Exception as exc:  # noqa: BLE001 - offline, missing files, not a Whisper checkpoint, ...
                self._error = Notice("asr_cannot_load", model=self.model_id, error=f"{type(exc).__name__}: "
                                     f"{str(exc).splitlines()[0][:200] if str(exc) else ''}")
                raise AsrUnavailableError(self._error) from exc
            return self._pipeline

    def transcribe(self, samples: np.ndarray, sampling_rate: int, *, max_new_tokens: int = 128,
                   language: str | None = None) -> str:
        """The transcript of a clip (whitespace trimmed).

        Args:
            samples: float32 mono ``(num_samples,)``; resampled to 16 kHz (torchaudio) for Whisper.
            sampling_rate: Hz of ``samples``.
            max_new_tokens: cap on decoded tokens (a reference clip is at most ~15 s, well under it).
            language: decode in this language ("zh", "en"; Whisper's ``generate(language=...)``) when the checkpoint
                knows it; None = detect.

        Raises:
            AsrUnavailableError: transcription is off or the checkpoint cannot be loaded.
        """
        import torch
        import torchaudio.functional as F

        from tts_app.metrics import ASR_TRANSCRIPTIONS

        try:
            asr = self._load()
        except AsrUnavailableError:
            ASR_TRANSCRIPTIONS.labels(outcome="unavailable").inc()
            raise
        audio = torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32).reshape(-1))
        if int(sampling_rate) != WHISPER_SAMPLING_RATE:
            audio = F.resample(audio, int(sampling_rate), WHISPER_SAMPLING_RATE)
        try:
            generate_kwargs = {"max_new_tokens": max_new_tokens}
            # only a multilingual checkpoint knows languages (an English-only one, *.en, has no lang_to_id)
            lang_to_id = getattr(getattr(asr.model, "generation_config", None), "lang_to_id", None) or {}
            if language is not None and f"<|{language}|>" in lang_to_id:
                generate_kwargs["language"] = language
            out = asr({"raw": audio.numpy(), "sampling_rate": WHISPER_SAMPLING_RATE}, generate_kwargs=generate_kwargs)
        except Exception:
            ASR_TRANSCRIPTIONS.labels(outcome="failed").inc()
            raise
        ASR_TRANSCRIPTIONS.labels(outcome="ok").inc()
        return str(out.get("text", "")).strip()


def transcriber_from(asr_model: str | None, device: str) -> Transcriber:
    """The ``Transcriber`` of an ``--asr-model`` value: None (not given) = ``DEFAULT_ASR_MODEL``, used only for
    families that need a transcript; an id or folder = that checkpoint, used for every family; "none" = off."""
    return Transcriber(DEFAULT_ASR_MODEL if asr_model is None else asr_model, device,
                       for_every_family=asr_model is not None)


def fill_transcript(transcriber: Transcriber | None, reference, reference_text: str | None, *,
                    needs_reference_text: bool) -> tuple[str | None, list[str]]:
    """The reference text a request should use, and warnings for the user.

    Args:
        transcriber: the shared ``Transcriber``, or None (no automatic transcripts).
        reference: the ``PreparedReference`` (cleaned clip), or None (no reference: nothing to transcribe).
        reference_text: the transcript known so far (typed, or a saved voice's), or None / "".
        needs_reference_text: ``ModelFacts.needs_reference_text`` of the loaded family.

    Returns:
        (``reference_text`` when given, else the ASR transcript of the cleaned clip when ``transcriber`` runs for
        this family (module docstring), else None; a warning naming the transcript, or saying why none could be
        made). Never raises for an ASR failure: the request goes on without a transcript.
    """
    if reference_text or reference is None or transcriber is None or not transcriber.enabled:
        return reference_text or None, []
    if not (needs_reference_text or transcriber.for_every_family):
        return None, []
    try:
        text = transcriber.transcribe(reference.audio.samples, reference.audio.sampling_rate)
    except AsrUnavailableError as exc:
        return None, [message_of(exc)]
    if not text:
        return None, [Notice("asr_no_words", model=transcriber.model_id)]
    return text, [Notice("asr_transcribed", model=transcriber.model_id, text=text)]


def make_tiny_whisper(out_dir: str | Path, seed: int = 0) -> Path:
    """Write a tiny random Whisper checkpoint (``WhisperForConditionalGeneration`` + ``WhisperProcessor``: byte-level
    BPE tokenizer with Whisper's special tokens, 16 mel bins, 1 encoder / 1 decoder layer of width 16) with
    ``save_pretrained``, for offline tests of the pipeline plumbing (its "transcripts" are random letters).
    Returns ``out_dir``."""
    import torch
    from transformers import (WhisperConfig, WhisperFeatureExtractor, WhisperForConditionalGeneration,
                              WhisperProcessor, WhisperTokenizer)
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    byte_chars = list(bytes_to_unicode().values())
    (out / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate(byte_chars)}), encoding="utf-8")
    (out / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    specials = ["<|startoftranscript|>", "<|en|>", "<|zh|>", "<|translate|>", "<|transcribe|>", "<|startoflm|>",
                "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]
    tokenizer = WhisperTokenizer(str(out / "vocab.json"), str(out / "merges.txt"), unk_token="<|endoftext|>",
                                 bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tokenizer.add_special_tokens({"additional_special_tokens": specials})
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ["<|endoftext|>", *specials]}
    config = WhisperConfig(vocab_size=len(tokenizer), num_mel_bins=16, d_model=16, encoder_layers=1,
                           decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                           encoder_ffn_dim=32, decoder_ffn_dim=32, max_source_positions=1500,
                           max_target_positions=448, pad_token_id=ids["<|endoftext|>"],
                           bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|endoftext|>"],
                           decoder_start_token_id=ids["<|startoftranscript|>"])
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(config).eval()
    generation = model.generation_config
    generation.decoder_start_token_id = ids["<|startoftranscript|>"]
    generation.no_timestamps_token_id = ids["<|notimestamps|>"]
    generation.lang_to_id = {"<|en|>": ids["<|en|>"], "<|zh|>": ids["<|zh|>"]}
    generation.task_to_id = {"transcribe": ids["<|transcribe|>"], "translate": ids["<|translate|>"]}
    generation.is_multilingual = True
    generation.forced_decoder_ids = None
    generation.begin_suppress_tokens = [ids["<|endoftext|>"]]
    letters = {tokenizer.convert_tokens_to_ids(c) for c in "abcdefghijklmnopqrstuvwxyz"} | \
        {tokenizer.convert_tokens_to_ids(byte_chars[ord(" ")])}
    # random letters and spaces only (readable plumbing output), and the end token; no special token mid-text
    generation.suppress_tokens = [i for i in range(256) if i not in letters] + [ids[t] for t in specials]
    generation.max_length = 448
    model.save_pretrained(out)
    WhisperProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=16), tokenizer=tokenizer).save_pretrained(out)
    return out
