"""Issue 29: the ``segment_context`` setting at the command line (synth / batch default), in a JSONL line, and in
the sidecar's settings (what ran, and where it came from)."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

import pytest

from tests.fakes import FAKE_FACTS
from tts_app.cli.args import add_generation_args, params_from_args
from tts_app.errors import JobLineError
from tts_app.jobs.schema import _line_params
from tts_app.outputs import SOURCE_REQUEST, generation_settings
from tts_app.request import SynthesisParams


def _parse(argv: list[str]) -> SynthesisParams:
    parser = argparse.ArgumentParser()
    add_generation_args(parser)
    return params_from_args(parser.parse_args(argv))


def test_the_command_line_flag_turns_it_on_and_it_is_off_by_default():
    assert _parse(["--segment-context"]).segment_context is True
    assert _parse([]).segment_context is False


def test_a_jsonl_line_takes_it_as_a_boolean_and_names_a_bad_value():
    assert _line_params(json.loads('{"segment_context": true}'), 3) == {"segment_context": True}
    with pytest.raises(JobLineError) as bad:
        _line_params({"segment_context": "yes"}, 4)
    assert "segment_context" in str(bad.value)


def test_the_sidecar_says_what_ran_and_why():
    offered = replace(FAKE_FACTS, supports_segment_context=True)
    asked = SynthesisParams(segment_context=True)
    settings, sources = generation_settings(offered, asked, asked)
    assert settings["segment_context"] is True and sources["segment_context"] == SOURCE_REQUEST
    settings, sources = generation_settings(FAKE_FACTS, asked, replace(asked, segment_context=False))  # ignored
    assert settings["segment_context"] is False and sources["segment_context"].startswith("ignored")
    settings, sources = generation_settings(offered, SynthesisParams(), SynthesisParams())
    assert settings["segment_context"] is False and sources["segment_context"].startswith("off")
