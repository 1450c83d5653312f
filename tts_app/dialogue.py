"""Dialogue scripts: text with speaker turns -> ``Speaker`` / ``Turn`` lists for a ``SynthesisRequest``. Pure Python.

A script has one turn per line, in any of these forms (mixed freely; ASCII or full-width colon)::

    Speaker 1: Welcome back to the show.        (VibeVoice's own script form; "speaker1:" too)
    [S2] Thanks, glad to be here.               (Dia's tags; one line may hold several: "[S1] Hi. [S2] Hello.")
    张三：今天我们聊聊天气。                      (a name, up to 16 characters, then a colon)

A line without a speaker prefix continues the turn before it; blank lines are ignored. Speakers are numbered 1-4:
"Speaker N" and "[SN]" are speaker N; a named speaker takes the lowest number not used yet, in order of first
appearance. Voices are given per speaker by number or name (``--voice 1=a.wav --voice 李四=mei``,
``{"speakers": {"1": "a.wav", "李四": "mei"}}`` in JSONL); ``voice_for`` looks one up.

How each model family speaks a dialogue is the adapter's business (``ModelFacts.max_dialogue_speakers``): by default
every turn is its own segment (or several), synthesised with its speaker's reference, and the segments of all turns
batch together like any others. A family with its own multi-speaker prompt (VibeVoice, Dia) gets dialogue rows
instead: the turns' segments are packed in order into segments of at most ``max_segment_chars`` characters
(``pack_turn_pieces``), each spoken in one generation from a prompt that holds every speaker's voice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tts_app.errors import InputError
from tts_app.frontend.messages import Notice, register
from tts_app.request import MAX_SPEAKERS

# The script's errors in English and Chinese (``tts_app.frontend.messages``; "Speaker 1:" and "[S1]" are the
# script's own syntax and stay as written).
EN: dict[str, str] = {
    "dlg_speaker_range": "script line {line}: speaker {number} is outside 1-{max}; a dialogue has at most {max} "
                         "speakers",
    "dlg_too_many": "script line {line}: {name!r} would be speaker {number}; a dialogue has at most {max} speakers",
    "dlg_before_speaker": "script line {line}: {text!r} comes before any speaker; start it with [S1] or 'Speaker 1:'",
    "dlg_no_speaker": "script line {line}: {text!r} names no speaker; write 'Speaker 1: ...', '[S1] ...' or "
                      "'Name: ...'",
    "dlg_no_turns": "the script has no turns; write one turn per line, e.g. 'Speaker 1: Hello.'",
    "dlg_says_nothing": "script line {line}: {label} says nothing; give the turn some words or remove the line",
    "dlg_no_voice": "{label} (speaker {number}) has no voice; give one, e.g. --voice {number}=voice.wav or a saved "
                    "voice's name",
    "dlg_extra_voice": "a voice is given for speaker {key!r}, which the script does not have (its speakers: "
                       "{labels})",
    "dlg_voice_flag": "--voice {value!r}: with --script, give SPEAKER=VOICE, e.g. --voice 1=a.wav or --voice 2=mei "
                      "(a saved voice)",
    "dlg_voice_twice": "--voice: speaker {key!r} is given twice",
}
ZH: dict[str, str] = {
    "dlg_speaker_range": "脚本第 {line} 行：说话人 {number} 超出 1-{max}；一段对话最多 {max} 位说话人",
    "dlg_too_many": "脚本第 {line} 行：{name!r} 将是第 {number} 位说话人；一段对话最多 {max} 位说话人",
    "dlg_before_speaker": "脚本第 {line} 行：{text!r} 出现在任何说话人之前；请以 [S1] 或 'Speaker 1:' 开头",
    "dlg_no_speaker": "脚本第 {line} 行：{text!r} 没有指明说话人；请写成 'Speaker 1: ...'、'[S1] ...' 或 '名字：...'",
    "dlg_no_turns": "脚本中没有任何对白；请每行写一句，例如 'Speaker 1: 你好。'",
    "dlg_says_nothing": "脚本第 {line} 行：{label} 没有说任何话；请给这句加上文字，或删去这一行",
    "dlg_no_voice": "{label}（说话人 {number}）没有声音；请指定一个，例如 --voice {number}=voice.wav 或已保存声音的名字",
    "dlg_extra_voice": "为说话人 {key!r} 指定了声音，但脚本中没有该说话人（脚本的说话人：{labels}）",
    "dlg_voice_flag": "--voice {value!r}：使用 --script 时请写 说话人=声音，例如 --voice 1=a.wav 或 --voice 2=mei（已保存的声音）",
    "dlg_voice_twice": "--voice：说话人 {key!r} 指定了两次",
}
register(__name__, EN, ZH)

_SPEAKER_N = re.compile(r"^\s*(?:speaker|说话人|角色)\s*(\d+)\s*[:：]\s*", re.IGNORECASE)
_TAG = re.compile(r"\[S(\d+)\]", re.IGNORECASE)
_NAMED = re.compile(r"^\s*([^\s:：\[\]\"“”'()（），,。.!?！？]{1,16})\s*[:：]\s*")


@dataclass(frozen=True)
class ScriptSpeaker:
    """A speaker of a script: ``number`` (1-based) and the ``name`` written in the script (None for "Speaker N" /
    "[SN]" forms)."""

    number: int
    name: str | None = None

    @property
    def label(self) -> str:
        """How outputs name the speaker: the script's name, else "Speaker N"."""
        return self.name or f"Speaker {self.number}"


