"""§5.4: ITL at low load against the engine model (``SimConfig.predicted_itl_s``), the output-length
and TTFT-exclusion audits on hand-computed records, and the forced minimum output."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from factories import make_record, measured_ok, simulator_harness
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmbench.common.records import RequestRecord, RequestSpec
from pytest_llmbench.measure.summary import summarize
from pytest_llmbench.procedures.base import ProcedureError, get_procedure
from pytest_llmbench.procedures.p5_4_itl import audit_itl, force_min_output
from pytest_llmbench.procedures.result import Capacity
from pytest_llmbench.simulator import SimConfig
from pytest_llmbench.simulator.predict import simulate_closed_loop

# time_scale 1: an 8 ms iteration, far above the event loop's ~1 ms timer resolution
CFG = SimConfig(time_scale=1.0, seed=3)
OUT = 64


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    cap = simulate_closed_loop(CFG, CFG.max_num_seqs, 320, OUT).requests_per_s
    proc = get_procedure("5.4")
    params = proc.make_params("smoke", {"levels": [0.1, 0.25], "requests": 30, "capacity": "session"})
    root = tmp_path_factory.mktemp("p54")
    with simulator_harness(CFG, root, capacity=Capacity(rate=cap, source="model"), run_root=root, profile="smoke",
                           time_scale=CFG.time_scale) as (_, ctx):
        return asyncio.run(proc.run(ctx, params))


def test_low_load_itl_matches_the_engine_model(result) -> None:  # type: ignore[no-untyped-def]
    low = result.runs[0].metrics
    assert low.itl_option == "C"  # the simulator sends per-token timestamps: option C is declared
    p50 = low.percentile("itl", 50).value
    # at 10% of capacity only a few streams decode together; most gaps are one decode iteration
    conc = low.scalar("concurrency").value
    # one-sided against the model: a busy machine only stretches iterations, so no wall-clock upper
    # bound (how close P50 comes to the model is a figure, not a test); a P50 below one decode
    # iteration means gaps were taken between chunks that are not consecutive tokens
    assert p50 >= 0.95 * CFG.predicted_itl_s(1), (p50, CFG.predicted_itl_s(1), conc)
    # the per-level figures are in the measurements and the tables
    lv = result.measurements["levels"][0]
    assert lv["itl_p50_ms"] == pytest.approx(p50 * 1000, abs=1e-3)
    # Etalon fluid token rate per level: the run's scalar, in the level figures and the shape table
    fluid = low.scalar("fluid_token_rate").value
    assert lv["fluid_token_rate_tok_s"] == pytest.approx(fluid)
    assert fluid <= 1.0 / (0.95 * CFG.predicted_itl_s(1))  # no faster than one token per decode iteration
    shape = result.tables[-1]
    assert shape.columns[-1] == "Fluid rate" and str(shape.rows[0][-1]) == f"{fluid:.0f} tok/s"
    # option C exactly: every level's ITL samples are the server's own gaps between consecutive
    # emitted tokens, TTFT excluded (exact, whatever the machine's load)
    for run in result.runs:
        gaps = np.concatenate([np.diff(r.server_token_ns) for r in measured_ok(run)]) / 1e9
        assert np.allclose(np.sort(run.metrics.distributions["itl"].samples), np.sort(gaps), rtol=0, atol=1e-9)


def test_output_lengths_samples_and_ttft_exclusion(result) -> None:  # type: ignore[no-untyped-def]
    m = result.measurements
    assert m["requests_below_min_output"] == 0 and m["requests_ok"] == 60
    for run, lv in zip(result.runs, m["levels"]):
        assert lv["itl_samples"] == 30 * (OUT - 1)  # one sample per token after the first
        assert run.metrics.distributions["osl"].min == OUT  # forced length honoured
    assert result.checks["5.4.2-MUST-1"].holds
    assert result.checks["5.4.3-MUST-1"].holds
    assert not result.checks["5.4.2-SHOULD-2"].holds  # levels 10%, 25%: not the recommended four
    assert result.checks["5.4.3-PARAM-2"].holds
    t6 = result.tables[0]
    assert [r[0] for r in t6.rows] == ["ITL Samples", "ITL P50", "ITL P90", "ITL P95", "ITL P99", "ITL P99.9",
                                       "ITL Mean", "ITL Std Dev", "P99/P50 Ratio"]
    assert "option C" in t6.notes[0]
    assert len(result.plots["itl_samples_s"]) == 30 * (OUT - 1)
    # the longest pause per request is its largest server gap (option C); P99 over requests is
    # reported. (Its bound by the model's worst stall is wall-clock: a busy machine stretches it.)
    primary = next(run for run in result.runs if run.metrics is result.metrics)
    pauses = np.array([np.diff(r.server_token_ns).max() for r in measured_ok(primary)]) / 1e9
    assert max(result.plots["itl_samples_s"]) == pytest.approx(pauses.max(), abs=1e-9)
    assert result.measurements["max_pause_p99_ms"] == pytest.approx(np.percentile(pauses, 99) * 1000, abs=1e-3)


def test_the_model_capacity_on_another_shape_is_named(result) -> None:  # type: ignore[no-untyped-def]
    """capacity='session': a capacity without a request shape (declared here) is taken as is."""
    assert result.checks["5.4.2-PARAM-2"].holds and "model" in result.checks["5.4.2-PARAM-2"].reason


def test_own_capacity_on_the_forced_output_shape(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 48 (finding 1): 5.4's "% of maximum throughput" is of its own forced-output requests' saturation
    throughput (a short closed-loop search), not of 5.2's rate on outputs that may stop at EOS."""
    proc = get_procedure("5.4")
    params = proc.make_params("smoke", {"levels": [0.25], "requests": 12, "probe_concurrency": 8,
                                        "probe_duration_s": 2.0, "max_output_tokens": 16, "min_output_tokens": 16})
    assert params.capacity == "own"
    with simulator_harness(CFG, tmp_path, capacity=None, run_root=tmp_path, profile="smoke",
                           time_scale=CFG.time_scale) as (_, ctx):
        res = asyncio.run(proc.run(ctx, params))
    probes = [r for r in res.runs if r.label.startswith("capacity-probe")]
    assert probes and probes[0].label == "capacity-probe-c8"
    recs = [r for p in probes for r in measured_ok(p)]
    assert recs and all(r.max_tokens == 16 and r.output_tokens == 16 for r in recs)  # 5.4's own forced shape
    m = res.measurements
    assert "saturation search on 5.4's forced-output requests" in m["capacity_source"]
    level = next(r for r in res.runs if not r.label.startswith("capacity-probe"))
    assert level.extra["offered_rate"] == pytest.approx(0.25 * m["capacity_rate_req_s"])
    c = res.checks["5.4.2-PARAM-2"]
    assert c.holds == ("a lower bound" not in m["capacity_source"]), c.reason


