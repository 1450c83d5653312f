"""A zh-CN browser on the shared app, which runs WITHOUT --lang: after a refused reference upload and a text with a
pinyin override (Single tab), a job with bad lines (Batch tab: Validate, then Run), a dialogue script error
(Dialogue tab) and with the memory chart drawn (Memory tab), no tab shows an English word (text, pop-ups, the
placeholders of text boxes) beyond proper names, model names, units, file names and the JSON field names a user
types."""

from __future__ import annotations

import re

import pytest

from tests.ui_app import screenshot_dir
from tts_app.config import REFERENCE_CLEANUPS
from tts_app.jobs.schema import KNOWN_FIELDS
from tts_app.quality.policy import TAKE_CHECKS
from tts_app.monitor import _cpu_name

pytestmark = pytest.mark.e2e

# Words that are the same in a Chinese page: names (of the app, models, libraries, formats), units, the JSON
# fields and values a task file holds, the knobs' own names, and dialogue-script syntax.
ALLOWED = {
    "tts_app", "gradio", "api", "vibevoice", "dia", "csm", "higgs", "indextts", "whisper", "json", "jsonl", "zip",
    "utf", "gbk", "gb18030", "wav", "flac", "mp3", "ogg", "m4a", "opus", "srt", "kv", "cfg", "top", "token", "oom",
    "id", "hz", "khz", "db", "dbfs", "ms", "gib", "mib", "lufs", "snr", "nan", "pcm", "speaker", "s1",
    "input_text", "syn_text", "prompt_audio", "prompt_speech", "prompt_text", "output_name", "uttid", "format", "seed",
    "greedy", "temperature", "top_p", "top_k", "cfg_scale", "max_new_tokens", "voice", "script", "speakers",
    "true", "false", "max", "batch", "size", "mei", "voices", "hello", "pause", "zhong", "yin", "hang",
    "en", "zh", "s", "x", "b", "p", "k",  # language codes (the model's languages), seconds, the speed factor (1x), bytes
    "results",  # the results ZIP's file name, which gr.File shows apart from its ".zip"
    "tiny",  # the shared app's model is a folder named tiny-vibevoice-00: the page names the model by its folder
    "cpu", "gpu", "cuda",  # the devices, written so in Chinese too
}
# ... and every field a task line may hold (the Batch tab's help lists them all), the values of the reference-cleanup
# and take-check choices (a task line writes them so; the labels explain them in Chinese), and the model names the
# help names (GLM-TTS, Higgs Audio v2)
ALLOWED |= KNOWN_FIELDS | set(REFERENCE_CLEANUPS) | set(TAKE_CHECKS) | {"glm", "tts", "audio"}
# ... and the words of this machine's device name (the Memory tab names it: "AMD EPYC", "NVIDIA H200")
ALLOWED |= {w.lower() for w in re.findall(r"[A-Za-z]+", _cpu_name())}
FILE_NAME = re.compile(r"[\w./\\-]+\.(?:wav|jsonl|json|zip|mp3|flac|ogg|m4a|opus|srt|txt)\b|\S*/\S*", re.IGNORECASE)


#: pinyin, the notation of a reading: with a tone number (chong2, YIN2) or tone marks (zhòng)
PINYIN = re.compile(r"(?<![A-Za-z])[A-Za-z]*[āáǎàēéěèīíǐìōóǒòūúǔùǖǘǚǜü][A-Za-z]*|\b[A-Za-z]+[1-5]\b")
#: what the user typed, quoted back in a message ('text', "x"), and command-line flags (--audio-dir)
QUOTED_OR_FLAG = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"|--[\w-]+")


def english_words(text: str) -> list[str]:
    """Latin-letter words of ``text`` outside file names, quoted values, flags and the allow-list
    (case-insensitive)."""
    text = PINYIN.sub(" ", QUOTED_OR_FLAG.sub(" ", FILE_NAME.sub(" ", text)))
    words = re.findall(r"(?<![A-Za-z0-9_])[A-Za-z][A-Za-z0-9_]*(?:-[A-Za-z0-9]+)*", text)
    return sorted({w for w in words if w.lower() not in ALLOWED and not re.fullmatch(r"[a-z]?\d\w*", w.lower())
                   and not re.fullmatch(r"[0-9a-f]*\d[0-9a-f]*|[0-9a-f]{8}", w.lower())  # a job id's hex part
                   and not all(part.lower() in ALLOWED or part.isdigit() for part in re.split(r"[-_]", w))})


