"""User-facing messages in English and Chinese: the front end's own table, and the one mechanism the rest of the
project renders its messages with.

Every message is a ``Notice``: a ``str`` (its English text, so the engine, the job runner, results.jsonl and the
CLI carry it as before) that also keeps its ``code`` and ``params``, so each door (page, CLI, JSONL record) shows
``notice.render(lang)`` in its user's language. Parameters that are notices themselves (a problem inside a warning)
are rendered in the same language. ``localize(message, lang)`` renders any message (plain strings stay as they
are). Other layers keep their tables next to their code and ``register`` them here (reference audio:
``tts_app.audio.notices``; jobs: ``tts_app.jobs.messages``; dialogue scripts: ``tts_app.dialogue``), one text per
key and language; ``to_json`` / ``from_json`` carry a notice through a JSON record.
"""

from __future__ import annotations

EN: dict[str, str] = {
    # annotations
    "where_annotation": "annotation {raw!r} at input position {start}",
    "not_closed": "{where} is not closed; write it as {fixed}; it was removed and {kept}",
    "attempt_removed": "{where}: {problems}; it was removed and {kept}",
    "keeps_default": "'{char}' keeps its default reading (valid readings of '{char}': {valid})",
    "nothing_applied": "nothing was applied",
    "none_known": "none known",
    "after_non_hanzi": "{where} follows {after}, which is not a Chinese character; it was removed. Put the reading "
                       "right after the character, e.g. 重(zhong4)",
    "start_of_text": "the start of the text",
    "too_many_readings": "{where} has {num_tokens} readings but only {num_hanzi} Chinese character(s) {chars!r} "
                         "precede it; it was ignored. Give one reading per character, e.g. 银行(yin2 hang2)",
    "bad_token": "{where}: {problem}; '{char}' keeps its default reading (valid readings of '{char}': {valid})",
    "not_a_reading": "{where}: {reading} is not a reading of '{char}' (valid: {valid}); it was not applied and "
                     "'{char}' keeps its default reading{hint}",
    "reading_hint": "; {reading} is a reading of '{other}': put it right after that character, {other}({token})",
    "gloss_typo": "{where} is kept as text: {problems}. If it was meant as pinyin, write e.g. 重(zhong4)",
    "angle_count": "{where} gives {num_tokens} reading(s) for {num_chars} character(s) {chars!r}; it was ignored "
                   "and the characters keep their default readings. Write one syllable per character, e.g. "
                   "<银行|YIN2 HANG2>",
    "angle_not_hanzi": "{where}: {chars!r} are not Chinese characters; they were kept as text",
    "inline_no_char": "pinyin {token!r} at input position {start}: no common character reads {reading}; it was "
                      "removed",
    # pinyin tokens (problems inside the warnings above)
    "tok_many_tones": "{token!r} has more than one tone",
    "tok_not_pinyin": "{token!r} is not pinyin",
    "tok_not_syllable": "{token!r} is not a Mandarin syllable",
    "tok_bad_tone": "{token!r} has tone {tone}; tones are 1-4, and 5 or 0 for the neutral tone",
    # pause markers, tags, scene breaks
    "pause_unreadable": "pause length {value!r} is not readable; write a number with a unit, e.g. [pause:500ms] or "
                        "[pause:1.5s]",
    "pause_too_long": "pause of {pause_ms} ms is longer than the {max_ms} ms maximum; using {max_ms} ms",
    "pause_problem": "pause marker {raw!r} at input position {start}: {problem}{suffix}",
    "pause_default_used": "; the default pause is used",
    "pause_nothing_before": "pause marker {raw!r} at input position {start} has no text before it; it was ignored "
                            "(a pause can only follow speech)",
    "pause_not_closed": "pause marker at position {start} is not closed: {snippet!r}; write it as [pause:500ms] or "
                        "[pause:1.5s]",
    "tag_stripped": "tag {raw!r} at input position {start} is not one this model understands; it was removed "
                    "(supported: {supported})",
    "tag_none": "none",
    # normalisation
    "text_at": "text at input position {start}: {problem}",
    "emoji_removed": "removed {count} emoji/pictograph character(s) that cannot be spoken: {chars!r}",
    "wetext_failed": "the {lang} normaliser could not read {text!r} ({error}); it is kept as written",
    # readings and rendering
    "no_reading": "no reading is known for '{char}' at position {pos} of the normalised text; annotate it, e.g. "
                  "字(zi4)",
    "no_homophone": "override of '{char}' at position {pos} of the normalised text: no common character has only the "
                    "reading {reading}; '{char}' is sent as it is and the model may read it differently (a model "
                    "with pinyin support would not)",
    "unencodable_replaced": "'{char}' at position {pos} of the normalised text is not in this model's vocabulary; it "
                            "is sent as '{sub}', which reads the same ({reading})",
    "unencodable_pinyin": "'{char}' at position {pos} of the normalised text is not in this model's vocabulary; it "
                          "is sent as the pinyin {reading}",
    "unencodable_skipped": "'{char}' at position {pos} of the normalised text is not in this model's vocabulary and "
                           "no character that reads the same is; it will be skipped. Annotate it with pinyin, e.g. "
                           "囧(jiong3), or replace it",
    # errors
    "text_not_str": "text must be a string, got {type}",
    "text_empty": "text is empty; type the words to speak",
    "nothing_to_speak": "text has nothing to speak: after removing emoji, symbols and markup, {left} left; write "
                        "words or numbers",
    "nothing_the_model_reads": "this model cannot read any word of the text: {chars} are not in its vocabulary; write "
                               "the text in a language the model speaks",
    "only_left": "only {text!r} is",
    "nothing_left": "nothing is",
    "knob_min": "{name}={value} must be >= {minimum}",
    # request limits (tts_app.config.RequestLimits)
    "limit_text": "the text is {num_chars} characters; at most {max_chars} per request. Split it (one JSONL line per "
                  "chapter, say)",
    "limit_seed": "seed={seed} is outside 0..{max_seed}",
    "lone_surrogate": "{field} holds an invalid character (a lone UTF-16 surrogate) at position {position}; send "
                      "the text as valid UTF-8",
    "limit_max_new_tokens": "max_new_tokens={value} is more than {max_value} decode steps per segment",
    "limit_pause": "{name}={value} ms is longer than the {max_ms} ms maximum",
    "limit_duration": "{name} asks for {value_s:g} s of audio; at most {max_s:g} s per request",
    "limit_silence": "the text's pauses add up to {value_s:g} s of silence; at most {max_s:g} s per request. Use "
                     "fewer or shorter pauses",
    "limit_audio": "the request has generated {value_s:g} s of audio, more than the {max_s:g} s one request may "
                   "make; it was stopped. Split the text into several requests (or JSONL lines), or lower "
                   "max_new_tokens",
}

