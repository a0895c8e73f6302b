"""A flag means the figure is in doubt: the client's own delay is propagated to each figure before it
is compared (loadgen/selfcheck.py), and an SLO whose threshold lies within that error of the
measured value says so (measure/slo.py through ``ProcedureResult.slo_client_error``).

TTFT, E2E and ITL take the delay at their percentile; TPOT takes it ÷ (OSL − 1) of the request at
its percentile; a zero figure keeps the absolute bound; the flag is above 5 % of the figure.
"""

from __future__ import annotations

import numpy as np
import pytest
from factories import make_record

from pytest_llmbench import assert_slo
from pytest_llmbench.common.records import RequestRecord
from pytest_llmbench.loadgen.selfcheck import ClientDelay, check_figures, figure_error_ms, procedure_check
from pytest_llmbench.measure.slo import SLOInconclusive, SLOViolation
from pytest_llmbench.measure.summary import summarize
from pytest_llmbench.procedures.result import ProcedureResult, RunSummary

MS = 1_000_000


def _flat(ms: float) -> ClientDelay:
    """The same client delay at every kept percentile."""
    table = {k: ms for k in ("p50", "p90", "p95", "p99", "p99.9")}
    return ClientDelay(receive_delay_ms=table, receive_n=500, loop_lag_ms=dict(table), loop_n=500, cpu_s=1, wall_s=10)


def _records(n: int = 200, osl: int = 64) -> list[RequestRecord]:
    """TTFT 100 ms + i·0.1 ms, then ``osl`` one-token chunks 5 ms apart."""
    out = []
    for i in range(n):
        out.append(make_record(i, sent=i * 50 * MS, ttft=100 * MS + i * MS // 10, itl=5 * MS, n_chunks=osl, text=" a",
                               unit=1, spec_input_tokens=10, max_tokens=osl, output_tokens_client=osl,
                               input_tokens_client=10))
    return out


def _result(delay_ms: float, osl: int = 64) -> ProcedureResult:
    metrics = summarize(_records(osl=osl))
    run = RunSummary("level-1", "", {"model": "open", "client_delay": _flat(delay_ms).to_json()}, metrics)
    return ProcedureResult("5.1", "TTFT", {}, "smoke", metrics, runs=[run])


def test_a_threshold_within_the_client_error_passes_with_a_note() -> None:
    """Threshold 0.1 ms above a TTFT P50 measured with 0.3 ms of client delay: passes, and says the
    verdict lies within the client's measurement error; 1 ms above it: no note."""
    result = _result(0.3)
    p50 = result.metrics.percentile("ttft", 50).value
    # 0.1 ms above the P50 of 200 requests: the value meets it, the bound cannot tell (INCONCLUSIVE)
    with pytest.raises(SLOInconclusive) as exc:
        assert_slo(result, f"ttft.p50 <= {(p50 + 0.0001) * 1e3:.4f}ms")
    (near,) = exc.value.results
    assert near.within_client_error and near.client_error == pytest.approx(0.0003)
    assert "within the client's measurement error (±0.3 ms) of the threshold" in near.message
    (far,) = assert_slo(result, f"ttft.p50 <= {(p50 + 0.02) * 1e3:.4f}ms")  # none of 200 above: PASS
    assert far.passed and not far.within_client_error and "client" not in far.message
    # failing inside the error band says so too
    with pytest.raises(SLOViolation, match="within the client's measurement error"):
        assert_slo(result, f"ttft.p50 <= {(p50 - 0.0001) * 1e3:.4f}ms")
    # the same delay spread over 63 decode gaps is 4.8 µs of TPOT: 0.1 ms is far outside it
    tpot = result.metrics.percentile("tpot", 50).value
    (t,) = assert_slo(result, f"tpot.p50 <= {(tpot + 0.0001) * 1e3:.4f}ms")
    assert not t.within_client_error and t.client_error == pytest.approx(0.0003 / 63)
    # figures the client's clock does not time have no client error
    (sr,) = assert_slo(result, "success_rate >= 95%")  # 200 of 200: shown at 95 % (99 % needs >= 299)
    assert sr.client_error is None and not sr.within_client_error


def test_tpot_takes_the_delay_over_the_decode_gaps_of_the_request_at_its_percentile() -> None:
    """0.263 ms of delay at P95 against a 4.581 ms TPOT P95 is 5.7 % raw, but a 64-token request has
    63 gaps: 0.0042 ms, 0.09 %. A request of 2 tokens has one gap: the whole delay, flagged."""
    delay = _flat(0.263)
    long_tpot = {"tpot": np.array([0.004581, 0.004, np.nan]), "osl": np.array([64.0, 10.0, 1.0])}
    (c,) = check_figures([("tpot_p95", 95.0, 0.004581)], delay, per_request=long_tpot)
    assert c.client_delay_ms == 0.263 and c.error_ms == pytest.approx(0.263 / 63)
    assert c.share == pytest.approx(0.263 / 63 / 4.581) and not c.flagged
    short = {"tpot": np.array([0.004581]), "osl": np.array([2.0])}
    (c,) = check_figures([("tpot_p95", 95.0, 0.004581)], delay, per_request=short)
    assert c.error_ms == pytest.approx(0.263) and c.flagged
    # TTFT, E2E and ITL take the delay whole; a zero figure keeps the absolute 1 ms bound
    assert figure_error_ms("ttft", 99.0, 0.05, delay) == figure_error_ms("itl", 50.0, 0.005, delay) == 0.263
    zero = check_figures([("itl_p50", 50.0, 0.0)], _flat(0.5)) + check_figures([("itl_p50", 50.0, 0.0)], _flat(2.0))
    assert [(c.share, c.flagged) for c in zero] == [(None, False), (None, True)]
    # server-side figures are not timed by the client
    assert figure_error_ms("queue_wait", 50.0, 0.01, delay) is None


def test_the_procedure_check_uses_the_primary_runs_delay_and_its_per_request_osl() -> None:
    """The summary figures are the primary run's: its delay is the one propagated, not a busier
    run's. 0.3 ms is 6 % of the 5 ms token gaps: each ITL sample is one client-stamped interval, so
    the ITL percentiles are in doubt (flagged); TPOT spreads it over 63 gaps (0.1 %, not flagged)."""
    result = _result(0.3)
    busy = RunSummary("overload", "", {"model": "open", "client_delay": _flat(20.0).to_json()}, result.metrics)
    runs = [{"load": result.runs[0].load}, {"load": busy.load}]
    metrics = result.metrics.to_json()
    check = procedure_check(runs, metrics, primary=0, per_request=result.metrics.per_request)
    assert check is not None and check["client"]["receive_delay_ms"]["p99"] == 0.3
    by = {f["figure"]: f for f in check["figures"]}
    tpot = [f for name, f in by.items() if name.startswith("tpot_")]
    assert tpot and all(f["error_ms"] == pytest.approx(0.3 / 63) and not f["flagged"] for f in tpot)
    assert by["itl_p50"]["flagged"] and by["itl_p50"]["share"] == pytest.approx(0.06)
    assert not by["ttft_p99"]["flagged"] and not by["e2e_p50"]["flagged"]  # 0.3 ms of ~100 ms and ~400 ms
    assert check["flagged"] and not any("tpot" in r for r in check["reasons"])
    # without a primary run the worst delay of all runs stands against the summary: 20 ms on a 100 ms TTFT
    worst = procedure_check(runs, metrics, per_request=result.metrics.per_request)
    assert worst is not None and worst["flagged"]
    assert any(r.startswith("client delay 20 ms at P50 of ttft_p50") for r in worst["reasons"])
