"""Compliance verdicts (draft §2) from real 5.1 runs against the embedded simulator, not hand-built facts.

* 500 requests: not compliant, and the report says why (5.1.2-MUST-3: < 1000 for P99).
* Fully declared Application Gateway run with the draft's minimums (10,000 requests, full warm-up with
  verification, Conversation workload): unconditionally compliant. At the Model Engine boundary the
  §4.6.1 gRPC SHOULD is honestly unmet (the client speaks SSE), so the Gateway boundary is used.
* The same without warm-up verification: conditionally compliant (4.5.2 SHOULDs unmet).

The two 10,000-request runs take about 1.5 min each and are marked ``slow`` (``pytest tests -m slow``).
The draft's send-lag item (4.2.5-MUST-1, P99 <= 1 ms) depends on the machine being otherwise idle;
when it is the only unmet item the test is skipped with the measured lag, never passed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

DECLARATIONS = '''
terminology = "draft-gaikwad-llm-benchmarking-terminology-00"
publication_review = "simulated SUT: no production capacity figures are published"
production_cross_check = "simulated SUT: the draft's reference workloads (App. A) are used"
production_representative = false
'''

SEND_LAG_ITEMS = {"4.2.5-MUST-1", "4.2-MUST-1"}


def _run_5_1(pytester: pytest.Pytester, marker_args: str, *extra: str) -> tuple[dict[str, Any], str]:
    pytester.makefile(".toml", decl=DECLARATIONS)
    pytester.makepyfile(test_verdict=f'''
import pytest
from pytest_llmbench import poisson

@pytest.mark.llm_procedure("5.1", {marker_args})
def test_run(llm_result):
    pass
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-report", "rep",
                                           "--llm-declarations", "decl.toml", *extra, timeout=900)
    result.assert_outcomes(passed=1)
    doc = json.loads((pytester.path / "rep" / "results.json").read_text())
    (proc,) = doc["procedures"]
    return proc, (pytester.path / "rep" / "report.md").read_text()


def _unmet(proc: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["reason"] for c in proc["compliance"]["unmet"] if c.get("level") in ("MUST", "SHOULD")}


def test_500_requests_is_not_compliant_and_the_report_says_why(pytester: pytest.Pytester) -> None:
    proc, report = _run_5_1(pytester, 'requests=500, load=poisson(rate=60), max_output_tokens=16')
    assert proc["compliance"]["verdict"] == "not compliant"
    unmet = _unmet(proc)
    assert unmet["5.1.2-MUST-3"] == "500 requests < 1000 required for P99"
    assert unmet["5.1.2-MUST-4"] == "500 requests < 10000 required for P99.9"
    assert "500 requests < 1000 required for P99" in report


FULL = ('workload="conversation", requests=10000, load=poisson(rate=120), warmup_requests=100, '
        'warmup_tokens=10000, max_output_tokens=8')
FULL_ARGS = ("--llm-boundary", "gateway", "--llm-time-scale", "0.1")


def _skip_if_only_send_lag(unmet: dict[str, str]) -> None:
    if unmet and set(unmet) <= SEND_LAG_ITEMS:
        pytest.skip(f"only the send-lag MUST is unmet on this (busy) machine: {unmet['4.2.5-MUST-1']}")


@pytest.mark.slow
def test_fully_declared_gateway_run_is_unconditionally_compliant(pytester: pytest.Pytester) -> None:
    proc, report = _run_5_1(pytester, FULL, *FULL_ARGS)
    unmet = _unmet(proc)
    _skip_if_only_send_lag(unmet)
    assert unmet == {}
    assert proc["compliance"]["verdict"] == "unconditionally compliant"
    assert "unconditionally compliant" in report


@pytest.mark.slow
def test_without_warmup_verification_is_conditionally_compliant(pytester: pytest.Pytester) -> None:
    proc, _ = _run_5_1(pytester, FULL + ", warmup_probes=0", *FULL_ARGS)
    unmet = _unmet(proc)
    _skip_if_only_send_lag({k: v for k, v in unmet.items() if not k.startswith("4.5.2-")})
    assert set(unmet) == {"4.5.2-SHOULD-1", "4.5.2-SHOULD-2"}, unmet
    assert proc["compliance"]["verdict"] == "conditionally compliant"
