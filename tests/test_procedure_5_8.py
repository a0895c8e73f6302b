"""§5.8 Memory Pressure Behavior against a simulator whose KV budget is known.

Configuration: 224-token prompts with 64 forced output tokens = 288 tokens = 18 blocks of 16, and a
cache of 12 × 18 = 216 blocks, so ``K = kv_capacity_requests(224, 64) = 12`` requests fit whole.
The capacity is declared as K (what 5.5 measures on such a KV-bound engine, see
test_procedure_5_5). At 50 % (6 concurrent, 108 blocks at most) every sequence fits from prompt
to last token: the engine can never preempt. At 150 % (18 concurrent) the engine admits a request
once its 14 prompt blocks are free (15 fit by prompt alone), the running sequences then grow into
their last 4 blocks and run out, and the newest is preempted by recompute; the simulator's
virtual-clock engine (``simulate_closed_loop``) confirms both.
"""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
from factories import simulator_harness

from pytest_llmbench.common.records import ErrorType
from pytest_llmbench.common.storage import iter_records
from pytest_llmbench.measure.summary import summarize
from pytest_llmbench.measure.units import format_cell
from pytest_llmbench.procedures.base import get_procedure
from pytest_llmbench.procedures.p5_8_memory_pressure import (
    NOT_MEASURABLE,
    assess_pressure,
    describe_degradation,
    level_concurrency,
)
from pytest_llmbench.procedures.result import Capacity, RunSummary
from pytest_llmbench.procedures.run import Measured
from pytest_llmbench.simulator import SimConfig
from pytest_llmbench.simulator.predict import simulate_closed_loop

IN, OUT = 224, 64
CONFIG = SimConfig(time_scale=0.5, kv_capacity_tokens=12 * 288, prefix_cache=False, seed=5)
K = CONFIG.kv_capacity_requests(IN, OUT)


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    proc = get_procedure("5.8")
    params = proc.make_params("standard", {
        "workload": "fixed", "workload_params": {"input_tokens": IN}, "output_tokens": OUT,
        "levels": (0.5, 1.5), "level_s": 3.0, "warmup_requests": 8, "warmup_tokens": 300, "capacity_concurrency": K,
    })
    root = tmp_path_factory.mktemp("p58")
    with simulator_harness(CONFIG, root, profile="standard", seed=13, timeout=60.0) as (_, ctx):
        result = asyncio.run(proc.run(ctx, params))  # declared: the session's capacity is never asked for
    return result


def test_model_predicts_preemption_only_above_kv_capacity():
    assert K == 12
    assert simulate_closed_loop(CONFIG, level_concurrency(0.5, K), IN, OUT, duration_s=5).num_preemptions == 0
    assert simulate_closed_loop(CONFIG, level_concurrency(1.5, K), IN, OUT, duration_s=5).num_preemptions > 0


def test_preemptions_above_capacity_none_below(outcome):
    low, high = outcome.measurements["levels"]
    assert (low["level"], low["concurrency"]) == (0.5, 6)
    assert (high["level"], high["concurrency"]) == (1.5, 18)
    # well below: nothing preempted, by the per-request timing and by the /metrics counters
    assert low["preemption_rate"] == 0 and low["preemption_events"] == 0 and low["preempted_requests"] == 0
    # above: preemption, every preempted request recovered (drained fully: none cancelled)
    assert high["preemption_events"] > 0 and high["preempted_requests"] > 0
    assert 0 < high["preemption_rate"] <= 1
    assert high["cancelled"] == 0 and high["recovery_rate"] == 1.0
    # a preemption discards the prompt plus the tokens generated so far: within (prompt, prompt + output]
    assert IN < high["tokens_lost_per_preemption"] <= IN + OUT
    assert low["completion"] == high["completion"] == 1.0 and high["fail_rate"] == 0
    assert high["source"].startswith("server per-request timing")


