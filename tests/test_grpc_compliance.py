"""The protocol actually used decides §4.6.1's recommendation and is reported per §4.6.2 (issue 51): over
gRPC a Model Engine meets 4.6.1-SHOULD-2, over SSE it stays unmet with the reason; results.json names it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_llmbench.sut.system import output_tokenizer


def test_output_tokenizer_from_the_servers_tokenizer_path(tmp_path: Path) -> None:
    assert output_tokenizer("cl100k_base")[0] == "cl100k_base"
    (tmp_path / "tokenizer.json").write_text("{}")
    assert output_tokenizer(str(tmp_path))[0] == f"hf:{tmp_path / 'tokenizer.json'}"
    name, why = output_tokenizer("meta-llama/Llama-3-8B")
    assert name is None and "not decoded" in why




def _run_5_1(pytester: pytest.Pytester, *args: str) -> dict[str, Any]:
    pytester.makepyfile(test_g='''
import pytest
from pytest_llmbench import poisson

@pytest.mark.llm_procedure("5.1", requests=60, load=poisson(rate=40), max_output_tokens=8)
def test_run(llm_result):
    pass
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-report", "rep", "--llm-time-scale", "0.1",
                                           *args, timeout=300)
    result.assert_outcomes(passed=1)
    return json.loads((pytester.path / "rep" / "results.json").read_text())


def _item(doc: dict[str, Any], rid: str) -> dict[str, Any]:
    (proc,) = doc["procedures"]
    return next(i for i in proc["compliance"]["items"] if i["id"] == rid)


def test_over_grpc_a_model_engine_meets_4_6_1_should_2(pytester: pytest.Pytester) -> None:
    doc = _run_5_1(pytester, "--llm-endpoint", "grpc://embedded")
    assert doc["sut"]["protocol"] == "grpc" and doc["sut"]["base_url"].startswith("grpc://127.0.0.1:")
    should = _item(doc, "4.6.1-SHOULD-2")
    assert should["status"] == "met" and should["source"] == "measured", should
    assert should["evidence"] == "responses streamed over gRPC, as §4.6.1 recommends for a model engine boundary"
    assert should["data"] == {"protocol": "grpc"}
    named = _item(doc, "4.6.2-MUST-1")
    assert named["status"] == "met" and named["data"]["protocol"] == "grpc", named
    assert named["evidence"] == "protocol used: gRPC streaming"


def test_over_sse_a_model_engine_leaves_4_6_1_should_2_unmet_with_the_reason(pytester: pytest.Pytester) -> None:
    doc = _run_5_1(pytester)
    assert doc["sut"]["protocol"] == "sse"
    should = _item(doc, "4.6.1-SHOULD-2")
    assert should["status"] == "unmet", should
    assert should["evidence"] == ("responses streamed over SSE; §4.6.1 recommends gRPC streaming for a model engine "
                                  "boundary")
    assert "grpc://host:port" in should["fix"]
    assert _item(doc, "4.6.2-MUST-1")["data"]["protocol"] == "sse"