ZH: dict[str, str] = {
    "where_annotation": "输入第 {start} 个字符处的注音 {raw!r}",
    "not_closed": "{where} 缺少右括号，应写作 {fixed}；已删除，{kept}",
    "attempt_removed": "{where}：{problems}；已删除，{kept}",
    "keeps_default": "“{char}”按默认读音朗读（“{char}”的读音：{valid}）",
    "nothing_applied": "未应用任何读音",
    "none_known": "未知",
    "after_non_hanzi": "{where} 跟在 {after} 之后，而它不是汉字；已删除。请把拼音紧跟在汉字后面，例如 重(zhong4)",
    "start_of_text": "文本开头",
    "too_many_readings": "{where} 有 {num_tokens} 个读音，但前面只有 {num_hanzi} 个汉字 {chars!r}；已忽略。"
                         "请每个字写一个读音，例如 银行(yin2 hang2)",
    "bad_token": "{where}：{problem}；“{char}”按默认读音朗读（“{char}”的读音：{valid}）",
    "not_a_reading": "{where}：{reading} 不是“{char}”的读音（可选：{valid}）；未应用，“{char}”按默认读音朗读{hint}",
    "reading_hint": "；{reading} 是“{other}”的读音：请把它紧跟在该字后面，写作 {other}({token})",
    "gloss_typo": "{where} 按普通文字朗读：{problems}。如果这是拼音，请写作例如 重(zhong4)",
    "angle_count": "{where} 为 {num_chars} 个字 {chars!r} 给了 {num_tokens} 个读音；已忽略，这些字按默认读音朗读。"
                   "请每个字写一个音节，例如 <银行|YIN2 HANG2>",
    "angle_not_hanzi": "{where}：{chars!r} 不是汉字；按普通文字保留",
    "inline_no_char": "输入第 {start} 个字符处的拼音 {token!r}：没有常用字读作 {reading}；已删除",
    "tok_many_tones": "{token!r} 有不止一个声调",
    "tok_not_pinyin": "{token!r} 不是拼音",
    "tok_not_syllable": "{token!r} 不是普通话音节",
    "tok_bad_tone": "{token!r} 的声调是 {tone}；声调为 1-4，轻声写 5 或 0",
    "pause_unreadable": "停顿时长 {value!r} 无法识别；请写数字加单位，例如 [pause:500ms] 或 [pause:1.5s]",
    "pause_too_long": "停顿 {pause_ms} 毫秒超过上限 {max_ms} 毫秒；按 {max_ms} 毫秒处理",
    "pause_problem": "输入第 {start} 个字符处的停顿标记 {raw!r}：{problem}{suffix}",
    "pause_default_used": "；使用默认停顿",
    "pause_nothing_before": "输入第 {start} 个字符处的停顿标记 {raw!r} 前面没有文字；已忽略（停顿只能跟在语音之后）",
    "pause_not_closed": "第 {start} 个字符处的停顿标记缺少右括号：{snippet!r}；请写作 [pause:500ms] 或 [pause:1.5s]",
    "tag_stripped": "输入第 {start} 个字符处的标签 {raw!r} 不是该模型支持的标签；已删除（支持的标签：{supported}）",
    "tag_none": "无",
    "text_at": "输入第 {start} 个字符处：{problem}",
    "emoji_removed": "删除了 {count} 个无法朗读的表情/图形符号：{chars!r}",
    "wetext_failed": "{lang} 文本规范化无法处理 {text!r}（{error}）；按原样保留",
    "no_reading": "规范化文本第 {pos} 个字符“{char}”没有已知读音；请注音，例如 字(zi4)",
    "no_homophone": "规范化文本第 {pos} 个字符“{char}”的指定读音：没有只读 {reading} 的常用字；“{char}”按原样发送，"
                    "模型可能读成别的音（支持拼音的模型不会）",
    "unencodable_replaced": "规范化文本第 {pos} 个字符“{char}”不在该模型的词表中；改为发送同音字“{sub}”（{reading}）",
    "unencodable_pinyin": "规范化文本第 {pos} 个字符“{char}”不在该模型的词表中；改为发送拼音 {reading}",
    "unencodable_skipped": "规范化文本第 {pos} 个字符“{char}”不在该模型的词表中，也没有同音字可用；将被跳过。"
                           "请用拼音注音（例如 囧(jiong3)）或换一个字",
    "text_not_str": "文本必须是字符串，收到的是 {type}",
    "text_empty": "文本为空；请输入要朗读的文字",
    "nothing_to_speak": "文本中没有可朗读的内容：去掉表情、符号和标记后，{left}；请输入文字或数字",
    "nothing_the_model_reads": "该模型读不了这段文本中的任何词：{chars} 不在它的词表中；请用该模型支持的语言书写",
    "only_left": "只剩下 {text!r}",
    "nothing_left": "什么也没剩下",
    "knob_min": "{name}={value} 必须 >= {minimum}",
    "limit_text": "文本有 {num_chars} 个字符；每个请求最多 {max_chars} 个。请拆分（例如每章一行 JSONL）",
    "limit_seed": "seed={seed} 超出 0..{max_seed} 的范围",
    "lone_surrogate": "{field} 第 {position} 个字符无效（孤立的 UTF-16 代理项）；请以有效的 UTF-8 发送文本",
    "limit_max_new_tokens": "max_new_tokens={value} 超过每段 {max_value} 个解码步",
    "limit_pause": "{name}={value} 毫秒超过 {max_ms} 毫秒的上限",
    "limit_duration": "{name} 要求 {value_s:g} 秒音频；每个请求最多 {max_s:g} 秒",
    "limit_silence": "文本中的停顿共 {value_s:g} 秒静音；每个请求最多 {max_s:g} 秒。请减少或缩短停顿",
    "limit_audio": "该请求已生成 {value_s:g} 秒音频，超过每个请求最多可生成的 {max_s:g} 秒，已被停止。请把文本拆成多个请求"
                   "（或多行 JSONL），或调低 max_new_tokens",
}