def test_table11_and_checks(outcome):
    table = outcome.tables[0]
    assert table.columns == ["Oversub Level", "Complete", "Preempt", "Fail Rate", "Cancelled", "TTFT P99"]
    assert [format_cell(r[4]) for r in table.rows] == [f"0 of {lv['requests']} (0.0%)"
                                                       for lv in outcome.measurements["levels"]]
    assert [r[0] for r in table.rows] == ["50%", "150%"]
    assert str(table.rows[0][2]) == "0.0%" and str(table.rows[1][2]) != "0.0%"
    assert outcome.facts.exceeds_capacity is True
    c = outcome.checks
    assert c["7.4-SHOULD-3"].status.value == "met"
    assert c["5.8.3-PARAM-4"].status.value == "unmet"  # 3 s levels < 120 s, never silent
    assert "5.8.2-SHOULD-1" not in c  # the evaluator decides it from the workload's standing as run
    assert outcome.compliance["5.8.2-SHOULD-1"].status.value == "unmet"  # workload "fixed", not Long Context
    assert c["5.8.4-REPORT-2"].status.value == "met"
    assert outcome.plots["curve"]["offered"] == [6, 18]


def test_without_server_data_preemption_is_not_measurable(outcome):
    """A SUT without server timing or /metrics: the table says so instead of reporting 0 %."""
    run_dir = outcome.runs[-1].run_dir
    records = [dataclasses.replace(r, server_timing=None, server_token_ns=None) for r in iter_records(run_dir)]
    assert records and any(r.server_timing is None for r in records)
    metrics = summarize(records)
    summary = RunSummary(label="x", run_dir=run_dir, load={}, metrics=metrics)
    fake = Measured(load=SimpleNamespace(records=records), summary=summary)  # type: ignore[arg-type]
    lp = assess_pressure(1.5, 18, fake, 0)
    assert lp.source == NOT_MEASURABLE
    assert lp.preemption_rate is None and lp.recovery_rate is None and lp.preemption_events is None
    assert lp.completion == 1.0


@pytest.mark.parametrize("level,cap,expected", [(1.0, 12, 12), (1.1, 12, 13), (1.1, 4, 5), (1.25, 40, 50),
                                                (0.5, 1, 1), (1.5, 1, 2)])
def test_level_concurrency(level, cap, expected):
    assert level_concurrency(level, cap) == expected


def test_default_workload_is_long_context_that_fits_the_window():
    p = get_procedure("5.8").make_params("standard", {})
    assert p.workload == "long-context" and max(p.workload_params["lengths"]) + p.output_tokens <= 32768
    assert np.allclose(p.levels, (1.0, 1.1, 1.25, 1.5)) and p.level_s == 120.0


def test_cancelled_requests_count_against_completion(outcome):
    """Issue: "Complete 100 %, graceful" was shown while 19 of 92 requests were cancelled at the drain.

    The 150 % level's records with the last 19 marked cancelled at the drain (as the load generator
    marks them): they did not complete, so Complete = ok / sent and the summary is not "graceful".
    """
    run_dir = outcome.runs[-1].run_dir
    records = sorted(iter_records(run_dir), key=lambda r: r.sent_ns)
    assert len(records) > 19 and all(r.ok for r in records)
    cut = records[-19:]
    for r in cut:
        r.error_type, r.error_message = ErrorType.CANCELLED, "cancelled by the load generator"
    metrics = summarize(records)
    assert metrics.scalar("success_rate").value == 1.0  # the metrics layer leaves cancelled requests out
    summary = RunSummary(label="x", run_dir=run_dir, load={}, metrics=metrics)
    fake = Measured(load=SimpleNamespace(records=records, duration_s=3.0), summary=summary)  # type: ignore[arg-type]
    lp = assess_pressure(1.5, 18, fake, 0)
    n = len(records)
    assert (lp.requests, lp.cancelled) == (n, 19)
    assert lp.completion == pytest.approx((n - 19) / n) and lp.fail_rate == 0
    assert lp.cancelled_rate == pytest.approx(19 / n)
    assert lp.to_json()["cancelled"] == 19
    assert metrics.scalar("success_rate").value == pytest.approx((n - 19) / n)  # the run's figure counts them
    base = assess_pressure(1.0, 12, Measured(load=SimpleNamespace(records=[dataclasses.replace(r, error_type=None)
                                                                   for r in records], duration_s=3.0),
                                     summary=RunSummary(label="y", run_dir=run_dir, load={},
                                                        metrics=summarize([dataclasses.replace(r, error_type=None)
                                                                           for r in records]))), 0)
    text = describe_degradation([base, lp])
    assert "graceful" not in text and "19 of" in text and "cancelled" in text
    assert "graceful" in describe_degradation([base, base])


