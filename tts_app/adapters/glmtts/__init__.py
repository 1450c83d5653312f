"""GLM-TTS (Zhipu AI, ``zai-org/GLM-TTS``; arXiv 2512.14291) as a model family: our own code around upstream's
checkpoint, loaded by the weights' names (upstream's code is not on PyPI and is never imported).

How upstream speaks (``glmtts_inference.py``, ``llm/glmtts.py``, ``cosyvoice/cli/frontend.py``):

1. Reference clip -> speech tokens (``ckpt/speech_tokenizer``, a Whisper encoder cut at a vector quantiser, 16 kHz
   in, 25 tokens/s: ``speech_tokenizer.py``), a CAM++ speaker embedding (``frontend/campplus.onnx``) and prompt mel
   features (``speaker.py``).
2. A Llama LM (``ckpt/llm``, transformers' ``LlamaForCausalLM``) reads ``[reference text][text]<|begin_of_audio|>
   [reference speech tokens]`` (text ids from ``ckpt/vq32k-phoneme-tokenizer``: ``text_tokenizer.py``; speech token k
   is text id ``<|audio_0|> + k``) and decodes speech tokens until ``<|user|>``, sampled "ras" (repetition-aware
   nucleus sampling, top-p 0.8, top-k 25, window 10), at least 2 and at most 20 x the text's tokens (EOS masked
   before the minimum). This is the stage the engine batches (``adapter.GLMTTSDecodeBatch``, step interface).
3. A DiT flow model (``ckpt/flow``) turns the speech tokens + the reference's tokens, mel and embedding into a mel,
   and a vocoder makes the waveform: HiFT at 24 kHz or Vocos2D (TorchScript) at 32 kHz (``flow.py``, ``vocoder.py``).

Long texts: upstream cuts the text into pieces of 30-60 characters and, with ``--use_cache`` (its default), puts the
earlier pieces' text and speech tokens into the next piece's prompt (a *prompt cache*, not the KV cache).
"""

from tts_app.adapters.glmtts.adapter import GLMTTSAdapter

__all__ = ["GLMTTSAdapter"]
