"""Draft minimums count in the §2 verdict (issue 32): a row holding a run to a "Minimum" / "At least"
of §5.2–§5.9 or §6.3 (``items:`` in data/draft.yaml) counts as a SHOULD, and the verdict line names
the deviation."""

from __future__ import annotations

import asyncio

import pytest
from factories import StartHarness, checks_markdown

from pytest_llmbench.common import draft
from pytest_llmbench.compliance import Check, Status, Verdict, evaluate_test, registry, verdict_of
from pytest_llmbench.procedures.base import get_procedure
from pytest_llmbench.simulator import SimConfig

#: the list of the issue: every minimum of §5.2–§5.9 and §6.3 with its row
EXPECTED = {"5.2.2-PARAM-1": 60.0, "5.3.2-PARAM-2": 60.0, "5.3.2-PARAM-3": 10, "5.4.2-PARAM-1": 100,
            "5.5.3-PARAM-3": 60.0, "5.6.2-PARAM-3": 500, "5.6.3-PARAM-3": 300.0, "5.8.3-PARAM-4": 120.0,
            "5.9.2-PARAM-4": 20, "6.3-PARAM-1": 3}


def test_the_minimums_are_read_from_the_draft_numbers_file() -> None:
    mins = draft.minimums()
    assert set(mins) == set(EXPECTED)
    for rid, v in EXPECTED.items():
        assert registry()[rid].level == "PARAM"
        assert v in [draft.value(n) for n in mins[rid]], rid
        assert all(draft.entry(n)["kind"] == "minimum" for n in mins[rid])


def test_the_audits_short_run_is_no_longer_unconditionally_compliant() -> None:
    """fidelity-audit-2 §2.3 (b): these four unmet rows came out "unconditionally compliant"."""
    rows = [Check("5.6.2-PARAM-3", Status.UNMET, "30 per class < 500"),
            Check("5.6.3-PARAM-3", Status.UNMET, "mixed run lasted 3.0 s < 300 s"),
            Check("5.3.2-PARAM-2", Status.UNMET, "3 s per level"), Check("5.4.2-PARAM-1", Status.UNMET, "30 requests")]
    assert verdict_of(rows) is Verdict.CONDITIONAL
    assert verdict_of([Check("5.6.2-PARAM-3", Status.MET, "500 per class")]) is Verdict.UNCONDITIONAL
    # a PARAM row that is no minimum still does not touch the verdict
    assert verdict_of([Check("5.6.2-PARAM-2", Status.UNMET, "mix differs")]) is Verdict.UNCONDITIONAL


def test_the_verdict_line_names_the_deviation() -> None:
    checks = {"5.6.2-PARAM-3": Check("5.6.2-PARAM-3", Status.UNMET, "30 per class < 500 (successful requests: "
                                     "long 30)"),
              "5.6.3-PARAM-3": Check("5.6.3-PARAM-3", Status.MET, "mixed run submitted requests over 300.2 s")}
    res = evaluate_test("5.6", checks)
    assert res.deviations == ["5.6: 30 per class < 500 (successful requests: long 30) (§5.6.2)"]
    assert "below the draft's minimum: 5.6: 30 per class < 500" in res.summary()
    assert "5.6.2-PARAM-3" in [c.id for c in res.unmet_should]
    assert res.verdict_level("5.6.2-PARAM-3") == "SHOULD" and res.level("5.6.2-PARAM-3") == "PARAM"
    assert res.to_json()["deviations"] == res.deviations
    assert any("Deviation" in n and "(§5.6.2)" in n for n in res.notes)
    assert "- Deviation: 5.6: 30 per class < 500" in checks_markdown(res)


def test_a_56_run_with_30_per_class_is_at_most_conditionally_compliant(harness: StartHarness) -> None:
    """A real 5.6 run against the simulator with 30 requests per class and a 3 s mixed run."""
    from pytest_llmbench.document.procedure import compliance_summary

    proc = get_procedure("5.6")
    params = proc.make_params("smoke", {"requests_per_class": 30, "duration_s": 3.0, "max_output_tokens": 16,
                                        "warmup_requests": 10, "warmup_tokens": 100, "capacity": "session"})
    with harness(SimConfig(time_scale=0.2, seed=2), rate=40.0, profile="smoke", seed=4) as (_, ctx):
        result = asyncio.run(proc.run(ctx, params))
    c = result.compliance
    assert c.verdict is not Verdict.UNCONDITIONAL
    assert c["5.6.2-PARAM-3"].status is Status.UNMET
    dev = [d for d in c.deviations if "(§5.6.2)" in d]
    assert len(dev) == 1 and dev[0].startswith("5.6: ") and " per class < 500 " in dev[0]
    assert any("(§5.6.3)" in d and "< 300 s" in d for d in c.deviations)
    assert dev[0] in c.summary()
    summary = compliance_summary(result)  # procedures[].compliance of results.json
    assert summary["deviations"] == c.deviations
    assert {"id": "5.6.2-PARAM-3", "level": "SHOULD"}.items() <= next(
        u for u in summary["unmet"] if u["id"] == "5.6.2-PARAM-3").items()
    assert any(dev[0] in n for n in summary["notes"])


@pytest.mark.parametrize("rid", sorted(EXPECTED))
def test_every_minimum_row_belongs_to_its_test(rid: str) -> None:
    test = rid.split(".")[0] if rid.startswith("6") else ".".join(rid.split(".")[:2])
    assert registry()[rid].applies_to == test