def test_a_level_without_a_successful_request_still_summarises(outcome):
    """Seen in a smoke run on a busy host: every request of a level cancelled at the drain, some with
    partial server token times; option C then had no successful record and summarize() raised."""
    from pytest_llmbench.procedures.run import itl_decision_for

    def itl_option_for(records: list) -> str:  # the App. B.2.1 option a run's summary takes
        return itl_decision_for(records).option

    records = list(iter_records(outcome.runs[-1].run_dir))
    assert itl_option_for(records) == "C"  # the simulator sends per-token times
    for r in records:
        r.error_type, r.error_message = ErrorType.CANCELLED, "cancelled by the load generator"
    assert any(r.server_token_ns for r in records)
    assert itl_option_for(records) == "B"
    metrics = summarize(records, itl_option=itl_option_for(records))
    assert metrics.scalar("cancelled_count").value == len(records)
    with pytest.raises(ValueError, match="itl_option 'C'"):
        summarize(records, itl_option="C")  # what the old choice did


def test_server_telemetry_per_level_and_events_only(outcome):
    """Issue 34: the levels' server series (plotted per level), and a server that counts preemption events only
    (vLLM): events, an upper bound, never a per-request rate."""
    from pytest_llmbench.document.plotdata import server_plots
    from pytest_llmbench.measure.telemetry import SAMPLED, TelemetrySeries

    plots, notes = server_plots(outcome)
    assert notes == [] and plots["server_timeline"]["run"] == outcome.runs[-1].label
    lv = plots["server_levels"]
    assert lv["levels"] == ["50%", "150%"] and lv["by"] == "oversubscription level"
    low, high = (lv["rows"][k] for k in lv["levels"])
    assert high["preemption events"] == outcome.measurements["levels"][1]["preemption_events"] > 0
    assert low["preemption events"] == 0 and high["peak KV usage (%)"] > low["peak KV usage (%)"]

    run_dir = outcome.runs[-1].run_dir
    records = [dataclasses.replace(r, server_timing=None, server_token_ns=None) for r in iter_records(run_dir)]
    summary = RunSummary(label="x", run_dir=run_dir, load={}, metrics=summarize(records))
    events = TelemetrySeries(status=SAMPLED, t_ns=[0, 10**9], values={"preemptions": [3.0, 10.0]})
    fake = Measured(load=SimpleNamespace(records=records), summary=summary, telemetry=events)  # type: ignore[arg-type]
    lp = assess_pressure(1.5, 18, fake, 0)
    assert lp.source == "server /metrics (events only)" and lp.preemption_events == 7.0
    assert lp.preemption_rate is None and lp.preempted_requests is None


# ---- §5.8.3 step 1: the capacity of its own workload (issue 36) ---------------------------------
LONG = [512, 1024]  # long-context target lengths of these runs
SEARCH = {"workload_params": {"lengths": LONG}, "output_tokens": 16, "levels": (1.0, 1.25), "level_s": 1.0,
          "drain_s": 2.0, "warmup_requests": 4, "warmup_tokens": 40, "search_initial_concurrency": 2,
          "search_max_concurrency": 8, "search_resolution": 2, "search_min_level_s": 1.0,
          "search_min_completions_per_slot": 2}


def _run_58(tmp_path, params: dict, capacity: Capacity | None = None, declared: str | None = None):
    proc = get_procedure("5.8")
    cfg = SimConfig(time_scale=0.25, seed=7)
    with simulator_harness(cfg, tmp_path, capacity=capacity, profile="smoke", seed=3, timeout=30.0) as (sim, ctx):
        ctx.settings.capacity = declared
        return asyncio.run(proc.run(ctx, proc.make_params("smoke", params)))


