"""The tests of a results document (``tests[]``): each test's SLO verdict, its SLOs as written and as
judged (the value, threshold, n and CI of each), parsed for the plots, and the procedure it used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..session import SessionResult

__all__ = ["OUTCOMES", "outcome_entries", "slo_objectives", "slo_result", "test_verdict"]


#: a test's pytest outcome -> the SLO verdict the reports show
OUTCOMES = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}


def slo_objectives(texts: list[str]) -> list[dict[str, Any]]:
    """The SLO expressions of a test parsed for plotting: metric, statistic, operator, threshold in the
    metric's base unit (registry), label and threshold text; an expression that does not parse is left out
    (the test itself reports it)."""
    from ..measure.slo import SLOError, parse_slo

    out = []
    for text in texts:
        try:
            s = parse_slo(text)
        except SLOError:
            continue
        out.append({**s.to_json(), "unit": s.info.unit, "label": s.label, "percentile": s.percentile,
                    "threshold_text": s.threshold_text()})
    return out


def slo_result(r: Mapping[str, Any]) -> dict[str, Any]:
    """One judged SLO of a test (``SLOResult.to_json`` + origin) as the document keeps it: the
    expression, where it was written (marker, --llm-slo, body), outcome (PASS, FAIL or INCONCLUSIVE), value,
    threshold, n, CI, and (1.8) the verdict's bound: ``method``, ``bound`` against ``limit`` at
    ``verdict_confidence``, the requests it was taken on (``judged``), ``exceedances`` among them,
    ``needed_more``, ``design_effect``; a run that stopped when decided adds its ``look``."""
    slo, value = r.get("slo") or {}, r.get("value") or {}
    verdict = r.get("verdict") or ("PASS" if r.get("passed") else "FAIL")  # no verdict: recorded before 1.8
    out = {"text": str(slo.get("text") or ""), "origin": r.get("origin") or "body",
           "outcome": verdict, "metric": slo.get("metric"),
           "statistic": slo.get("statistic"), "operator": slo.get("operator"), "threshold": slo.get("threshold"),
           "value": value.get("value"), "unit": value.get("unit") or "", "n": value.get("n"),
           "ci_low": value.get("ci_low"), "ci_high": value.get("ci_high"), "confidence": value.get("confidence"),
           "undersampled": bool(r.get("undersampled")), "client_error": r.get("client_error"),
           "within_client_error": bool(r.get("within_client_error")), "message": str(r.get("message") or ""),
           "method": r.get("method") or "point", "verdict_confidence": r.get("confidence"),
           "bound": r.get("bound"), "limit": r.get("limit"), "judged": r.get("n"),
           "exceedances": r.get("exceedances"),
           "needed_more": r.get("needed_more"), "design_effect": r.get("design_effect")}
    if r.get("look") is not None:
        out["look"] = r["look"]
    return out


def test_verdict(outcome: str | None, entry: Mapping[str, Any], judged: list[dict[str, Any]]) -> str:
    """A test's SLO verdict: its pytest outcome's (PASS, FAIL, SKIP, NOT RUN), but INCONCLUSIVE when an
    INCONCLUSIVE SLO decided the outcome (``--llm-inconclusive`` failed or skipped it) or the test passed with
    one (``--llm-inconclusive pass``): an SLO not shown to hold is never shown as PASS."""
    if outcome is not None and entry.get("inconclusive") is not None:
        return "INCONCLUSIVE"
    if outcome == "passed" and any(r["outcome"] == "INCONCLUSIVE" for r in judged):
        return "INCONCLUSIVE"
    return OUTCOMES.get(str(outcome), "NOT RUN")


def outcome_entries(result: SessionResult, procs_by_key: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """``tests[]``: each test's SLO verdict (its pytest outcome), the SLOs it declared and judged, and the
    procedure entry it used (its §2 verdict and anchor)."""
    out = []
    for nodeid, entry in result.test_outcomes.items():
        outcome = entry.get("outcome") if entry.get("outcome") in OUTCOMES else None
        proc = procs_by_key.get(entry.get("result_key", ""))
        judged = [slo_result(r) for r in entry.get("slo_results") or []]
        # every SLO of the test once, in order: marker and --llm-slo (declared), then those of its body
        texts = list(dict.fromkeys([str(s).strip() for s in entry.get("slos") or []] + [r["text"] for r in judged]))
        out.append({
            "nodeid": str(nodeid),
            "procedure": entry.get("procedure"),
            "result_key": entry.get("result_key"),
            "slos": texts,
            "slo_results": judged,
            "objectives": slo_objectives(texts),
            "outcome": outcome or "not run",
            "when": entry.get("when"),
            "message": entry.get("message") or "",
            "verdict": test_verdict(outcome, entry, judged),
            "compliance_verdict": proc["compliance"]["verdict"] if proc else "no result",
            "anchor": proc["anchor"] if proc else None,
        })
    return out
