"""One way to build a check and an honest source kind on every item (issue 29)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_llmbench.compliance import Check, ComplianceError, Status, decide
from pytest_llmbench.compliance.engine import finalize, item, item_data
from pytest_llmbench.compliance.verdict import SOURCES

#: fidelity-audit-2 §2.2: the 37 MUST/SHOULD items no run could make unmet
AUDIT_37 = (
    "5.1.5-MUST-1", "5.1.5-MUST-3", "5.1.5-MUST-4", "5.1.5-MUST-5", "5.1.5-MUST-6", "5.1.4-MUST-2", "5.1.3-MUST-1",
    "5.1.5-SHOULD-1", "5.1.4-SHOULD-1", "5.1.5-SHOULD-2", "5.1.2-MUST-5", "5.1.2-MUST-6", "5.1.2-MUST-7",
    "5.1.2-MUST-9", "5.2.2-MUST-3", "5.2.2-MUST-2", "5.2.2-MUST-4", "5.2.2-MUST-5", "5.3.2-MUST-1", "5.6.2-MUST-1",
    "5.9.2-MUST-1", "4.3.2-MUST-2", "4.3.3-MUST-1", "4.3.3-MUST-2", "4.3.3-SHOULD-1", "4.4.1-MUST-1",
    "4.4.1-MUST-2", "4.4.1-MUST-3", "4.2.6-MUST-5", "4.5.3-MUST-2", "4.6.1-SHOULD-1", "4.6.2-MUST-1",
    "4.6.2-MUST-3", "4.6.3-MUST-1", "4.7.4-MUST-1", "4.7.4-SHOULD-1", "4.8.1-MUST-4",
)
#: of the 37, the items given an observation that can fail instead of the construction label
OBSERVED = {"5.1.5-SHOULD-2",
            # the server's tokenizer under server counts, or needs-declaration (tests/test_itl_method.py)
            "4.4.1-MUST-1", "4.4.1-MUST-2", "4.4.1-MUST-3",
            # 5.9 below an App. A.5 length runs a custom workload (issue 36; tests/test_procedure_5_9.py)
            "5.9.2-MUST-1", "4.3.2-MUST-2",
            # the workload's standing as run: a capped Synthetic-Skewed is custom (issue 48)
            "5.6.2-MUST-1",
            # the protocol the run's requests used against the boundary: SSE or gRPC (issue 51;
            # tests/test_grpc_compliance.py)
            "4.6.1-SHOULD-1",
            # a fraction of a lower-bound capacity needs a declaration (issue 48); a rate shape or a replayed
            # trace is no draft distribution at one rate (issue 50; test_rate_shapes.py, test_trace_replay.py)
            "5.1.2-MUST-6", "5.1.2-MUST-7"}


def test_the_audit_counts_37() -> None:
    assert len(set(AUDIT_37)) == 37


@pytest.mark.parametrize("rid", AUDIT_37)
def test_each_audit_item_is_construction_with_a_reason_or_an_observation(rid: str) -> None:
    data = item(rid)
    if rid in OBSERVED:
        assert "construction" not in data
    else:
        assert len(str(data.get("construction", ""))) > 20, f"{rid}: construction needs its reason"
        assert data.get("source") in SOURCES, f"{rid}: the kind of an unmet outcome"


def test_the_observed_one_fails_on_a_run_where_every_request_failed() -> None:
    """5.1.5-SHOULD-2: a run whose every request failed has no TTFT sample, so no histogram."""
    c = decide("5.1.5-SHOULD-2", samples=0)
    assert c.status is Status.UNMET and c.source == "measured" and c.reason == "no TTFT samples to plot"
    assert decide("5.1.5-SHOULD-2", samples=10).status is Status.MET


def test_a_met_construction_item_says_so_with_its_reason_and_an_unmet_one_does_not() -> None:
    met = decide("5.1.4-SHOULD-1", buckets=["0-256", "256-512"])
    assert met.source == "construction" and met.evidence["construction"] == item("5.1.4-SHOULD-1")["construction"]
    unmet = decide("5.1.4-SHOULD-1", buckets=[])
    assert unmet.status is Status.UNMET and unmet.source == "measured" and "construction" not in unmet.evidence


def test_a_declaration_keeps_its_own_source_on_a_construction_item() -> None:
    c = finalize(Check("4.4.1-MUST-1", Status.MET, "declared", {}, "declared"))
    assert c.source == "declared"


def test_finalize_raises_for_a_check_without_a_source() -> None:
    rid = "5.1.4-REPORT-1"
    data = item_data()["items"]
    saved = data.pop(rid)  # an item the data gives no source (every decided item has one since issue 48)
    try:
        _finalize_raises(rid)
    finally:
        data[rid] = saved


def _finalize_raises(rid: str) -> None:
    assert "source" not in item(rid)
    with pytest.raises(ComplianceError, match=f"{rid}: the check names no source kind"):
        finalize(Check(rid, Status.MET, "Table 1"))
    assert finalize(Check(rid, Status.MET, "Table 1", source="measured")).source == "measured"


def test_every_item_datum_names_a_known_source() -> None:
    for rid, d in item_data()["items"].items():
        assert d.get("source") in SOURCES, rid


def test_a_row_carries_id_observation_wording_and_source() -> None:
    met = decide("5.2.3-PARAM-2", ok=True, met="3 levels", unmet="no level ran", levels=[1, 2, 3])
    assert (met.status, met.reason, met.evidence, met.source) == (Status.MET, "3 levels", {"levels": [1, 2, 3]},
                                                                  "measured")
    unmet = decide("5.2.3-PARAM-2", ok=False, met="3 levels", unmet="no level ran")
    assert (unmet.status, unmet.reason) == (Status.UNMET, "no level ran")
    na = decide("5.2.3-PARAM-8", ok=None, na="closed loop: arrivals equal completions")
    assert na.status is Status.NOT_APPLICABLE and na.source == "not-applicable"
    needs = decide("5.8.3-PARAM-6", ok=None, needs="automatic summary: none")
    assert needs.status is Status.NEEDS_DECLARATION
    with pytest.raises(ComplianceError, match="must be True, False or None"):
        decide("5.2.3-PARAM-2", ok=3, met="x", unmet="y")
    with pytest.raises(ComplianceError, match="no wording"):
        decide("5.2.3-PARAM-2", ok=False, met="x")
    with pytest.raises(ComplianceError, match="cannot invent"):
        decide("X-MUST-1", ok=True, met="x")


def test_the_document_schema_knows_every_source() -> None:
    schema = json.loads((Path(__file__).resolve().parents[1] / "pytest_llmbench" / "document" / "schema.json")
                        .read_text(encoding="utf-8"))
    text = json.dumps(schema)
    assert '"construction"' in text
    for s in SOURCES:
        assert f'"{s}"' in text, s