def test_capacity_search_on_its_own_long_context_workload(tmp_path):
    """capacity="search" (default): §5.5.3's search runs first, on the long-context requests 5.8
    oversubscribes (not on 5.5's Synthetic-Uniform), and the levels are ratios to what it found."""
    result = _run_58(tmp_path, SEARCH)  # no capacity declared: asking the session would fail the test
    m = result.measurements
    search_runs = [r for r in result.runs if r.extra.get("phase_role") == "capacity search"]
    level_runs = [r for r in result.runs if r.label.startswith("oversub_")]
    assert search_runs and [r.label for r in result.runs] == [r.label for r in search_runs + level_runs]
    assert all(r.label.startswith("capacity-search-c") for r in search_runs)
    for r in search_runs:  # the long-context workload's input lengths, output forced as in 5.5
        recs = [x for x in iter_records(r.run_dir) if x.phase == "measure"]
        assert recs and {x.spec_input_tokens for x in recs} <= set(LONG) and len({x.spec_input_tokens for x in recs}) == 2
        assert all(x.max_tokens == 16 for x in recs)
    search = m["capacity_search"]
    passed = [lv["concurrency"] for lv in search["levels"] if lv["passed"]]
    assert m["capacity_kind"] == "own search" and passed
    assert m["capacity_concurrency"] == search["capacity"] == max(passed)
    assert [lv["concurrency"] for lv in search["levels"]] == [r.extra["concurrency"] for r in search_runs]
    # every level's verdict follows §5.5.2's criteria on its own records
    for lv, r in zip(search["levels"], search_runs):
        assert lv["passed"] == (not lv["reasons"])
        assert lv["passed"] == (lv["completion"] is not None and lv["completion"] >= 0.99
                                and lv["ttft_p99_s"] <= search["ttft_p99_threshold_s"] and not lv["capacity_errors"])
    cap = m["capacity_concurrency"]
    assert [r.extra["concurrency"] for r in level_runs] == [level_concurrency(x, cap) for x in (1.0, 1.25)]
    assert "search on this long-context workload" in m["capacity_source"]
    assert any(t.title.startswith("Capacity search on this workload") for t in result.tables)
    assert result.checks["5.8.3-PARAM-3"].status.value == "met"
    assert "own search" in result.checks["5.8.3-PARAM-1"].reason  # needs a declaration: default threshold


def test_a_borrowed_capacity_is_a_deviation_and_a_declared_one_is_named(tmp_path):
    """capacity="session" takes 5.5's capacity measured on another workload: named as a deviation
    (a note, 5.8.3-PARAM-3 unmet); --llm-capacity concurrency=N is declared, not borrowed."""
    quick = {**SEARCH, "levels": (1.25,), "level_s": 0.5}
    five_five = Capacity(concurrency=3, source="measured by 5.5 in this session")
    borrowed = _run_58(tmp_path / "b", {**quick, "capacity": "session"}, capacity=five_five)
    assert borrowed.measurements["capacity_kind"] == "borrowed"
    assert borrowed.measurements["capacity_concurrency"] == 3 and borrowed.measurements["capacity_search"] is None
    assert not any(r.extra.get("phase_role") == "capacity search" for r in borrowed.runs)
    assert any(n.startswith("deviation: the capacity 3 is borrowed") for n in borrowed.notes)
    assert borrowed.checks["5.8.3-PARAM-3"].status.value == "unmet"
    assert "borrowed" in borrowed.checks["5.8.3-PARAM-3"].reason
    declared = _run_58(tmp_path / "d", quick, capacity=Capacity(concurrency=3, source="declared (--llm-capacity)"),
                       declared="concurrency=3")
    assert declared.measurements["capacity_kind"] == "declared"
    assert declared.measurements["capacity_source"] == "declared (--llm-capacity)"
    assert declared.checks["5.8.3-PARAM-3"].status.value == "met"
    assert not any(r.extra.get("phase_role") == "capacity search" for r in declared.runs)
