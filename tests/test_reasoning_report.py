"""Reasoning models in the reports (issue 49): hidden reasoning and requests that ended while thinking are
findings (headline: summary.md, report, terminal), each procedure's phases a bar in the HTML report, the
phase figures in results.json; an SLO a hidden run cannot observe says so in the judged-SLO table.

Built on the stored smoke document (tests/data/results-smoke.json.gz), its 5.1 run given phase figures."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from factories import make_record

from pytest_llmbench.document.headline import annotate, item_titles, procedure_findings
from pytest_llmbench.measure.summary import summarize
from pytest_llmbench.report import render_html, render_markdown, terminal_rows
from pytest_llmbench.report.phases import phase_bar
from pytest_llmbench.report.render import slo_rows

DATA = Path(__file__).parent / "data" / "results-smoke.json.gz"


def hidden_metrics() -> dict[str, Any]:
    """A run's metrics as results.json stores them: 4 requests that each thought 30 tokens unseen, one of
    them (a streamed thinker) cut off while thinking."""
    u = {"prompt_tokens": 10, "completion_tokens": 33, "completion_tokens_details": {"reasoning_tokens": 30}}
    recs = [make_record(i, sent=1000.0 * i, chunks=[(1000 * i + 200, "a", "", 1), (1000 * i + 220, " b", "", 1)],
                        output_tokens_client=2, output_tokens_server=33, usage=u) for i in range(4)]
    recs.append(make_record(9, sent=9000.0, chunks=[(9050, "", "hm", 1)], output_tokens_client=1,
                            reasoning_tokens_client=1, finish_reason="length"))
    return json.loads(json.dumps(summarize(recs).to_json()))


@pytest.fixture
def doc() -> dict[str, Any]:
    d = json.loads(gzip.decompress(DATA.read_bytes()).decode("utf-8"))
    p51 = next(p for p in d["procedures"] if p["procedure"] == "5.1")
    p51["result"]["metrics"] = hidden_metrics()
    p51["result"]["runs"][0]["metrics"] = copy.deepcopy(p51["result"]["metrics"])
    annotate(d, item_titles())
    return d


def test_hidden_reasoning_and_ended_while_thinking_are_findings(doc: dict[str, Any]) -> None:
    p51 = next(p for p in doc["procedures"] if p["procedure"] == "5.1")
    kinds = {f["kind"]: f["text"] for f in procedure_findings(p51)}
    assert kinds["hidden_reasoning"] == "4 requests with 120 reasoning tokens counted by the server and none streamed"
    assert kinds["ended_while_thinking"] == "1 requests"
    found = {f["kind"]: f for f in doc["headline"]["findings"]}
    assert found["hidden_reasoning"]["title"].startswith("hidden reasoning (TTFT and ITL include unobserved thinking")
    assert any(line.startswith("  ⚠ hidden reasoning") and "5.1: 4 requests with 120" in line
               for line in terminal_rows(doc))
    assert "**hidden reasoning (TTFT and ITL include unobserved thinking" in render_markdown(doc)


def test_the_phase_bar_per_procedure(doc: dict[str, Any]) -> None:
    bar = phase_bar(next(p for p in doc["procedures"] if p["procedure"] == "5.1")["result"]["metrics"])
    shares = {s["key"]: s["share"] for s in bar["segments"]}
    # 4 requests: 200 ms waiting (hidden thinking inside) + 20 ms visible; 1: 50 ms waiting, then thinking to its end
    assert shares["waiting"] == pytest.approx((4 * 200 + 50) / (4 * 220 + 50))
    assert shares["visible"] == pytest.approx(4 * 20 / (4 * 220 + 50)) and shares["thinking"] == 0.0
    assert bar["segments"][0]["label"] == "waiting (hidden thinking included)" and "4 requests reasoned" in bar["caption"]
    html = render_html(doc)
    assert html.count('data-plot="phases"') == 1  # only the procedure whose run has phases
    assert phase_bar({"scalars": {}}) is None and phase_bar(None) is None


def test_an_unobservable_slo_says_so_in_the_table() -> None:
    from pytest_llmbench.measure.slo import evaluate

    u = {"prompt_tokens": 10, "completion_tokens": 33, "completion_tokens_details": {"reasoning_tokens": 30}}
    run = summarize([make_record(i, sent=1000.0 * i, output_tokens_client=4, output_tokens_server=33, usage=u)
                     for i in range(3)])
    r = evaluate("thinking_time.p50 <= 5s", run)
    test = {"nodeid": "t.py::test", "slo_results": [{"text": "thinking_time.p50 <= 5s", "outcome": r.verdict.value,
                                                      "method": r.method, "value": None, "judged": r.n, "n": r.n}]}
    (row,) = slo_rows({"tests": [test]})
    assert row[2] == "INCONCLUSIVE" and row[-1] == "not observable in this run (its message says why)"


def test_an_embedded_run_with_hidden_reasoning_is_flagged_end_to_end(pytester: pytest.Pytester) -> None:
    """The plugin with --llm-sim-reasoning hidden: 5.1's thinking-time SLO is INCONCLUSIVE with the reason
    (kept in slo_results), and summary.md, the report and 5.1's notes say "hidden reasoning" with the
    reasoning tokens the server counted."""
    pytester.makepyfile(test_think='''
import pytest

@pytest.mark.llm_procedure("5.1", slo=["thinking_time.p50 <= 5s"])
def test_ttft(llm_result):
    pass
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "--llm-report", "rep",
                                           "--llm-sim-reasoning", "hidden", "--llm-api", "chat",
                                           "--llm-capacity", "rate=40", "--llm-max-duration", "15", timeout=600)
    result.assert_outcomes(failed=1)  # INCONCLUSIVE fails by default (--llm-inconclusive fail)
    doc = json.loads((pytester.path / "rep" / "results.json").read_text())
    (judged,) = doc["tests"][0]["slo_results"]
    assert judged["outcome"] == "INCONCLUSIVE" and "hidden reasoning" in judged["message"]
    p51 = next(p for p in doc["procedures"] if p["procedure"] == "5.1")
    run = p51["result"]["runs"][0]["metrics"]
    hidden = int(run["scalars"]["hidden_reasoning_tokens"]["value"])
    assert hidden > 0 and run["scalars"]["hidden_reasoning_requests"]["value"] == p51["result"]["measurements"]["requests"]
    assert any(n.startswith("hidden reasoning: ") and f"{hidden} reasoning tokens" in n for n in p51["result"]["notes"])
    summary = (pytester.path / "rep" / "summary.md").read_text()
    assert "**hidden reasoning (TTFT and ITL include unobserved thinking" in summary and f"{hidden:,} reasoning" in summary
    assert 'data-plot="phases"' in (pytester.path / "rep" / "report.html").read_text()
