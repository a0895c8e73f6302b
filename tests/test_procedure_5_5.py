"""§5.5 Concurrent Request Capacity against a simulator whose capacity is known in advance.

Expected capacity, derived from the simulator's engine model (docs/simulator.md) for the
configuration below:

* Every request is 100 prompt + 48 forced output tokens = 148 tokens, and a KV block holds 256
  tokens, so a request occupies exactly one block from admission to completion: it never grows
  into a second block, so the engine never preempts. The cache has 3072 / 256 = 12 blocks, so
  ``K = SimConfig.kv_capacity_requests(100, 48) = min(max_num_seqs 64, 12 // 1) = 12`` requests
  run at once; ``simulate_closed_loop`` confirms it (mean running batch K at concurrency K and
  K + 1, no preemption).
* At concurrency C <= K every request is admitted on arrival: TTFT is one prefill iteration,
  (8 + 0.02·100·C) ms <= 32 ms, plus at most a few iterations while a wave of re-submissions
  arrives: far below the 200 ms threshold.
* At C = K + 1 one request per round finds no free block and waits for a whole request to finish:
  D = 48 decode iterations of (8 + 0.15·12) ms = 470 ms > 200 ms. That is 1 request in 13 (7.7 %)
  > 1 %, so TTFT P99 > threshold and the level fails; every larger C fails the same way.

So the largest concurrency meeting the criteria is exactly K = 12. The search runs at resolution 1,
so its answer is K on an idle machine; noise only adds latency, so it can fail a level <= K but never
pass one above: the test asserts the answer <= K and the search logic exactly.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from factories import make_record, simulator_harness
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmbench.common.records import ErrorType
from pytest_llmbench.procedures.base import get_procedure
from pytest_llmbench.procedures.p5_5_capacity import capacity_error, closed_level_stream, next_level
from pytest_llmbench.simulator import SimConfig
from pytest_llmbench.simulator.predict import simulate_closed_loop

IN, OUT = 100, 48
THRESHOLD_S = 0.2
CONFIG = SimConfig(time_scale=1.0, block_size=256, kv_capacity_tokens=12 * 256, prefill_per_token_ms=0.02,
                   prefill_per_token2_ms=0.0, prefix_cache=False, seed=3)


CTX = {"profile": "standard", "seed": 11, "timeout": 60.0}  # the procedure contexts' settings


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    proc = get_procedure("5.5")
    params = proc.make_params("standard", {
        "workload": "fixed", "workload_params": {"input_tokens": IN}, "output_tokens": OUT,
        "initial_concurrency": 4, "max_concurrency": 16, "resolution": 1, "ttft_p99_threshold_s": THRESHOLD_S,
        "min_level_s": 1.5, "min_completions_per_slot": 5, "warmup_requests": 8, "warmup_tokens": 200,
    })
    root = tmp_path_factory.mktemp("p55")
    with simulator_harness(CONFIG, root, **CTX) as (_, ctx):
        result = asyncio.run(proc.run(ctx, params))
    return result


def test_model_derivation_holds():
    """The premises of the expected value, on the simulator's own virtual-clock engine."""
    k = CONFIG.kv_capacity_requests(IN, OUT)
    assert k == 12
    at_k = simulate_closed_loop(CONFIG, k, IN, OUT, duration_s=5, warmup_s=1)
    above = simulate_closed_loop(CONFIG, k + 1, IN, OUT, duration_s=5, warmup_s=1)
    assert at_k.num_preemptions == above.num_preemptions == 0
    assert at_k.mean_running == pytest.approx(k, rel=0.02)
    assert above.mean_running <= k + 1e-9  # KV-bound: the 13th request waits
    wait_s = OUT * CONFIG.predicted_itl_s(k)  # one whole request
    assert wait_s > 2 * THRESHOLD_S > 4 * CONFIG.predicted_ttft_s(IN * k)


def test_capacity_matches_kv_budget(outcome):
    k = CONFIG.kv_capacity_requests(IN, OUT)
    cap = outcome.capacity
    assert cap is not None and cap.source == "measured by 5.5 in this session"
    # one-sided: at K + 1 a request waits a whole request (470 ms > 200 ms) by the model, and noise
    # only adds latency, so no level above K can pass; noise can fail a level <= K (TTFT is ~30 ms
    # there), so the search logic below is what pins the answer: the largest passing level, whose
    # next level was tried and failed
    assert 1 <= cap.concurrency <= k, outcome.tables[0].rows
    assert outcome.measurements["max_concurrency"] == cap.concurrency
    assert outcome.measurements["search_converged"] is True
    lo, hi = outcome.measurements["search_bracket"]
    assert lo == cap.concurrency and hi - lo <= 1


