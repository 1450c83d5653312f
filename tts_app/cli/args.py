"""Command-line flags shared by ``app.py``, ``synth`` and ``batch`` (one definition each, as vLLM's ``EngineArgs``),
argparse ``type=`` parsers, and output-path checks that run before any model is loaded (so a typo costs a second, not
a model load plus a synthesis).

    parser = CliParser(prog="python -m tts_app synth")
    add_engine_args(parser)                      # --model --device --dtype --max-batch-size --memory-budget ...
    add_generation_args(parser)                  # --seed --greedy --no-kv-cache --temperature ... (synth, batch)
    add_voice_args(parser)                       # --voices-dir (app.py, synth, batch)
    add_cluster_args(parser)                     # --ray --num-workers --gpus-per-worker ... (batch, app.py)
    add_lang_arg(parser)                         # --lang zh|en (app.py, synth, batch, frontend, reference)
    args = parse_cli(parser, argv)               # an int is the exit status (usage error 2, --help 0)
    engine_args = engine_args_from(args)         # EngineArgs(model=ModelConfig, engine=EngineConfig)
    params = params_from_args(args)              # SynthesisParams with only the flags that were given
    cluster = cluster_config_from(args)          # ClusterConfig, or None without --ray

Every flag defaults to ``None`` ("not given"), so the value comes from the config dataclass (``tts_app.config``) or
``SynthesisParams`` (and, for generation knobs, from the loaded checkpoint): each default lives there, once. Values
are checked by the dataclasses' own ``__post_init__``; a ``ConfigError`` becomes a one-line usage error naming the
flag (``CliParser.error``: exit status 2, no traceback).

Everything here is pure Python (no torch) except ``check_device_available``, which imports torch only for a CUDA
device.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from tts_app.config import (COMPILE_MODES, DEFAULT_MODEL_ID, DEVICES, DTYPES, REFERENCE_TRANSPORTS, ClusterConfig, EngineArgs,
                            EngineConfig, ModelConfig, check_device)
from tts_app.errors import ConfigError, InputError

# "-5MB", "-0.5GiB", "-3": values that argparse would otherwise take for an unknown option (it only accepts plain
# negative numbers such as "-3" as values, and only when no option looks like one).
_NEGATIVE_VALUE = re.compile(r"^-\d")


class CliParser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose usage errors are one line on stderr (``prog: error: message (see prog
    --help)``) with exit status 2, instead of the usage block plus the message."""

    def error(self, message: str):  # argparse's hook for every usage error
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def parse_cli(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace | int:
    """``parser.parse_args(argv)`` with negative sizes joined to their flag (``join_negative_values``). Returns the
    exit status instead of raising ``SystemExit``: 2 after a usage error, 0 after ``--help``."""
    try:
        return parser.parse_args(join_negative_values(list(argv), ("--memory-budget",)))
    except SystemExit as exc:  # argparse exits 2 on bad arguments, 0 on --help
        return int(exc.code or 0)


def _whole_number(text: str, minimum: int) -> int:
    """``text`` as an int >= ``minimum``; ``argparse.ArgumentTypeError`` (argparse's message) otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{value} must be >= {minimum}")
    return value


def positive_int(text: str) -> int:
    """argparse ``type=``: a whole number >= 1.

    Raises:
        argparse.ArgumentTypeError: not a whole number, or < 1.
    """
    return _whole_number(text, 1)


def memory_budget(text: str) -> int:
    """argparse ``type=``: a memory budget such as ``2GiB`` or ``512MB`` -> bytes (> 0). Units: see
    ``tts_app.engine.memory.parse_size``.

    Raises:
        argparse.ArgumentTypeError: negative, zero, or not a size.
    """
    from tts_app.engine.memory import parse_size  # pure Python; torch stays unimported

    if str(text).strip().startswith("-"):
        raise argparse.ArgumentTypeError(f"memory budget must be positive, got {text!r}; write e.g. 2GiB or 512MB")
    try:
        value = parse_size(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"memory budget must be positive, got {text!r}; write e.g. 2GiB or 512MB")
    return value


def file_size(text: str) -> int:
    """argparse ``type=``: a file size such as ``100MB`` or ``1GB`` -> bytes (> 0); units as
    ``tts_app.engine.memory.parse_size``.

    Raises:
        argparse.ArgumentTypeError: negative, zero, or not a size.
    """
    from tts_app.engine.memory import parse_size  # pure Python; torch stays unimported

    try:
        value = parse_size(text) if not str(text).strip().startswith("-") else 0
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive, got {text!r}; write e.g. 100MB or 1GB")
    return value


def join_negative_values(argv: list[str], flags: tuple[str, ...]) -> list[str]:
    """``["--memory-budget", "-5MB"]`` -> ``["--memory-budget=-5MB"]`` for the given flags, so the flag's ``type=``
    reports what is wrong with the value instead of argparse saying "expected one argument"."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] in flags and i + 1 < len(argv) and _NEGATIVE_VALUE.match(argv[i + 1]):
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def _nearest_existing(path: Path) -> Path:
    """``path`` itself or its closest ancestor that exists (``path`` is absolute)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(path.anchor)


def _check_creatable_in(folder: Path, flag: str, value: str) -> None:
    """``folder`` (the folder ``value`` goes in) exists and is writable, or can be created."""
    existing = _nearest_existing(folder.absolute())
    if not existing.is_dir():
        raise InputError(f"{flag} {value!r}: {str(existing)!r} is a file, not a folder, so nothing can be written "
                         "below it; choose another path")
    if not os.access(existing, os.W_OK | os.X_OK):
        action = "write into" if existing == folder.absolute() else "create folders in"
        raise InputError(f"{flag} {value!r}: no permission to {action} {str(existing)!r}; choose a writable "
                         "folder")


def check_output_file(value: str, flag: str, example_name: str = "out.wav") -> None:
    """Fail fast when an output file cannot be written: it is a folder, or its folder is not writable / cannot be
    created (a file stands in the way, no permission).

    Raises:
        InputError: naming the flag, the path and the fix.
    """
    path = Path(value)
    if path.is_dir():
        raise InputError(f"{flag} {value!r} is a folder; give a file name, e.g. {str(path / example_name)!r}")
    _check_creatable_in(path.parent, flag, value)


def check_output_dir(value: str, flag: str) -> None:
    """Fail fast when an output folder cannot be used: it is a file, or it is not writable / cannot be created.

    Raises:
        InputError: naming the flag, the path and the fix.
    """
    path = Path(value)
    if path.exists() and not path.is_dir():
        raise InputError(f"{flag} {value!r} is a file, not a folder; give a folder (it is created if missing)")
    _check_creatable_in(path, flag, value)


def non_negative_int(text: str) -> int:
    """argparse ``type=``: a whole number >= 0.

    Raises:
        argparse.ArgumentTypeError: not a whole number, or < 0.
    """
    return _whole_number(text, 0)


def number(text: str) -> float:
    """argparse ``type=``: a finite decimal number (ranges are checked by the dataclass that receives it)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def number_list(text: str) -> tuple[float, ...]:
    """argparse ``type=``: comma-separated finite numbers, e.g. ``2.5,1.8,3``."""
    parts = [p.strip() for p in text.split(",")]
    if not all(parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of numbers (e.g. 2.5,1.8,3)")
    return tuple(number(p) for p in parts)


def device_arg(text: str) -> str:
    """argparse ``type=``: "auto", "cpu", "cuda" or "cuda:N" (``tts_app.config.check_device``)."""
    try:
        return check_device(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# --------------------------------------------------------------------------------------------- model and engine


#: flag of each config field set by ``add_engine_args`` (for messages naming the flag)
ENGINE_FLAGS: dict[str, str] = {
    "model_id": "--model", "device": "--device", "dtype": "--dtype", "max_batch_size": "--max-batch-size",
    "memory_budget_bytes": "--memory-budget", "simulate_oom_above_batch": "--simulate-oom-above-batch",
    "simulate_step_delay_ms": "--simulate-step-delay-ms", "quality_asr": "--quality-asr", "compile": "--compile",
}


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    """Add the model and engine flags every command shares (all default to None = the config's default)."""
    model, engine = ModelConfig(), EngineConfig()
    g = parser.add_argument_group("model and engine (the same flags for app.py, synth and batch)")
    g.add_argument("--model", default=None, metavar="ID_OR_DIR",
                   help=f"hub id or local checkpoint folder (default {DEFAULT_MODEL_ID}); `python -m tts_app "
                        "make-tiny-model` writes a tiny offline one")
    g.add_argument("--device", type=device_arg, default=None, metavar="|".join(DEVICES) + "|cuda:N",
                   help=f"where the model runs (default {model.device}: cuda when available, else cpu)")
    g.add_argument("--dtype", choices=DTYPES, default=None,
                   help=f"weights and KV cache dtype (default {model.dtype}: bfloat16 on cuda, float32 on cpu)")
    g.add_argument("--max-batch-size", "--batch-size", dest="max_batch_size", type=positive_int, default=None,
                   metavar="N", help=f"most segments in one forward call (default {engine.max_batch_size})")
    g.add_argument("--memory-budget", type=memory_budget, default=None, metavar="SIZE",
                   help="memory for KV cache + activations, e.g. 2GiB or 512MB (default: from free device memory "
                        "on CUDA, unlimited on CPU)")
    g.add_argument("--compile", choices=COMPILE_MODES, default=None,
                   help=f"graph-captured decode step (torch.compile) for the step-wise families (default "
                        f"{engine.compile}: on for cuda, off for cpu)")
    g.add_argument("--simulate-oom-above-batch", type=positive_int, default=None, metavar="N",
                   help="testing aid: raise a real out-of-memory error for batches larger than N")
    g.add_argument("--simulate-step-delay-ms", type=float, default=None, metavar="MS",
                   help="testing aid: wait MS milliseconds before each decode step (watch streaming on a fast "
                        "machine; models with step-wise decoding only)")
    g.add_argument("--quality-asr", default=None, metavar="BACKEND:ID_OR_DIR",
                   help="speech recogniser that scores takes under --take-check: transformers:ID_OR_DIR (a Whisper "
                        "checkpoint) or faster-whisper:ID_OR_DIR (CTranslate2 files, several times faster on a CPU) "
                        f"(default {engine.quality_asr}; loaded on first use, on the model's device)")


def _given(args: argparse.Namespace, names: dict[str, str]) -> dict:
    """{field: value} for the namespace attributes in ``names`` (attribute -> field) that were given (not None)."""
    out = {}
    for attr, field_name in names.items():
        value = getattr(args, attr, None)
        if value is not None:
            out[field_name] = value
    return out


def _usage_error(exc: ConfigError, flags: dict[str, str]) -> InputError:
    flag = flags.get(exc.field)
    return InputError(f"{flag}: {exc}" if flag else str(exc))


def engine_args_from(args: argparse.Namespace, **engine_overrides) -> EngineArgs:
    """``EngineArgs`` from the flags of ``add_engine_args``: a flag not given keeps the dataclass default.

    Args:
        args: parsed namespace.
        engine_overrides: ``EngineConfig`` fields a command sets itself (``synth`` runs one request, so it waits
            for no batch-mates: ``wait_window_ms=0``).

    Raises:
        InputError: a value the config refuses, naming the flag.
    """
    try:
        model = ModelConfig(**_given(args, {"model": "model_id", "device": "device", "dtype": "dtype"}))
        engine = EngineConfig(**{**_given(args, {"max_batch_size": "max_batch_size",
                                                 "memory_budget": "memory_budget_bytes",
                                                 "simulate_oom_above_batch": "simulate_oom_above_batch",
                                                 "simulate_step_delay_ms": "simulate_step_delay_ms",
                                                 "quality_asr": "quality_asr",
                                                 "compile": "compile"}),
                                 **engine_overrides})
    except ConfigError as exc:
        raise _usage_error(exc, ENGINE_FLAGS) from None
    return EngineArgs(model=model, engine=engine)


# --------------------------------------------------------------------------------------------- Ray cluster


def non_negative_number(text: str) -> float:
    """argparse ``type=``: a finite number >= 0."""
    value = number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value:g} must be >= 0")
    return value


def positive_number(text: str) -> float:
    """argparse ``type=``: a finite number > 0."""
    value = number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value:g} must be > 0")
    return value


#: flag of each ``ClusterConfig`` field set by ``add_cluster_args``
CLUSTER_FLAGS: dict[str, str] = {
    "address": "--ray", "num_workers": "--num-workers", "gpus_per_worker": "--gpus-per-worker",
    "cpus_per_worker": "--cpus-per-worker", "reference_transport": "--ray-references",
    "object_store_memory_bytes": "--ray-object-store",
}
#: ``--ray`` given without a value
_RAY_DEFAULT_ADDRESS = ""


def add_cluster_args(parser: argparse.ArgumentParser) -> None:
    """Add the Ray flags (``batch`` and ``app.py``): JSONL job lines run on Ray workers, one model + engine each
    (``tts_app.jobs.cluster``). All default to None = not given (``ClusterConfig``'s defaults)."""
    defaults = ClusterConfig()
    g = parser.add_argument_group("Ray cluster (job lines on several GPUs or machines; needs "
                                  "`pip install -r requirements-ray.txt`)")
    g.add_argument("--ray", nargs="?", const=_RAY_DEFAULT_ADDRESS, default=None, metavar="ADDRESS|auto|local",
                   help="run job lines on Ray workers: HOST:PORT of a cluster's head (`ray start --head` prints it), "
                        "auto (the cluster `ray start` runs on this machine), local (a new one on this machine, "
                        "stopped at the end); no value: $RAY_ADDRESS if set, else local")
    g.add_argument("--num-workers", type=positive_int, default=None, metavar="N",
                   help="Ray workers, each loading the model (default: one per GPU of the cluster, 1 without GPUs)")
    g.add_argument("--gpus-per-worker", type=non_negative_number, default=None, metavar="G",
                   help="GPUs each worker reserves; 0.5 puts two workers on a GPU (default: 1 when the cluster has "
                        "GPUs, else 0)")
    g.add_argument("--cpus-per-worker", type=positive_number, default=None, metavar="C",
                   help=f"CPUs each worker reserves, also its torch threads (default {defaults.cpus_per_worker:g})")
    g.add_argument("--ray-references", choices=REFERENCE_TRANSPORTS, default=None,
                   help=f"send: ship reference audio bytes to the workers; shared: send paths (every machine mounts "
                        f"the same folders) (default {defaults.reference_transport})")
    g.add_argument("--ray-object-store", type=memory_budget, default=None, metavar="SIZE",
                   help="object store size of a cluster started here, e.g. 2GiB (default: Ray's, 30%% of RAM)")


def cluster_config_from(args: argparse.Namespace) -> ClusterConfig | None:
    """``ClusterConfig`` from the flags of ``add_cluster_args``, or None when ``--ray`` was not given.

    Raises:
        InputError: a Ray flag without ``--ray``, or a value the config refuses (naming the flag).
    """
    given = _given(args, {"num_workers": "num_workers", "gpus_per_worker": "gpus_per_worker",
                          "cpus_per_worker": "cpus_per_worker", "ray_references": "reference_transport",
                          "ray_object_store": "object_store_memory_bytes"})
    address = getattr(args, "ray", None)
    if address is None:
        if given:
            flags = ", ".join(CLUSTER_FLAGS[name] for name in given)
            raise InputError(f"{flags} only apply with --ray; add --ray (e.g. --ray local) or drop them")
        return None
    try:
        return ClusterConfig(address=None if address == _RAY_DEFAULT_ADDRESS else address, **given)
    except ConfigError as exc:
        raise _usage_error(exc, CLUSTER_FLAGS) from None


# --------------------------------------------------------------------------------------------- generation


#: flag of each ``SynthesisParams`` field set by ``add_generation_args``
GENERATION_FLAGS: dict[str, str] = {
    "seed": "--seed", "greedy": "--greedy", "use_cache": "--no-kv-cache", "prompt_cache": "--prompt-cache",
    "temperature": "--temperature",
    "top_p": "--top-p", "top_k": "--top-k", "cfg_scale": "--cfg-scale", "max_new_tokens": "--max-new-tokens",
    "num_beams": "--num-beams", "length_penalty": "--length-penalty", "num_diffusion_steps": "--diffusion-steps",
    "max_segment_chars": "--max-segment-chars", "pause_between_segments_ms": "--pause-ms",
    "speed": "--speed", "duration_s": "--duration-s", "loudness_lufs": "--loudness",
    "chapter_pause_ms": "--chapter-pause-ms", "segment_durations_s": "--segment-durations-s",
    "reference_cleanup": "--reference-cleanup", "segment_context": "--segment-context",
    "take_check": "--take-check",
    "take_max_rerolls": "--take-max-rerolls", "take_max_error_rate": "--take-max-error-rate",
    "take_min_similarity": "--take-min-similarity",
}


def add_generation_args(parser: argparse.ArgumentParser, title: str = "generation settings") -> None:
    """Add the per-request generation flags (``synth``; ``batch``, where a line's own fields override them). A
    flag not given means "the model's default" (from the checkpoint's generation config)."""
    from tts_app.request import SynthesisParams

    defaults = SynthesisParams()
    g = parser.add_argument_group(title)
    g.add_argument("--seed", type=int, default=None,
                   help=f"base seed; segment i uses seed + i (default {defaults.seed})")
    g.add_argument("--greedy", action="store_const", const=True, default=None,
                   help="greedy decoding (deterministic) instead of sampling")
    g.add_argument("--no-kv-cache", dest="use_cache", action="store_const", const=False, default=None,
                   help="decode without the KV cache (slower, same output)")
    g.add_argument("--prompt-cache", action=argparse.BooleanOptionalAction, default=None,
                   help="long-text prompt cache, for models that have one (GLM-TTS: upstream's --use_cache, on by "
                        "default): each finished segment's text and speech join the next segment's prompt, for a "
                        "continuous voice; the request's segments then run one after another. Not the KV cache "
                        "(--no-kv-cache)")
    g.add_argument("--temperature", type=number, default=None, help="sampling temperature (> 0; default: model's)")
    g.add_argument("--top-p", type=number, default=None, help="nucleus sampling share, (0, 1] (default: model's)")
    g.add_argument("--top-k", type=positive_int, default=None, help="top-k sampling (default: model's)")
    g.add_argument("--cfg-scale", type=number, default=None,
                   help="classifier-free guidance scale, for models that have it (default: model's)")
    g.add_argument("--max-new-tokens", type=positive_int, default=None,
                   help="cap on decode steps per segment (default: model's)")
    g.add_argument("--num-beams", type=positive_int, default=None,
                   help="beam search width, for models that have it (IndexTTS 2: 3, sampled); 1 = no beams "
                        "(default: model's)")
    g.add_argument("--length-penalty", type=number, default=None,
                   help="beam search length penalty (exponent of the length a beam's score is divided by; default: "
                        "model's)")
    g.add_argument("--diffusion-steps", dest="num_diffusion_steps", type=positive_int, default=None,
                   help="Euler steps of the flow-matching stage, for models that have one (IndexTTS 2's s2mel: 25; "
                        "12 = the fast preset, about half that stage's time, a slightly coarser mel; default: "
                        "model's)")
    g.add_argument("--max-segment-chars", type=int, default=None,
                   help="your own character limit per segment instead of the model's: sentences are packed into one "
                        "segment up to it (default 0: the model's own limit, from its decode cap; IndexTTS 2's 120 "
                        "text tokens apply either way)")
    from tts_app.config import REFERENCE_CLEANUPS

    g.add_argument("--reference-cleanup", choices=REFERENCE_CLEANUPS, default=None,
                   help="what is done to the reference clip: auto = checks and report, only what the model's own "
                        "tool does (decode, mono, resample); full = trim to the speech, 50 Hz high-pass, hum notch, "
                        "long pauses shortened, loudness -20 dBFS; off = as given "
                        f"(default {defaults.reference_cleanup})")
    g.add_argument("--pause-ms", dest="pause_between_segments_ms", type=non_negative_int, default=None,
                   help=f"silence between segments in ms (default {defaults.pause_between_segments_ms})")
    from tts_app.config import MAX_LOUDNESS_LUFS, MAX_SPEED, MIN_LOUDNESS_LUFS, MIN_SPEED

    g.add_argument("--speed", type=number, default=None,
                   help=f"tempo x the model's own pace, {MIN_SPEED}-{MAX_SPEED} (1.25 = 20 %% shorter), pitch kept")
    g.add_argument("--duration-s", type=number, default=None, metavar="S",
                   help="make the whole audio exactly S seconds long (dubbing); not with --speed")
    g.add_argument("--loudness", dest="loudness_lufs", type=number, default=None, metavar="LUFS",
                   help=f"normalise the loudness to LUFS (ITU-R BS.1770), {MIN_LOUDNESS_LUFS:g}..{MAX_LOUDNESS_LUFS:g}"
                        "; e.g. -23 (EBU R128) or -16 (podcasts); default: as generated")
    g.add_argument("--segment-durations-s", type=number_list, default=None, metavar="S1,S2,...",
                   help="dubbing: a target length in seconds for each line of the text, in order (each line is one "
                        "segment, stretched to fit, pitch kept); not with --speed / --duration-s")
    g.add_argument("--chapter-pause-ms", type=non_negative_int, default=None,
                   help=f"silence after each chapter ('# Title' lines) in ms (default {defaults.chapter_pause_ms})")
    g.add_argument("--segment-context", action="store_const", const=True, default=None,
                   help="long text in one voice: each segment hears the earlier segments' text and audio as context "
                        "(CSM, Higgs Audio v2; GLM-TTS: its prompt cache; the segments then run one after another; other models ignore it with "
                        "a warning)")
    from tts_app.quality.policy import TAKE_CHECKS

    g.add_argument("--take-check", choices=TAKE_CHECKS, default=None,
                   help="check every segment's take (ASR CER/WER, speaker similarity, silence, clipping, length): "
                        "score = record the scores; reroll = also generate a segment below a threshold again with "
                        f"a new seed, keeping the best take; off = neither (default {defaults.take_check}; models: "
                        "--quality-asr)")
    g.add_argument("--take-max-rerolls", type=non_negative_int, default=None,
                   help=f"most re-generations of one segment under --take-check reroll "
                        f"(default {defaults.take_max_rerolls})")
    g.add_argument("--take-max-error-rate", type=number, default=None,
                   help=f"a take whose CER (Chinese) / WER is above this is below threshold "
                        f"(default {defaults.take_max_error_rate})")
    g.add_argument("--take-min-similarity", type=number, default=None,
                   help=f"a take whose speaker similarity to the reference is below this is below threshold "
                        f"(default {defaults.take_min_similarity})")


def params_from_args(args: argparse.Namespace):
    """``SynthesisParams`` with only the generation flags that were given (the rest keep their defaults).

    Raises:
        InputError: a value ``SynthesisParams`` refuses, naming the flag.
    """
    from tts_app.request import SynthesisParams

    given = _given(args, {name: name for name in GENERATION_FLAGS})
    try:
        return SynthesisParams(**given)
    except ConfigError as exc:
        raise _usage_error(exc, GENERATION_FLAGS) from None


# --------------------------------------------------------------------------------------------- voices


def add_voice_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--voices-dir``: the voice library's folder (``tts_app.voices.VoiceLibrary``), shared by every command.
    Not given: ``<--output-dir>/voices`` for the web app, none for ``synth`` and ``batch`` (only the bundled example
    voices, from ``assets/voices``, can then be named)."""
    g = parser.add_argument_group("voice library")
    g.add_argument("--voices-dir", default=None, metavar="DIR",
                   help="folder of saved voices (default for app.py: OUTPUT_DIR/voices; synth and batch: only the "
                        "bundled example voices)")
    from tts_app.audio.transcribe import DEFAULT_ASR_MODEL

    g.add_argument("--asr-model", default=None, metavar="ID_OR_DIR|none",
                   help=f"Whisper checkpoint that transcribes references given without a transcript (default "
                        f"{DEFAULT_ASR_MODEL}, loaded on first use on the model's device; none = off)")


def voice_library_from(args: argparse.Namespace, default_root: str | Path | None = None):
    """The ``VoiceLibrary`` of ``--voices-dir`` (else ``default_root``; None = bundled voices only).

    Raises:
        InputError: ``--voices-dir`` is a file or cannot be created.
    """
    from tts_app.voices import VoiceLibrary

    root = getattr(args, "voices_dir", None)
    if root is not None:
        check_output_dir(root, "--voices-dir")
    return VoiceLibrary(root if root is not None else default_root)


def usage_error(prog: str, exc: InputError) -> int:
    """Print a one-line usage error for ``prog`` (as ``CliParser.error``) and return exit status 2."""
    print(f"{prog}: error: {exc}", file=sys.stderr)
    return 2


# --------------------------------------------------------------------------------------------- language

#: the languages of the message tables (``tts_app.frontend.messages``, ``tts_app.ui.texts``)
LANGUAGES = ("zh", "en")


def add_lang_arg(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    """Add ``--lang zh|en``: the language of messages (warnings, errors, reports, progress). Not given (None): the
    web page follows each browser's language; a command prints English (``lang_of``)."""
    parser.add_argument("--lang", choices=LANGUAGES, default=None,
                        help=help or "language of messages, warnings and errors: zh or en (default en)")


def lang_of(args: argparse.Namespace) -> str:
    """A command's message language: ``--lang``, else English."""
    return getattr(args, "lang", None) or "en"


# --------------------------------------------------------------------------------------------- web server

#: Environment variables read by ``server_config_from`` (Hugging Face Spaces turns a Space's secrets into these).
API_KEY_ENV = "TTS_APP_API_KEY"
UI_AUTH_ENV = "TTS_APP_AUTH"
#: Gradio's own variables for the address and port (Hugging Face Spaces sets GRADIO_SERVER_NAME=0.0.0.0).
HOST_ENV, PORT_ENV = "GRADIO_SERVER_NAME", "GRADIO_SERVER_PORT"
DEFAULT_HOST, DEFAULT_PORT = "127.0.0.1", 7860

#: flag of each ``ServerConfig`` field set by ``add_server_args``
SERVER_FLAGS: dict[str, str] = {
    "api_keys": "--api-key", "ui_auth": "--auth", "rate_limit_per_min": "--rate-limit",
    "rate_limit_burst": "--rate-limit-burst", "max_queue_depth": "--max-queue-depth",
    "max_input_chars": "--max-input-chars", "cors_origins": "--cors-origin",
    "forwarded_allow_ips": "--forwarded-allow-ips",
}


def add_server_args(parser: argparse.ArgumentParser) -> None:
    """Add the web server's flags (``app.py``): address, public link, UI login, API keys, API limits, CORS."""
    from tts_app.config import ServerConfig

    d = ServerConfig()
    g = parser.add_argument_group("web server")
    g.add_argument("--host", default=None,
                   help=f"address to listen on (default ${HOST_ENV}, else {DEFAULT_HOST}); 0.0.0.0 serves the network")
    g.add_argument("--port", type=positive_int, default=None,
                   help=f"port (default ${PORT_ENV}, else {DEFAULT_PORT} or the next free one)")
    g.add_argument("--share", action="store_true", help="create a public gradio.live link")
    g.add_argument("--auth", action="append", default=None, metavar="USER:PASSWORD",
                   help=f"log-in for the web page (repeatable; also ${UI_AUTH_ENV}, comma-separated)")
    g.add_argument("--auth-file", default=None, metavar="FILE",
                   help="log-ins for the web page, one USER:PASSWORD per line")
    g.add_argument("--api-key", action="append", default=None, metavar="KEY",
                   help=f"key the HTTP API (/v1, /metrics) requires as 'Authorization: Bearer KEY' (repeatable; "
                        f"better: ${API_KEY_ENV}, comma-separated, which other users of the machine cannot see)")
    g.add_argument("--rate-limit", type=number, default=None, metavar="N",
                   help=f"API requests per minute per client (default {d.rate_limit_per_min:g}; 0 = no limit)")
    g.add_argument("--rate-limit-burst", type=positive_int, default=None, metavar="N",
                   help=f"API requests a client may send at once (default {d.rate_limit_burst})")
    g.add_argument("--max-queue-depth", type=positive_int, default=None, metavar="N",
                   help=f"the speech API answers 429 while this many requests are in progress (default "
                        f"{d.max_queue_depth})")
    g.add_argument("--max-input-chars", type=positive_int, default=None, metavar="N",
                   help=f"longest speech API input in characters (default and most: {d.max_input_chars}, the limit "
                        "of every door; OpenAI's is 4096)")
    g.add_argument("--cors-origin", action="append", default=None, metavar="ORIGIN",
                   help="let web pages of this origin call the API (repeatable; '*' = any; default: none)")
    g.add_argument("--forwarded-allow-ips", action="append", default=None, metavar="ADDRESS",
                   help="a reverse proxy whose X-Forwarded-For names the client (repeatable; '*' = any; default: "
                        "none, the headers are ignored and the client is the connecting address)")


def _split_login(text: str, where: str) -> tuple[str, str]:
    user, sep, password = text.partition(":")
    if not sep or not user.strip() or not password:
        raise InputError(f"{where}: {text.split(':')[0][:20]!r}... is not USER:PASSWORD; write e.g. mei:s3cret")
    return user.strip(), password


def _logins(args: argparse.Namespace, environ) -> tuple[tuple[str, str], ...]:
    pairs = [_split_login(item, "--auth") for item in (args.auth or [])]
    if getattr(args, "auth_file", None):
        try:
            lines = Path(args.auth_file).read_text(encoding="utf-8").splitlines()
        except OSError as exc:
            raise InputError(f"--auth-file {args.auth_file!r} cannot be read: {exc.strerror or exc}") from None
        for number_, line in enumerate(lines, 1):
            if line.strip() and not line.lstrip().startswith("#"):
                pairs.append(_split_login(line.strip(), f"--auth-file line {number_}"))
    if not pairs and environ.get(UI_AUTH_ENV):
        pairs = [_split_login(item.strip(), UI_AUTH_ENV) for item in environ[UI_AUTH_ENV].split(",") if item.strip()]
    return tuple(pairs)


def server_config_from(args: argparse.Namespace, environ=None):
    """``ServerConfig`` from the flags of ``add_server_args`` and the environment (``API_KEY_ENV``,
    ``UI_AUTH_ENV``; a flag wins over its variable). A flag not given keeps the dataclass default.

    Raises:
        InputError: a value the config refuses, naming the flag; an unreadable ``--auth-file``; a log-in that is
            not USER:PASSWORD.
    """
    from tts_app.config import ServerConfig

    environ = os.environ if environ is None else environ
    keys = list(args.api_key or [])
    if not keys and environ.get(API_KEY_ENV):
        keys = [key.strip() for key in environ[API_KEY_ENV].split(",") if key.strip()]
    given = _given(args, {"rate_limit": "rate_limit_per_min", "rate_limit_burst": "rate_limit_burst",
                          "max_queue_depth": "max_queue_depth", "max_input_chars": "max_input_chars"})
    try:
        return ServerConfig(api_keys=tuple(keys), ui_auth=_logins(args, environ),
                            cors_origins=tuple(args.cors_origin or ()),
                            forwarded_allow_ips=tuple(getattr(args, "forwarded_allow_ips", None) or ()), **given)
    except ConfigError as exc:
        raise _usage_error(exc, SERVER_FLAGS) from None


def server_address(args: argparse.Namespace, environ=None) -> tuple[str, int | None]:
    """(host, port) to listen on: the flags, else gradio's variables (``GRADIO_SERVER_NAME``,
    ``GRADIO_SERVER_PORT``), else 127.0.0.1 and None ("7860 or the next free one").

    Raises:
        InputError: ``GRADIO_SERVER_PORT`` is not a port number.
    """
    environ = os.environ if environ is None else environ
    host = args.host if args.host is not None else (environ.get(HOST_ENV) or DEFAULT_HOST)
    port = args.port
    if port is None and environ.get(PORT_ENV):
        text = environ[PORT_ENV].strip()
        if not text.isdigit() or not 0 < int(text) < 65536:
            raise InputError(f"{PORT_ENV}={text!r} is not a port number (1-65535)")
        port = int(text)
    return host, port