@dataclass(frozen=True)
class ScriptTurn:
    """One turn: ``speaker`` (index into ``Script.speakers``), ``text``, ``line`` (1-based line it starts on)."""

    speaker: int
    text: str
    line: int


@dataclass(frozen=True)
class Script:
    """A parsed script: ``speakers`` sorted by number, ``turns`` in order."""

    speakers: tuple[ScriptSpeaker, ...]
    turns: tuple[ScriptTurn, ...]


def _split_tags(text: str) -> list[tuple[int | None, str]]:
    """"[S1] a [S2] b" -> [(1, "a"), (2, "b")]; text before the first tag has speaker None."""
    pieces: list[tuple[int | None, str]] = []
    last, speaker = 0, None
    for match in _TAG.finditer(text):
        if text[last:match.start()].strip() or speaker is not None:
            pieces.append((speaker, text[last:match.start()].strip()))
        speaker, last = int(match.group(1)), match.end()
    pieces.append((speaker, text[last:].strip()))
    return [p for p in pieces if p[0] is not None or p[1]]


def parse_script(text: str) -> Script:
    """Parse a dialogue script (module docstring).

    Raises:
        InputError: no turns; a line before the first speaker; a speaker number outside 1-4 or more than 4
            speakers; a turn with nothing to say (each message names the line).
    """
    numbered: dict[int, ScriptSpeaker] = {}
    named: dict[str, ScriptSpeaker] = {}
    raw_turns: list[tuple[ScriptSpeaker, list[str], int]] = []

    def speaker_number(number: int, line: int) -> ScriptSpeaker:
        if not 1 <= number <= MAX_SPEAKERS:
            raise InputError(Notice("dlg_speaker_range", line=line, number=number, max=MAX_SPEAKERS))
        taken = next((s for s in named.values() if s.number == number), None)
        return taken or numbered.setdefault(number, ScriptSpeaker(number))

    def speaker_named(name: str, line: int) -> ScriptSpeaker:
        key = name.casefold()
        if key not in named:
            used = {s.number for s in numbered.values()} | {s.number for s in named.values()}
            free = [n for n in range(1, MAX_SPEAKERS + 1) if n not in used]
            if not free:
                raise InputError(Notice("dlg_too_many", line=line, name=name, number=MAX_SPEAKERS + 1,
                                        max=MAX_SPEAKERS))
            named[key] = ScriptSpeaker(free[0], name)
        return named[key]

    for number, line in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), start=1):
        if not line.strip():
            continue
        match = _SPEAKER_N.match(line)
        if match:
            raw_turns.append((speaker_number(int(match.group(1)), number), [line[match.end():].strip()], number))
            continue
        if _TAG.search(line):
            for tag, piece in _split_tags(line):
                if tag is None:  # words before the first tag continue the previous turn
                    if not raw_turns:
                        raise InputError(Notice("dlg_before_speaker", line=number, text=piece[:30]))
                    raw_turns[-1][1].append(piece)
                else:
                    raw_turns.append((speaker_number(tag, number), [piece], number))
            continue
        match = _NAMED.match(line)
        if match and not match.group(1).isdigit():
            raw_turns.append((speaker_named(match.group(1), number), [line[match.end():].strip()], number))
            continue
        if not raw_turns:
            raise InputError(Notice("dlg_no_speaker", line=number, text=line.strip()[:30]))
        raw_turns[-1][1].append(line.strip())
    if not raw_turns:
        raise InputError(Notice("dlg_no_turns"))
    speakers = tuple(sorted({*numbered.values(), *named.values()}, key=lambda s: s.number))
    index = {s: i for i, s in enumerate(speakers)}
    turns = []
    for speaker, pieces, line in raw_turns:
        said = " ".join(p for p in pieces if p).strip()
        if not said:
            raise InputError(Notice("dlg_says_nothing", line=line, label=speaker.label))
        turns.append(ScriptTurn(index[speaker], said, line))
    return Script(speakers, tuple(turns))