@pytest.fixture(scope="module")
def zh_page(app_url, browser):
    context = browser.new_context(locale="zh-CN", viewport={"width": 1280, "height": 1600})
    page = context.new_page()
    page.goto(app_url)
    page.wait_for_selector("#generate", timeout=60_000)
    yield page
    context.close()


def _visible_text(page) -> str:
    """What the user can read on the page now (hidden tabs excluded), the pop-ups, and the placeholders of the
    visible text boxes."""
    placeholders = page.evaluate("() => [...document.querySelectorAll('textarea[placeholder], input[placeholder]')]"
                                 ".filter(e => e.offsetParent !== null).map(e => e.placeholder).join('\\n')")
    return page.locator("body").inner_text() + "\n" + placeholders


def test_single_tab_in_chinese_after_a_refused_reference(zh_page, data_dir):
    page = zh_page
    page.locator("#ref-audio input[type=file]").set_input_files(str(data_dir / "silence_digital_5s.wav"))
    report = page.locator("#ref-report")
    report.filter(has_text="✖").wait_for(timeout=60_000)
    assert "数字静音" in report.inner_text()
    page.locator("#text textarea").fill("重(chong2)新开始，还是行。")  # the preview's categories, in Chinese
    page.locator("#preview").filter(has_text="指定读音").wait_for(timeout=30_000)
    for accordion in ("#settings", "#voice-library"):  # a closed accordion hides its labels
        page.locator(f"{accordion} > button").first.click()
    page.get_by_text("每段最大字数", exact=False).last.wait_for()  # a label inside the opened Settings
    page.screenshot(path=str(screenshot_dir() / "zh-single-refused.png"), full_page=True)
    words = english_words(_visible_text(page))
    assert words == [], words


def test_batch_tab_in_chinese_after_a_job_with_bad_lines(zh_page, tmp_path):
    page = zh_page
    job = tmp_path / "任务.jsonl"
    job.write_text('{"input_text": "你好", "prompt_audio": "voices/missing.wav"}\n'
                   '{"text": "你好", "colour": 1}\n'
                   '{"input_text": "你好", "seed": "x", "prompt_audio": "a.wav"}\n'
                   'not json\n', encoding="utf-8")
    page.get_by_role("tab", name="批量（JSONL）").click()
    for accordion in ("任务文件的写法（字段、示例、模板）", "任务设置（批大小、KV 缓存、贪心解码、种子、输出格式）"):
        page.get_by_text(accordion, exact=True).click()
    page.locator("#jsonl-help").wait_for()
    page.locator("#jsonl input[type=file]").set_input_files(str(job))
    page.locator("#validate").click()
    validation = page.locator("#validation")
    validation.filter(has_text="找不到 prompt_audio").wait_for(timeout=60_000)
    assert "错误" in validation.inner_text() and "缺少字段" in validation.inner_text()
    page.locator("#run-job").click()
    page.locator("#job-results").filter(has_text="JSON 格式错误").wait_for(timeout=120_000)
    page.locator("#job-progress [data-status=done]").wait_for(timeout=60_000)
    page.screenshot(path=str(screenshot_dir() / "zh-batch-bad-lines.png"), full_page=True)
    text = _visible_text(page)
    assert "失败" in text
    words = english_words(text)
    assert words == [], words


def test_dialogue_tab_in_chinese_after_a_script_error(zh_page):
    page = zh_page
    page.get_by_role("tab", name="对话").click()
    page.locator("#script textarea").wait_for()
    words = english_words(_visible_text(page))  # the example script in the empty box too
    assert words == [], words
    page.locator("#script textarea").fill("大家好。\nSpeaker 1: 你好。")
    page.locator("#generate-dialogue").click()
    page.locator('[data-testid="toast-text"]').filter(has_text="没有指明说话人").first.wait_for(timeout=60_000)
    page.locator(".toast-title").filter(has_text="错误").first.wait_for(timeout=10_000)  # gradio's "Error" title
    page.screenshot(path=str(screenshot_dir() / "zh-dialogue-error.png"), full_page=True)
    words = english_words(_visible_text(page))
    assert words == [], words
    for close in page.locator('[data-testid="toast-close"]').all():
        close.click()


def test_memory_tab_in_chinese_with_the_chart_drawn(zh_page):
    page = zh_page
    page.get_by_role("tab", name="内存 / 显存").click()
    page.locator("#gauge").filter(has_text="GiB").wait_for(timeout=30_000)
    page.locator("#gauge-plot canvas, #gauge-plot svg").first.wait_for(timeout=30_000)  # the chart is drawn
    page.screenshot(path=str(screenshot_dir() / "zh-memory.png"), full_page=True)
    words = english_words(_visible_text(page))
    assert words == [], words
