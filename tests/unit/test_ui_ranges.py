"""A number outside its widget's range, sent by an API caller (gradio_client), is refused with our message: the
field's label and parameter name, the value and the range, in the caller's language, and no traceback in the server
log (was gradio's "Value -1 is less than minimum value 0." with a traceback); on the composed server in-process."""

from __future__ import annotations

import json

import pytest

from tests.composed_app import Browser, composed_app_at


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with composed_app_at(tmp_path_factory.mktemp("ranges")) as composed:
        yield composed


def _bounded_parameters(server) -> list[tuple[str, str, int, list, dict]]:
    """(api name, parameter name, its index, default data, its component's props) for every bounded number input
    (slider or number box) of every named endpoint."""
    config = server.client.get("/config").json()
    components = {c["id"]: c for c in config["components"]}
    info = server.client.get("/gradio_api/info").json()["named_endpoints"]
    found = []
    for dep in config["dependencies"]:
        name = dep.get("api_name")
        if not name or f"/{name}" not in info:
            continue
        params = info[f"/{name}"]["parameters"]
        inputs = [components[i] for i in dep["inputs"] if components[i]["type"] != "state"]
        assert len(inputs) == len(params), name
        for index, (component, param) in enumerate(zip(inputs, params)):
            props = component.get("props", {})
            if component["type"] in ("slider", "number") and (props.get("minimum") is not None
                                                              or props.get("maximum") is not None):
                found.append((name, param["parameter_name"], index, [p.get("parameter_default") for p in params],
                              props))
    return found


def test_every_bounded_number_is_refused_in_the_callers_words(server, capfd):
    found = _bounded_parameters(server)
    assert {(api, p) for api, p, *_ in found} >= {("synthesize", "seed"), ("synthesize", "temperature"),
                                                   ("synthesize", "speed"), ("synthesize", "happy"),
                                                   ("synthesize_dialogue", "seed"), ("submit_job", "seed")}
    zh, en = Browser(server.client, **{"accept-language": "zh-CN"}), Browser(server.client)
    capfd.readouterr()
    for api, param, index, defaults, props in found:
        low, high = props.get("minimum"), props.get("maximum")
        value = low - 1 if low is not None else high + 1
        data = list(defaults)
        data[index] = value
        for browser, words in ((en, ("is below its minimum", "is outside its range", "is above its maximum")),
                               (zh, ("低于最小值", "超出范围", "高于最大值"))):
            outcome = browser.result(api, browser.call(api, data).json()["event_id"])
            assert "event: error" in outcome, (api, param, outcome)
            text = json.loads(outcome.split("data: ", 1)[1].splitlines()[0])["error"]
            assert f"({param}) = {value:g}" in text and any(w in text for w in words), (api, param, text)
    assert "Traceback" not in capfd.readouterr().err


def test_a_value_that_is_not_one_of_a_choice_inputs_choices_is_refused_in_the_callers_words(server, capfd):
    """A radio's value outside its choices from an API caller (reference_cleanup="bogus") gets our message naming
    the field and the choices, en and zh, no traceback (was gradio's "Value: 'bogus' (type: <class 'str'>) is not in
    the list of choices: ['auto', 'full', 'off']")."""
    info = server.client.get("/gradio_api/info").json()["named_endpoints"]["/synthesize"]["parameters"]
    names = [p["parameter_name"] for p in info]
    data = [p.get("parameter_default") for p in info]
    data[names.index("reference_cleanup")] = "bogus"
    capfd.readouterr()
    for browser, words in ((Browser(server.client), "is not one of its choices (auto, full, off)"),
                           (Browser(server.client, **{"accept-language": "zh-CN"}), "不是可选值之一（auto, full, off）")):
        outcome = browser.result("synthesize", browser.call("synthesize", data).json()["event_id"])
        assert "event: error" in outcome, outcome
        text = json.loads(outcome.split("data: ", 1)[1].splitlines()[0])["error"]
        assert "(reference_cleanup) = 'bogus'" in text and words in text, text
    assert "Traceback" not in capfd.readouterr().err
