"""Findings to read first (document/headline.py): each kind of finding once with the procedures it
concerns, most severe first; a procedure with failed requests names its most frequent error message
and count (from the runs' load summaries, procedures/common.error_messages).

Built on the stored smoke document (tests/data/results-smoke.json.gz), re-annotated; a copy of its
5.1 is turned into the real-server case the issue describes: half the requests answered HTTP 400.
"""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_llmbench.common.records import ErrorType, RequestRecord
from pytest_llmbench.document.build import _item_titles
from pytest_llmbench.document.headline import FINDING_KINDS, annotate, findings
from pytest_llmbench.procedures.common import error_messages
from pytest_llmbench.report import render_html, render_markdown, terminal_rows

DATA = Path(__file__).parent / "data" / "results-smoke.json.gz"
CONTEXT = "This model's maximum context length is 2048 tokens. However, you requested {} tokens."


def _record(i: int, *, status: int | None = None, message: str | None = None,
            error: ErrorType | None = None) -> RequestRecord:
    r = RequestRecord(index=i, workload="w", spec_input_tokens=10, max_tokens=4)
    r.status, r.error_message, r.error_type = status, message, error
    return r


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
    half["client_delay"] = {"flagged": True, "reasons": ["client delay 3.7 ms at P99 of ttft_p99 (6.4% of 58 ms)"]}
    d["procedures"].append(half)
    annotate(d, _item_titles())
    return d


def test_each_kind_once_most_severe_first_with_the_procedures_it_concerns(doc: dict[str, Any]) -> None:
    found = doc["headline"]["findings"]
    kinds = [f["kind"] for f in found]
    assert len(kinds) == len(set(kinds))  # each kind once
    order = [k for k, _ in FINDING_KINDS]
    assert kinds == sorted(kinds, key=order.index)  # most severe first
    by = {f["kind"]: f for f in found}
    # the smoke document's invalid runs: one finding naming the nine procedures, not nine lines
    assert [p["procedure"] for p in by["invalid_runs"]["procedures"]] == [
        "5.1", "5.2", "5.3", "5.4", "5.5", "5.6", "5.8", "5.10", "5.1"]
    assert kinds.index("failed_requests") < kinds.index("cancelled") < kinds.index("unfair")
    assert [p["procedure"] for p in by["failed_requests"]["procedures"]] == ["5.10", "5.1"]
    assert by["unfair"]["procedures"][0]["text"].startswith("Jain index per request 0.55")
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
    assert lines[0].startswith("  ⚠ runs invalid (load generator self-check): 5.1: 1 of 1 run(s); 5.2: 6 of ")
    assert any(line.startswith("  ⚠ requests failed: 5.10: success rate 93.8%") and "5.1: success rate 50.0%" in line
               and "x147" in line for line in lines)
    md = render_markdown(doc)
    assert "- **requests failed** — 5.10: success rate 93.8%" in md and "maximum context length is 2048" in md
    assert "<strong>requests failed</strong>" in render_html(doc)
