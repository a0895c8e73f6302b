"""Findings to read first (document/headline.py): each kind of finding once with the procedures it
concerns, most severe first; a procedure with failed requests names its most frequent error message
and count (from the runs' load summaries, procedures/run.error_messages).

Built on the stored smoke document (tests/data/results-smoke.json.gz), re-annotated; a copy of its
5.1 is turned into the real-server case the issue describes: half the requests answered HTTP 400.
"""

from __future__ import annotations

import copy
import gzip
import json
import re
from pathlib import Path
from typing import Any

import pytest
from factories import make_record

from pytest_llmbench.common.records import ErrorType, RequestRecord
from pytest_llmbench.document.headline import FINDING_KINDS, annotate, findings, item_titles
from pytest_llmbench.procedures.run import error_messages
from pytest_llmbench.report import render_html, render_markdown, terminal_rows

DATA = Path(__file__).parent / "data" / "results-smoke.json.gz"
CONTEXT = "This model's maximum context length is 2048 tokens. However, you requested {} tokens."


def _record(i: int, *, status: int | None = None, message: str | None = None,
            error: ErrorType | None = None) -> RequestRecord:
    return make_record(i, chunks=(), spec_input_tokens=10, max_tokens=4, status=status, error_message=message,
                       error_type=error)


def test_error_messages_count_one_reason_whatever_its_numbers() -> None:
    recs = ([_record(i, status=400, message=CONTEXT.format(2100 + i), error=ErrorType.HTTP_4XX) for i in range(5)]
            + [_record(9, status=503, message="overloaded", error=ErrorType.HTTP_5XX)]
            + [_record(10, message="cancelled by the load generator", error=ErrorType.CANCELLED)]  # not a failure
            + [_record(11, status=200)])
    top = error_messages(recs)
    assert top[0] == {"message": "HTTP 400: " + CONTEXT.format(2100), "type": "http_4xx", "count": 5}
    assert top[1:] == [{"message": "HTTP 503: overloaded", "type": "http_5xx", "count": 1}]
    assert error_messages([_record(0, status=200)]) == []


@pytest.fixture
def doc() -> dict[str, Any]:
    d = json.loads(gzip.decompress(DATA.read_bytes()).decode("utf-8"))
    half = copy.deepcopy(next(p for p in d["procedures"] if p["procedure"] == "5.1"))
    half.update(key="half-failed", anchor="p99-half", procedure="5.1")
    half["figures"]["success_rate"] = {"value": 0.5, "unit": "fraction"}
    run = half["result"]["runs"][0]
    run["load"].update(sent=300, ok=150, error_messages=[
        {"message": "HTTP 400: " + CONTEXT.format(2100), "type": "http_4xx", "count": 147},
        {"message": "HTTP 503: overloaded", "type": "http_5xx", "count": 3}])
    half["result"]["warnings"] = [{"kind": "failed_requests",  # what the procedure declares (pipeline)
                                   "text": "1 run(s) below 99% success (lowest: measure 150 of 300)"}]
    half["client_delay"] = {"flagged": True, "reasons": ["client delay 3.7 ms at P99 of ttft_p99 (6.4% of 58 ms)"]}
    run["valid"] = False  # and its one run failed the load generator's self-check
    next(p for p in d["procedures"] if p["procedure"] == "5.2")["result"]["runs"][0]["valid"] = False
    d["procedures"].append(half)
    p58 = next(p for p in d["procedures"] if p["procedure"] == "5.8")  # a 5.8 whose drain cancelled requests
    p58["result"]["warnings"] = [*p58["result"].get("warnings", []), {"kind": "cancelled", "text": "66 of 210 requests"}]
    annotate(d, item_titles())
    return d


def test_each_kind_once_most_severe_first_with_the_procedures_it_concerns(doc: dict[str, Any]) -> None:
    found = doc["headline"]["findings"]
    kinds = [f["kind"] for f in found]
    assert len(kinds) == len(set(kinds))  # each kind once
    order = [k for k, _ in FINDING_KINDS]
    assert kinds == sorted(kinds, key=order.index)  # most severe first
    by = {f["kind"]: f for f in found}
    # invalid runs in two procedures: one finding naming both, not two lines
    invalid = [p["procedure"] for p in by["invalid_runs"]["procedures"]]  # the two made invalid, and any the
    assert {"5.2", "5.1"} <= set(invalid) and len(invalid) == len(set(invalid))  # stored run had, each once
    assert kinds.index("failed_requests") < kinds.index("cancelled") < kinds.index("unfair")
    assert [p["procedure"] for p in by["failed_requests"]["procedures"]] == ["5.10", "5.1"]
    assert by["unfair"]["procedures"][0]["text"].startswith("Jain index per request 0.")
    assert findings([]) == []


