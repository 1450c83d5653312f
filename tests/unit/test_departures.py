"""Issue 24: each family's departures from its upstream tool are one list (``TTSAdapter.departures`` +
``COMMON_DEPARTURES``), written into every output's sidecar and said in the same words in the README's "How each model
is run" table."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.fakes import FAKE_FACTS, FakeAdapter
from tts_app.adapters import FAMILIES, adapter_class
from tts_app.adapters.base import COMMON_DEPARTURES
from tts_app.config import EngineConfig
from tts_app.request import SynthesisParams, SynthesisRequest
from tts_app.runtime import Runtime

README = Path(__file__).resolve().parents[2] / "README.md"


def _table_rows() -> tuple[dict[str, str], str]:
    """The "How each model is run" table: (first cell -> its row, the whole section), whitespace collapsed."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### How each model is run"):]
    section = section[:section.index("\n## ")]
    return {line.split("|")[1].strip(): " ".join(line.split()) for line in section.splitlines()
            if line.startswith("| ") and not line.startswith("| family")}, " ".join(section.split())


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_departure_is_in_the_readme_table_in_the_same_words(family):
    pytest.importorskip("transformers")
    cls = adapter_class(family)
    rows, section = _table_rows()
    assert cls.departures, f"{family}: no departures listed"
    row = rows[cls.display_name]
    for sentence in cls.departures:
        assert sentence in row, (family, sentence)
    for sentence in COMMON_DEPARTURES:
        assert sentence in section


def test_the_sidecar_lists_the_models_departures(data_dir):
    from tts_app.outputs import output_metadata

    facts = replace(FAKE_FACTS, departures=("the fake speaks noise, because it is a fake",))
    runtime = Runtime.from_adapter(FakeAdapter(facts=facts), "fake", EngineConfig(wait_window_ms=0))
    try:
        reference = runtime.references.prepare(data_dir / "en_female_1.wav")
        request = SynthesisRequest(text="Hello there.", reference_audio=reference.audio, params=SynthesisParams())
        result = runtime.engine.submit(request).result(timeout=60)
        assert result.ok, result.error
        sidecar = output_metadata(runtime, request, result, entry_point="synth", reference=reference)
    finally:
        runtime.close()
    assert json.loads(json.dumps(sidecar))["departures"] == ["the fake speaks noise, because it is a fake"]
