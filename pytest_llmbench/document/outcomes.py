"""The tests of a results document (``tests[]``): each test's SLO verdict, its SLOs as written and as
judged (the value, threshold, n and CI of each), parsed for the plots, and the procedure it used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..session import SessionResult

__all__ = ["OUTCOMES", "slo_objectives", "slo_result", "outcome_entries"]


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
    expression, where it was written (marker, --llm-slo, body), outcome, value, threshold, n, CI."""
    slo, value = r.get("slo") or {}, r.get("value") or {}
    return {"text": str(slo.get("text") or ""), "origin": r.get("origin") or "body",
            "outcome": "PASS" if r.get("passed") else "FAIL", "metric": slo.get("metric"),
            "statistic": slo.get("statistic"), "operator": slo.get("operator"), "threshold": slo.get("threshold"),
            "value": value.get("value"), "unit": value.get("unit") or "", "n": value.get("n"),
            "ci_low": value.get("ci_low"), "ci_high": value.get("ci_high"), "confidence": value.get("confidence"),
            "undersampled": bool(r.get("undersampled")), "client_error": r.get("client_error"),
            "within_client_error": bool(r.get("within_client_error")), "message": str(r.get("message") or "")}


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
            "verdict": OUTCOMES.get(str(outcome), "NOT RUN"),
            "compliance_verdict": proc["compliance"]["verdict"] if proc else "no result",
            "anchor": proc["anchor"] if proc else None,
        })
    return out