def test_throughput_at_capacity_matches_model(outcome):
    """Output tok/s at the maximum vs the virtual-clock engine at the same concurrency (ratio)."""
    cap = outcome.capacity
    predicted = simulate_closed_loop(CONFIG, cap.concurrency, IN, OUT, duration_s=5, warmup_s=1)
    ratio = cap.output_throughput / predicted.output_tokens_per_s
    # one-sided: a busy machine only lowers throughput (tokens counted twice would exceed the model)
    assert ratio <= 1.15, (cap.output_throughput, predicted.output_tokens_per_s)
    # tokens in flight ≈ concurrency × (input + half the output on average)
    tif = outcome.measurements["tokens_in_flight_at_max"]
    assert 0.7 <= tif / (cap.concurrency * (IN + OUT / 2)) <= 1.2


def test_table7_and_search_log(outcome):
    table = outcome.tables[0]
    assert table.columns == ["Concurrency", "Completion", "TTFT P99", "TPOT P99", "Errors", "Status"]
    levels = [int(r[0]) for r in table.rows]
    assert levels == sorted(levels)
    status = {int(r[0]): r[-1] for r in table.rows}
    n = outcome.capacity.concurrency
    assert status[n] == "Pass" and all(s == "Fail" for c, s in status.items() if c > n)
    assert all(s == "Pass" for c, s in status.items() if c <= n)
    assert f"Maximum concurrent requests meeting criteria: {n}" in table.notes
    search = outcome.plots["search"]
    assert [s["level"] for s in search][:3] == [4, 8, 16]  # doubling from the initial level
    assert all(isinstance(s["passed"], bool) for s in search)
    for s in search:
        assert s["passed"] == (s["value"] <= THRESHOLD_S)  # only the TTFT criterion can fail here
    checks = outcome.checks
    assert checks["5.5.2-PARAM-1"].status.value == "met"  # every output was exactly 48 tokens
    assert checks["5.5.3-PARAM-3"].status.value == "unmet"  # 1.5 s levels < 60 s: never silent
    assert checks["7.4-SHOULD-3"].status.value == "met"  # the simulator's /metrics were sampled


def test_level_stream_runs_for_the_longer_of_count_and_time():
    specs = list(range(5))
    stats: dict[str, int] = {}
    assert len(list(closed_level_stream(specs, 12, 0.0, stats))) == 12  # type: ignore[arg-type]
    assert stats["repeats"] == 7
    import time

    t0 = time.perf_counter()
    n = sum(1 for _ in closed_level_stream(specs, 1, 0.05, {}))  # type: ignore[arg-type]
    assert n > 1 and time.perf_counter() - t0 >= 0.05


@settings(deadline=None, max_examples=300)
@given(initial=st.integers(1, 64), maximum=st.integers(1, 600), true_cap=st.integers(0, 700),
       resolution=st.integers(1, 32))
def test_search_converges_on_a_monotone_criterion(initial, maximum, true_cap, resolution):
    """Pass iff c <= true_cap: the search ends with lo <= true_cap < hi and hi - lo <= resolution."""
    initial = min(initial, maximum)
    lo, hi, c, seen = 0, None, initial, []
    while c is not None:
        assert c not in seen and 1 <= c <= maximum
        seen.append(c)
        if c <= true_cap:
            lo = max(lo, c)
        else:
            hi = c if hi is None else min(hi, c)
        c = next_level(lo, hi, maximum, resolution)
    assert len(seen) <= 2 * 11
    assert lo <= true_cap
    if hi is None:
        assert lo == maximum
    else:
        assert hi > true_cap
        assert (lo == 0 and hi == 1) or (lo > 0 and hi - lo <= resolution)
        if resolution == 1 and lo:
            assert lo == min(true_cap, maximum)