def test_failed_requests_name_the_most_frequent_error_and_its_count(doc: dict[str, Any]) -> None:
    half = next(p for p in doc["procedures"] if p["key"] == "half-failed")
    (failed,) = [w for w in half["warnings"] if w.startswith("success rate")]
    assert failed == ("success rate 50.0%; 1 run(s) below 99% success (lowest: measure 150 of 300); most frequent "
                      "error: HTTP 400: " + CONTEXT.format(2100) + " (http_4xx) x147")
    assert "client timing flagged: client delay 3.7 ms" in "; ".join(half["warnings"])
    # the terminal, report.md and report.html show each kind once, with its procedures
    lines = [line for line in terminal_rows(doc) if line.startswith("  ⚠ ")]
    assert len(lines) == len(doc["headline"]["findings"])
    assert lines[0].startswith("  ⚠ runs invalid (load generator self-check): 5.2: 1 of ") and "5.1: 1 of 1 run(s)" in lines[0]
    assert any(line.startswith("  ⚠ requests failed: 5.10: success rate ") and "5.1: success rate 50.0%" in line
               and "x147" in line for line in lines)
    md = render_markdown(doc)
    assert "- **requests failed** — 5.10: success rate " in md and "maximum context length is 2048" in md
    assert "<strong>requests failed</strong>" in render_html(doc)


def test_a_standard_workload_run_only_altered_is_named_as_such() -> None:
    """4.3.2-MUST-1 at session end: the smoke profile's capped Synthetic-Uniform runs do not count as the
    workload as defined, and the item says that they ran altered (custom), not that none ran."""
    from types import SimpleNamespace

    from pytest_llmbench.compliance import RunFacts, Status, evaluate_test, rejudge_session

    def result(proc: str, name: str, base: str) -> SimpleNamespace:
        facts = RunFacts(sut_boundary="model-engine", workload={"name": name, "base": base, "custom": True})
        return SimpleNamespace(procedure=proc, facts=facts, checks={}, measurements={},
                               compliance=evaluate_test(proc, {}, facts))

    capped = result("5.1", "synthetic-uniform (custom: output capped at 64 tokens)", "synthetic-uniform")
    cache = result("5.7", "code-completion (custom: output capped at 16 tokens)", "code-completion")
    item = rejudge_session({"a": capped, "b": cache})["b"].compliance["4.3.2-MUST-1"]
    assert item.status is Status.UNMET
    assert item.reason == ("no synthetic-uniform run as defined in this report (workload: code-completion); 1 altered "
                           "by the profile or the marker, so custom: synthetic-uniform (custom: output capped at 64 "
                           "tokens)")


def test_a_success_rate_lowered_only_by_cancelled_requests_is_not_called_failures(doc: dict[str, Any]) -> None:
    """5.8 counts requests cancelled at the drain against its success rate; with no request failed the
    finding is the cancellation, not "requests failed" (which would send a reader looking for errors)."""
    from pytest_llmbench.document.headline import procedure_findings

    p58 = copy.deepcopy(next(p for p in doc["procedures"] if p["procedure"] == "5.8"))
    p58["figures"]["success_rate"] = {"value": 0.686, "unit": "fraction"}
    # what 5.8 declares when its drain cancels requests (procedures/helpers.cancelled_findings); no error
    p58["result"]["warnings"] = [{"kind": "cancelled", "text": "66 of 210 requests"}]
    assert not any((r.get("metrics") or {}).get("errors_by_type") for r in p58["result"]["runs"])
    kinds = {f["kind"]: f["text"] for f in procedure_findings(p58)}
    assert "failed_requests" not in kinds
    assert re.fullmatch(r"\d+ of \d+ requests \(success rate 68\.6%: none failed; the cancelled count against it\)",
                        kinds["cancelled"]), kinds["cancelled"]
    p58["result"]["runs"][1]["metrics"]["errors_by_type"] = {"http_5xx": 2}  # one real failure changes that
    assert "failed_requests" in {f["kind"] for f in procedure_findings(p58)}