def voice_for(speaker: ScriptSpeaker, voices: dict[str, object]) -> object | None:
    """The voice given for ``speaker`` in ``voices`` (keys: its number as text, "S1", "Speaker 1", or its name,
    case-insensitively), or None."""
    folded = {str(k).strip().casefold(): v for k, v in voices.items()}
    for key in (str(speaker.number), f"s{speaker.number}", f"speaker {speaker.number}", f"speaker{speaker.number}",
                (speaker.name or "").casefold()):
        if key and key in folded:
            return folded[key]
    return None


def check_voices(script: Script, voices: dict[str, object]) -> list[object]:
    """One voice per script speaker, in ``script.speakers`` order.

    Raises:
        InputError: a speaker has no voice, or a voice is given for a speaker the script does not have (both name
            the speaker and how to give it).
    """
    out = []
    for speaker in script.speakers:
        voice = voice_for(speaker, voices)
        if voice is None:
            raise InputError(Notice("dlg_no_voice", label=speaker.label, number=speaker.number))
        out.append(voice)
    known = {str(s.number) for s in script.speakers} | {f"s{s.number}" for s in script.speakers} | \
        {f"speaker {s.number}" for s in script.speakers} | {f"speaker{s.number}" for s in script.speakers} | \
        {(s.name or "").casefold() for s in script.speakers}
    extra = [k for k in voices if str(k).strip().casefold() not in known]
    if extra:
        labels = ", ".join(f"{s.number} ({s.label})" for s in script.speakers)
        raise InputError(Notice("dlg_extra_voice", key=extra[0], labels=labels))
    return out


def parse_voice_assignments(values: list[str]) -> dict[str, str]:
    """``["1=a.wav", "李四=mei"]`` (``synth --voice``) -> ``{"1": "a.wav", "李四": "mei"}``.

    Raises:
        InputError: a value without "=", or one speaker given twice.
    """
    out: dict[str, str] = {}
    for value in values:
        key, sep, voice = value.partition("=")
        if not sep or not key.strip() or not voice.strip():
            raise InputError(Notice("dlg_voice_flag", value=value))
        if key.strip().casefold() in {k.casefold() for k in out}:
            raise InputError(Notice("dlg_voice_twice", key=key.strip()))
        out[key.strip()] = voice.strip()
    return out


def dialogue_request(script: Script, voices: list[tuple[object | None, str | None]], **request_fields):
    """A ``SynthesisRequest`` for ``script``: ``voices`` holds per script speaker (in ``script.speakers`` order)
    its ``PreparedReference`` (or None) and transcript; ``request_fields`` are the other request fields (``text``
    defaults to the script rendered as ``Label: text`` lines, ``params``, ``priority``...)."""
    from tts_app.request import Speaker, SynthesisRequest, Turn

    speakers = tuple(Speaker(name=s.label, reference_audio=None if ref is None else ref.audio,
                             reference_text=text) for s, (ref, text) in zip(script.speakers, voices))
    turns = tuple(Turn(t.speaker, t.text) for t in script.turns)
    request_fields.setdefault("text", "\n".join(f"{script.speakers[t.speaker].label}: {t.text}"
                                                for t in script.turns))
    return SynthesisRequest(speakers=speakers, turns=turns, **request_fields)


def pack_turn_pieces(lengths: list[int], max_chars: int) -> list[list[int]]:
    """Group consecutive turn pieces (the front end's segments of each turn, in script order) into dialogue
    segments of at most ``max_chars`` characters, greedily: a piece joins the current group while the group's
    characters plus one separator per piece stay within ``max_chars``. A piece longer than ``max_chars`` (the front
    end never makes one) is a group of its own.

    Args:
        lengths: characters of each piece, in order.
        max_chars: the segment limit (``max_segment_chars``), >= 1.

    Returns:
        Groups of piece indices, in order, covering every piece exactly once.
    """
    groups: list[list[int]] = []
    size = 0
    for index, length in enumerate(lengths):
        if groups and size + 1 + length <= max_chars:
            groups[-1].append(index)
            size += 1 + length
        else:
            groups.append([index])
            size = length
    return groups


def _is_cjk(char: str) -> bool:
    """Chinese characters and full-width punctuation: text in them is written without spaces."""
    return "\u2e80" <= char <= "\u9fff" or "\uf900" <= char <= "\ufaff" or "\uff00" <= char <= "\uffef" or \
        "\u3000" <= char <= "\u303f"


def join_pieces(pieces: list[str]) -> str:
    """Pieces of one turn (the front end's segments, in order) back into one line: a space between two pieces,
    none where both sides are Chinese characters or full-width punctuation."""
    out = ""
    for piece in (p.strip() for p in pieces):
        if not piece:
            continue
        if out and not (_is_cjk(out[-1]) and _is_cjk(piece[0])):
            out += " "
        out += piece
    return out