def test_capacity_errors_are_recognised():
    assert capacity_error(make_record(status=429, error_type=ErrorType.RATE_LIMITED, error_message="queue_full"))
    # a plain 429 is rate limiting (a gateway quota), not the SUT running out of memory
    assert not capacity_error(make_record(status=429, error_type=ErrorType.RATE_LIMITED,
                                          error_message="Rate limit reached for requests"))
    assert capacity_error(make_record(status=503, error_type=ErrorType.HTTP_5XX, error_message="busy"))
    assert capacity_error(make_record(status=500, error_type=ErrorType.HTTP_5XX,
                                      error_message="CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert capacity_error(make_record(status=400, error_type=ErrorType.HTTP_4XX, error_message="kv_capacity_exceeded"))
    assert not capacity_error(make_record(status=400, error_type=ErrorType.HTTP_4XX, error_message="bad temperature"))
    assert not capacity_error(make_record())  # a success


# ---- Etalon capacity: a fluidity SLO bounds the search (issue 19) ---------------------------------
# Decode iteration = step 4 ms + 1 ms per running sequence, KV never binds and TTFT has a 10 s
# allowance, so only the criterion can fail a level. The fluid token rate at concurrency C is about
# 1 / (4 + C) ms: 125 tok/s at C = 4, 50 tok/s at C = 16; "fluid_token_rate >= 83 tok/s" holds up to
# C ~ 8 (measured: 185, 143, 78 tok/s at C = 2, 4, 8) and fails from there on.
FLUID_CONFIG = SimConfig(time_scale=1.0, step_ms=4.0, decode_per_seq_ms=1.0, kv_capacity_tokens=1 << 20,
                         prefill_per_token_ms=0.005, prefill_per_token2_ms=0.0, prefix_cache=False, seed=5)


def test_fluidity_criterion_bounds_capacity(tmp_path: Path) -> None:
    proc = get_procedure("5.5")
    params = proc.make_params("standard", {
        "workload": "fixed", "workload_params": {"input_tokens": 20}, "output_tokens": 24,
        "initial_concurrency": 2, "max_concurrency": 32, "resolution": 4, "ttft_p99_threshold_s": 10.0,
        "min_level_s": 1.0, "min_completions_per_slot": 3, "warmup_requests": 4, "warmup_tokens": 50,
        "criteria": ["fluid_token_rate >= 83 tok/s"],
    })
    with simulator_harness(FLUID_CONFIG, tmp_path, **CTX) as (_, ctx):
        result = asyncio.run(proc.run(ctx, params))
    cap = result.measurements["max_concurrency"]
    assert cap is not None and 4 <= cap < 16, result.tables[0].notes
    notes = " ".join(result.tables[0].notes)
    assert re.search(r"\d+: Fail: criterion Fluid token rate >= 83 tok/s: Fluid token rate [\d.]+ tok/s < 83", notes)
    rates = {r.label: r.metrics.scalars["fluid_token_rate"].value for r in result.runs}
    assert rates["c0002"] > rates["c0004"] > 83  # the rate falls as the batch grows
    assert "fluid_token_rate >= 83 tok/s" in result.tables[0].notes[1]
    assert result.checks["5.5.2-PARAM-4"].holds  # the threshold was declared (10 s)


def test_a_default_threshold_is_no_declaration() -> None:
    """Finding 10: 5.5.2-PARAM-4 ("TTFT P99 <= declared threshold") was met by construction on the 2 s default."""
    from types import SimpleNamespace

    from pytest_llmbench.procedures.p5_5_capacity import item_checks

    proc = get_procedure("5.5")
    for declared, status in ((None, "needs-declaration"), (1.5, "met")):
        p = proc.make_params("smoke", {"ttft_p99_threshold_s": declared})
        checks = item_checks(p, {4: SimpleNamespace(window_s=1.0, completions=4, measured=SimpleNamespace(
            metrics=SimpleNamespace(scalar=lambda _: SimpleNamespace(value=0))))}, [4], 0, False, 2.0 if declared is None else declared,
                             "default 2 s" if declared is None else "declared", True)
        assert checks["5.5.2-PARAM-4"].status.value == status, checks["5.5.2-PARAM-4"].reason


def test_bad_criterion_is_named() -> None:
    proc = get_procedure("5.5")
    with pytest.raises(ValueError, match="criteria: .*fluidity"):
        proc.make_params("standard", {"criteria": ["fluidity.p1 >= 90 tok/s"]})


def test_server_kv_usage_at_capacity_and_levels(outcome):
    """Issue 34: the server's KV usage at the capacity level (supporting evidence, §5.5) and the search's
    levels on the server's side."""
    from pytest_llmbench.document.plotdata import server_plots

    m = outcome.measurements
    assert 0 < m["server_kv_usage_mean_at_max"] <= m["server_kv_usage_peak_at_max"] <= 1
    assert any("supporting evidence" in n for n in outcome.notes)
    plots, notes = server_plots(outcome)
    lv = plots["server_levels"]
    assert notes == [] and lv["by"] == "concurrency" and lv["levels"] == sorted(lv["levels"], key=int)
    assert plots["server_timeline"]["run"] == outcome.primary_summary().label
