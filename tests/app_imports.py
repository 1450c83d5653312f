"""What ``python app.py`` imports and loads lazily before it serves, imported once per test session by the forkserver
that ``tests.ui_app.start_app`` forks its apps from (``multiprocessing``'s ``forkserver`` start method, preloading
this module). Each forked app then pays its model load and UI build only.

Measured with ``python -X importtime app.py --model <tiny VibeVoice>`` on 2 shared cores (load average 11-15):
132 s of a 158 s start were imports (gradio 44 s, transformers 26 s, torch); after preloading the top-level modules,
the modules transformers loads lazily (modeling_utils, activations, the VibeVoice and Dia model classes, diffusers)
and the front end's dictionaries (wetext, pypinyin, jieba; ``tts_app.frontend.warm_up``) still took 35 s of each
start, so they are loaded here too; with them a start took 14 s (load average 10; the first, with the forkserver's
own imports, 111 s). IndexTTS 2's package (13 s) is not: one test module starts that family.

Nothing here starts a thread (a fork copies only the forking thread).
"""

from __future__ import annotations

import diffusers  # noqa: F401
import gradio  # noqa: F401
import pandas.io.formats.style  # noqa: F401
import pydantic.v1  # noqa: F401
import scipy.stats  # noqa: F401
import torch  # noqa: F401
import transformers
import transformers.modeling_utils  # noqa: F401
import transformers.processing_utils  # noqa: F401
import uvicorn  # noqa: F401

import tts_app.adapters.csm  # noqa: F401
import tts_app.adapters.dia  # noqa: F401
import tts_app.adapters.higgs  # noqa: F401
import tts_app.adapters.vibevoice  # noqa: F401
import tts_app.audio.transcribe  # noqa: F401
import tts_app.runtime  # noqa: F401
import tts_app.server.app  # noqa: F401
import tts_app.ui.context  # noqa: F401
import tts_app.server.main  # noqa: F401
import tts_app.ui.mount  # noqa: F401
import tts_app.ui.layout  # noqa: F401
from tts_app.frontend import warm_up

# transformers' lazy attributes: the model classes the launched tests' families load
transformers.VibeVoiceForConditionalGeneration, transformers.VibeVoiceConfig  # noqa: B018
transformers.DiaForConditionalGeneration, transformers.DacModel  # noqa: B018
import transformers.models.vibevoice_acoustic_tokenizer.modeling_vibevoice_acoustic_tokenizer  # noqa: E402,F401

warm_up()