assert EN.keys() == ZH.keys()  # a missing translation is a programming error, caught at import
LANGUAGES = ("en", "zh")
CATALOGUE: dict[str, dict[str, str]] = {"en": dict(EN), "zh": dict(ZH)}
#: every table registered (the front end's first), for the test that walks every key
TABLES: list[tuple[str, dict[str, str], dict[str, str]]] = [(__name__, EN, ZH)]


def register(owner: str, en: dict[str, str], zh: dict[str, str]) -> None:
    """Add a layer's message table (``owner``: its module name) to the catalogue.

    Raises:
        ValueError: the two languages have different keys, or a key is already registered by another table (a
            programming error, caught at import).
    """
    if en.keys() != zh.keys():
        raise ValueError(f"{owner}: keys only in one language: {sorted(en.keys() ^ zh.keys())}")
    clash = [key for key in en if key in CATALOGUE["en"] and CATALOGUE["en"][key] != en[key]]
    if clash:
        raise ValueError(f"{owner}: message keys already registered elsewhere: {clash}")
    if any(table[0] == owner for table in TABLES):
        return
    CATALOGUE["en"].update(en)
    CATALOGUE["zh"].update(zh)
    TABLES.append((owner, en, zh))


class Notice(str):
    """A front-end message: its English text as a ``str``, plus ``code`` (a key of the catalogue) and ``params``.

    ``Notice("keeps_default", char="行", valid="xing2, hang2")`` == "'行' keeps its default reading (...)".
    """

    code: str
    params: dict

    def __new__(cls, code: str, **params) -> "Notice":
        self = super().__new__(cls, _format("en", code, params))
        self.code = code
        self.params = params
        return self

    def render(self, lang: str) -> str:
        """The message in ``lang`` ("en" or "zh"; anything else gives English)."""
        return _format(lang if lang in CATALOGUE else "en", self.code, self.params)

    def __reduce__(self):  # pickles (multiprocessing, caches) as a Notice, not as a plain str
        return (_rebuild, (self.code, self.params))

    def to_json(self) -> dict:
        """``{"code": ..., "params": {...}}`` (nested notices likewise; tuples become lists) for a JSON record."""
        return {"code": self.code, "params": {k: _param_to_json(v) for k, v in self.params.items()}}

    @classmethod
    def from_json(cls, data: object) -> "Notice | None":
        """The notice ``to_json`` wrote, or None when ``data`` is not one (an older record, an unknown code)."""
        if not isinstance(data, dict) or data.get("code") not in CATALOGUE["en"] and data.get("code") not in ("_join", "_list"):
            return None
        try:
            return cls(data["code"], **{k: _param_from_json(v) for k, v in (data.get("params") or {}).items()})
        except (KeyError, IndexError, TypeError, ValueError):
            return None