# ----------------------------------------------------------------------------- hand-computed records
def _spec(i: int, max_tokens: int = 50) -> RequestSpec:
    return RequestSpec(index=i, workload="fixed", input_tokens=10, max_tokens=max_tokens, prompt_text="x")


def _record(i: int, sent: int, ttft_ns: int, gaps_ns: list[int]) -> RequestRecord:
    """Times in ns: the first token ``ttft_ns`` after ``sent``, one more after each gap; the end 1 µs later."""
    return make_record(spec=_spec(i), unit=1, sent=sent, ttft=ttft_ns, itl=gaps_ns, text=" w",
                       output_tokens_server=len(gaps_ns) + 1, end=sent + ttft_ns + sum(gaps_ns) + 1000)


def test_audit_counts_short_outputs_and_catches_a_ttft_sample() -> None:
    ms = 1_000_000
    recs = [_record(0, 0, 300 * ms, [10 * ms] * 59), _record(1, 5 * ms, 200 * ms, [20 * ms] * 9),
            _record(2, 9 * ms, 250 * ms, [5 * ms, 15 * ms] * 30)]
    metrics = summarize(recs, itl_option="B")
    a = audit_itl(metrics, recs, 50)
    assert (a.ok_requests, a.short_requests, a.shortest) == (3, 1, 10)
    assert (a.spans_checked, a.span_mismatches, a.count_mismatches) == (3, 0, 0)
    assert a.samples == 59 + 9 + 60
    # a pipeline that let the TTFT in: request 0's samples now sum to TTFT + its decode span
    mean = metrics.per_request["itl_mean"]
    count = metrics.per_request["itl_count"]
    mean[0] = (mean[0] * count[0] + 0.3) / count[0]
    assert audit_itl(metrics, recs, 50).span_mismatches == 1


@settings(deadline=None, max_examples=100)
@given(lengths=st.lists(st.integers(1, 400), min_size=1, max_size=30), cap=st.one_of(st.none(), st.integers(50, 300)))
def test_force_min_output(lengths: list[int], cap: int | None) -> None:
    specs = [_spec(i, n) for i, n in enumerate(lengths)]
    out, raised = force_min_output(specs, 50, cap)
    assert raised == sum(1 for n in lengths if min(n, cap or n) < 50)
    for s, n in zip(out, lengths):
        assert s.min_tokens == s.max_tokens == max(50, min(n, cap if cap is not None else n))
        assert s.ignore_eos


def test_bad_parameters_are_named() -> None:
    proc = get_procedure("5.4")
    with pytest.raises(ProcedureError, match="max_output_tokens"):
        proc.make_params("smoke", {"max_output_tokens": 20})
    with pytest.raises(ProcedureError, match="levels"):
        proc.make_params("smoke", {"levels": []})
    assert proc.make_params("standard", {}).levels == (0.25, 0.5, 0.75, 0.9)
    assert np.isclose(proc.make_params("full", {}).requests, 1000)