def _param_to_json(value: object) -> object:
    if isinstance(value, Notice):
        return {"notice": value.to_json()}
    if isinstance(value, (tuple, list)):
        return [_param_to_json(v) for v in value]
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def _param_from_json(value: object) -> object:
    if isinstance(value, dict) and "notice" in value:
        found = Notice.from_json(value["notice"])
        if found is None:
            raise ValueError("unknown notice")
        return found
    if isinstance(value, list):
        return tuple(_param_from_json(v) for v in value)
    return value


def _rebuild(code: str, params: dict) -> Notice:
    return Notice(code, **params)


def _format(lang: str, code: str, params: dict) -> str:
    if code in ("_join", "_list"):
        sep = {("_join", "zh"): "；", ("_list", "zh"): "、", ("_join", "en"): "; "}.get((code, lang), ", ")
        return sep.join(v.render(lang) if isinstance(v, Notice) else str(v) for v in params["items"])
    values = {k: (v.render(lang) if isinstance(v, Notice) else v) for k, v in params.items()}
    return CATALOGUE[lang][code].format(**values)


def localize(message: object, lang: str) -> str:
    """``message`` in ``lang`` when it is a ``Notice`` (also the first argument of an exception), else ``str``."""
    if isinstance(message, BaseException) and message.args and isinstance(message.args[0], Notice):
        message = message.args[0]
    return message.render(lang) if isinstance(message, Notice) else str(message)


def message_of(exc: BaseException) -> str:
    """An exception's message, kept as its ``Notice`` when it has one (so a door can still render it), else
    ``str(exc)``."""
    if exc.args and isinstance(exc.args[0], Notice) and len(exc.args) == 1:
        return exc.args[0]
    return str(exc)


def localize_record(record: dict, field: str, lang: str) -> object:
    """A results.jsonl record's ``field`` ("error": a str or None; "warnings": a list) in ``lang``, from its
    ``<field>_i18n`` twin (``Notice.to_json``) where the record has one, else as stored."""
    stored = record.get(field)
    twin = record.get(field + "_i18n")
    if isinstance(stored, list):
        twins = twin if isinstance(twin, list) and len(twin) == len(stored) else [None] * len(stored)
        return [_render_twin(t, s, lang) for s, t in zip(stored, twins)]
    return None if stored is None else _render_twin(twin, stored, lang)


def _render_twin(twin: object, stored: object, lang: str) -> str:
    notice = Notice.from_json(twin) if twin is not None else None
    return notice.render(lang) if notice is not None else str(stored)


def to_json(message: object) -> dict | None:
    """``message.to_json()`` for a ``Notice``, else None (a plain string has no twin)."""
    return message.to_json() if isinstance(message, Notice) else None


def join(notices: list) -> Notice:
    """Several problems as one parameter value ("a; b" in English, "a；b" in Chinese)."""
    return Notice("_join", items=tuple(notices))


def listing(items: list) -> Notice:
    """Several names or places as one parameter value ("a, b" in English, "a、b" in Chinese); items may be
    notices or plain strings."""
    return Notice("_list", items=tuple(items))
