"""§5.10 Guardrail Overhead against the simulator: each filter adds the delay it is configured
with, refusals are counted as failures, the SUT's guardrail setting is restored."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from factories import StartHarness, measured_ok

from pytest_llmbench.common.records import ErrorType
from pytest_llmbench.common.storage import iter_records
from pytest_llmbench.common.tokenizer import get_tokenizer
from pytest_llmbench.measure.units import format_cell
from pytest_llmbench.procedures.base import ProcedureContext, ProcedureError, SkipProcedure, get_procedure
from pytest_llmbench.procedures.p5_10_guardrails import Guardrails
from pytest_llmbench.procedures.result import Capacity
from pytest_llmbench.settings import Settings
from pytest_llmbench.simulator import SimConfig
from pytest_llmbench.sut.system import SUT

PROC = get_procedure("5.10")


def _per_request(run: Any, name: str) -> dict[int, float]:
    pr = run.metrics.per_request
    return {int(i): float(v) for i, v in zip(pr["index"], pr[name]) if np.isfinite(v)}


def test_each_filter_adds_its_configured_delay(harness: StartHarness) -> None:
    cfg = SimConfig(time_scale=1.0, seed=3, step_ms=12.0, prefill_per_token_ms=0.01, prefill_per_token2_ms=0.0,
                    guardrail_input_base_ms=40.0,
                    guardrail_input_per_token_ms=0.02, guardrail_output_per_chunk_ms=20.0,
                    guardrail_refusal_rate=0.0)
    params = PROC.make_params("smoke", {"load_fractions": (0.5,), "report_level": 0.5, "requests_per_level": 32,
                                        "throughput_probe_fraction": None, "max_output_tokens": 12,
                                        "warmup_requests": 10, "warmup_tokens": 100, "capacity": "session"})
    with harness(cfg, rate=16.0, profile="smoke", seed=5) as (sim, ctx):
        result = asyncio.run(PROC.run(ctx, params))
        assert sim.get_config()["guardrails"] == "none"  # restored
    base, inp, out, full = result.runs  # one level: baseline, input, output, full
    assert [r.extra["guardrails"] for r in result.runs] == ["none", "input", "output", "full"]

    # Each filter's own delay is read from the simulator's server-side timing of the same request
    # (§4.6.3 option C), bounded below by the model: a filter is a timer sleep that a busy machine
    # only lengthens (2 ms: a stale loop clock can end it early). Differences between two runs'
    # wall-clock TTFT/E2E are not bounded: noise in either run moves them both ways.
    slack = 0.002
    inp_cfg = cfg.replace(guardrails="input")
    for run in (inp, full):
        recs = measured_ok(run)
        assert len(recs) >= 30
        for r in recs:
            # the request reached the engine (first token minus prefill minus queue, server side)
            # after the input filter: at least the filter's delay after the client sent it
            st = r.server_timing
            engine_arrival_ns = r.server_token_ns[0] - st["prefill_ns"] - st["queue_ns"]
            pred = inp_cfg.predicted_input_guardrail_s(int(r.input_tokens))
            assert engine_arrival_ns - r.sent_ns >= (pred - slack) * 1e9, (r.index, st, pred)
    # output filter: each content chunk reaches the client only after the filter's slot (g) from
    # the moment the engine emitted its token (same CLOCK_MONOTONIC on both sides)
    g = cfg.replace(guardrails="output").predicted_output_guardrail_s(1)
    for run in (out, full):
        for r in measured_ok(run):
            assert r.first_token_ns - r.server_token_ns[0] >= (g - slack) * 1e9, r.index
    # the reported overheads are the P50 differences of these runs' records, exactly
    p50 = {name: {m: np.percentile(list(_per_request(run, m).values()), 50) for m in ("ttft", "e2e")}
           for name, run in (("base", base), ("input", inp), ("output", out), ("full", full))}
    meas = result.measurements
    assert meas["input_filter_overhead_ttft_p50_ms_50pct"] == pytest.approx(
        (p50["input"]["ttft"] - p50["base"]["ttft"]) * 1000, abs=1e-3)
    assert meas["total_overhead_e2e_p50_ms_50pct"] == pytest.approx(
        (p50["full"]["e2e"] - p50["base"]["e2e"]) * 1000, abs=1e-3)
    assert meas["output_filter_overhead_e2e_p50_ms_50pct"] == pytest.approx(
        (p50["output"]["e2e"] - p50["base"]["e2e"]) * 1000, abs=1e-3)

    # the draft's tables
    t13 = result.tables[0]
    assert t13.columns == ["Configuration", "TTFT P50", "TTFT P99", "E2E P50", "E2E P99"]
    assert [r[0] for r in t13.rows] == ["Baseline", "Input Filter", "Output Filter", "Full Filter"]
    t14 = result.tables[1]
    assert t14.columns == ["Configuration", "Max Throughput", "Reduction"]
    assert "not a maximum" in t14.notes[0]  # no probe: labelled as achieved throughput
    assert set(result.plots["configs"]) == {"Baseline", "Input Filter", "Output Filter", "Full Filter"}
    assert result.checks["5.10.2-PARAM-3"].status.value == "unmet"  # one level instead of 25/50/75 %


def test_refusals_are_failures_and_counted(harness: StartHarness) -> None:
    cfg = SimConfig(time_scale=0.25, seed=11, guardrails="input", guardrail_refusal_rate=0.25)
    params = PROC.make_params("smoke", {"configurations": ("none", "input", "output"), "load_fractions": (0.5,),
                                        "report_level": 0.5, "requests_per_level": 40, "max_output_tokens": 16,
                                        "throughput_probe_fraction": 1.5, "throughput_probe_requests": 24,
                                        "warmup_requests": 10, "warmup_tokens": 100, "capacity": "session"})
    with harness(cfg, rate=40.0, profile="smoke", seed=5) as (sim, ctx):
        result = asyncio.run(PROC.run(ctx, params))
        assert sim.get_config()["guardrails"] == "input"  # the original setting, not "none"
    m = result.measurements
    assert m["baseline_refusals"] == 0
    for key, run in zip(("baseline", "input", "output"), result.runs[:3]):
        refused = m[f"{key}_50pct_refused"]
        assert run.metrics.scalar("refusals").value == refused
        on_disk = [r for r in iter_records(run.run_dir) if r.phase == "measure"]
        assert sum(r.error_type is ErrorType.REFUSED for r in on_disk) == refused
        # refused requests are not successes: not in the latency distributions, success rate below 1
        assert run.metrics.distributions["ttft"].n == len(on_disk) - refused
        if key != "baseline":
            assert refused > 0
            assert run.metrics.scalar("success_rate").value < 1.0
    for key in ("baseline", "input", "output"):  # client count == the server's content_filter counter
        assert m[f"{key}_refusals"] == m[f"{key}_refusals_server"]
    assert m["input_refusals"] > 0 and m["output_refusals"] > 0
    # input refusals never produce a token; output refusals stop part-way
    inp = [r for r in iter_records(result.runs[1].run_dir) if r.error_type is ErrorType.REFUSED]
    assert all(r.first_token_ns is None for r in inp)
    t14 = result.tables[1]
    assert [r[0] for r in t14.rows] == ["Baseline", "Input Filter", "Output Filter"]
    assert m["baseline_max_throughput_tps"] > 0
    assert result.checks["5.10.2-PARAM-2"].status.value == "unmet"  # Full Filter not run


def test_rewarm_after_switch_and_max_throughput_beyond_capacity(harness: StartHarness) -> None:
    """§5.10.3 steps 2–3: each configuration is warmed up after its switch, before its runs; Table 14's
    max throughput comes from a saturation run at a multiple of the capacity rate (not a fixed probe)."""
    cfg = SimConfig(time_scale=1.0, seed=4, step_ms=10.0, decode_per_seq_ms=0.1, max_num_seqs=4,
                    prefill_per_token_ms=0.01, prefill_per_token2_ms=0.0, eos_mean_tokens=0.0,
                    guardrail_input_base_ms=30.0, guardrail_input_per_token_ms=0.0,
                    guardrail_output_per_chunk_ms=0.5, guardrail_refusal_rate=0.0)
    out_tokens = 16
    model_max_tps = cfg.predicted_output_throughput(cfg.max_num_seqs)  # decode-only bound: prefill lowers it
    cap_rate = model_max_tps / out_tokens  # >= the real request-rate capacity, so 1.5x saturates by construction
    params = PROC.make_params("smoke", {
        "configurations": ("none", "full"), "load_fractions": (0.5,), "report_level": 0.5,
        "workload": "fixed", "workload_params": {"input_tokens": 64, "output_tokens": out_tokens, "force_output": True},
        "requests_per_level": 24, "throughput_probe_fraction": 1.5, "throughput_probe_requests": 60,
        "warmup_requests": 10, "warmup_tokens": 100, "capacity": "session"})
    with harness(cfg, rate=cap_rate, profile="smoke", seed=5) as (sim, ctx):
        result = asyncio.run(PROC.run(ctx, params))
    level_none, level_full, probe_none, probe_full = result.runs  # levels, then the saturation runs
    assert [r.extra.get("throughput_probe", False) for r in result.runs] == [False, False, True, True]

    # a warm-up per configuration, between the previous configuration's last response and the first
    # measured request of this one, with the new configuration's input filter in force
    warm = {key: list(iter_records(ctx.run_root / f"warmup-{key}")) for key in ("baseline", "full")}
    assert all(len(v) >= 10 for v in warm.values())
    prev_end = max(r.end_ns for r in iter_records(probe_none.run_dir))
    first_full = min(r.sent_ns for r in iter_records(level_full.run_dir))
    assert all(prev_end < r.sent_ns and r.end_ns < first_full for r in warm["full"])
    pred = cfg.replace(guardrails="full").predicted_input_guardrail_s(64)
    for r in warm["full"]:
        if r.ok and r.server_timing and r.server_token_ns:
            st = r.server_timing
            assert r.server_token_ns[0] - st["prefill_ns"] - st["queue_ns"] - r.sent_ns >= (pred - 0.002) * 1e9
    assert any("warm-up after every configuration switch" in n for n in result.notes)

    # the saturation run: open loop at 1.5x the capacity rate (exactly), the same sequence per configuration
    for probe in (probe_none, probe_full):
        assert probe.load["model"] == "open" and probe.load["rate"] == pytest.approx(1.5 * cap_rate, rel=1e-3)
    m = result.measurements
    assert m["capacity_kind"] == "declared" and m["capacity_rate_rps"] == pytest.approx(cap_rate)  # the test's
    assert not any("deviation" in n for n in result.notes)
    assert m["baseline_throughput_saturated"] is True and m["full_throughput_saturated"] is True
    for key, probe in (("baseline", probe_none), ("full", probe_full)):
        # exact recomputation: output tokens of successful requests over the window after its first 10 %
        recs = list(iter_records(probe.run_dir))
        runjson = json.loads((Path(probe.run_dir) / "run.json").read_text())["loads"][0]
        # the send window as every throughput figure takes it (procedures/run.measure, §5.2.3.2): from the
        # load's start to its last send (T_submit), never past the load's own end of sending
        t1 = min(runjson["send_end_ns"], max(r.sent_ns for r in recs))
        t0 = runjson["start_ns"] + 0.1 * (t1 - runjson["start_ns"])
        tokens = sum(k for r in recs if r.ok for t, k in zip(r.chunk_ns, r.chunk_tokens) if t0 <= t <= t1)
        assert m[f"{key}_max_throughput_tps"] == pytest.approx(tokens / ((t1 - t0) / 1e9), abs=0.01)
        # never above the engine's decode-only bound (a busy host only lowers it); 5 %: chunk bunching at the edges
        assert m[f"{key}_max_throughput_tps"] <= model_max_tps * 1.05
    t14 = result.tables[1]
    assert "1.5 x the request-rate capacity" in t14.notes[0] and not any(">=" in format_cell(row[1]) for row in t14.rows)


def test_capacity_probe_runs_in_baseline_on_its_own_workload(harness: StartHarness) -> None:
    """capacity="probe" (default): the capacity is measured after the switch to Baseline, on this
    workload's requests (own seed stream), never borrowed from 5.2; the levels are fractions of it."""
    cfg = SimConfig(time_scale=0.25, seed=6, guardrails="input", guardrail_refusal_rate=0.0)
    params = PROC.make_params("smoke", {"configurations": ("none", "input"), "load_fractions": (0.5,),
                                        "report_level": 0.5, "requests_per_level": 16, "max_output_tokens": 8,
                                        "throughput_probe_fraction": None, "probe_concurrency": 8,
                                        "probe_duration_s": 1.5, "warmup_requests": 6, "warmup_tokens": 40})
    assert params.capacity == "probe"
    switches: list[tuple[int, str]] = []
    with harness(cfg, capacity=None, profile="smoke", seed=5) as (sim, ctx):  # no capacity in the session
        configure = ctx.configure_sut

        def logged(setting: str, value: Any) -> bool:
            if setting == "guardrails":
                switches.append((time.perf_counter_ns(), sim.get_config()["guardrails"]))
            ok = configure(setting, value)
            if setting == "guardrails":
                switches.append((time.perf_counter_ns(), sim.get_config()["guardrails"]))
            return ok

        ctx.configure_sut = logged
        warm_up_with = Guardrails.warm_up_with
        reserved_at_warm_up: list[set[str]] = []  # the prompts reserved when each warm-up chose its own

        async def watched(self: Guardrails, *a: Any, **kw: Any) -> Any:
            reserved_at_warm_up.append({s.prompt_hash for specs in self.reserved for s in specs})
            return await warm_up_with(self, *a, **kw)

        Guardrails.warm_up_with = watched  # type: ignore[method-assign]
        try:
            result = asyncio.run(PROC.run(ctx, params))
        finally:
            Guardrails.warm_up_with = warm_up_with  # type: ignore[method-assign]
    *probes, base, inp = result.runs
    probe = probes[0]  # a short search (issue 48): c8, then doubling while the rate still rises by 10 %
    assert [r.label for r in probes] == [f"capacity-probe-baseline-c{8 * 2 ** k}" for k in range(len(probes))]
    assert probe.extra["phase_role"] == "capacity probe" and 2 <= len(probes) <= 3
    assert probe.extra["guardrails_state"] == "none" and probe.extra["capacity_configuration"] == "none"
    all_recs = [[r for r in iter_records(pr.run_dir) if r.phase == "measure"] for pr in probes]
    recs = all_recs[0]
    first, last = min(r.sent_ns for r in recs), max(r.end_ns for rs in all_recs for r in rs if r.end_ns)
    # the simulator's guardrail mode while the probes ran: Baseline, set before them and not changed during them
    before = [mode for t, mode in switches if t < first]
    assert before and before[-1] == "none" and not [t for t, _ in switches if first <= t <= last]
    assert {r.workload for rs in all_recs for r in rs} == {"conversation"}  # its own workload, not 5.2's
    measured = {r.prompt_hash for run in (base, inp) for r in iter_records(run.run_dir) if r.phase == "measure"}
    assert not any(measured & {r.prompt_hash for r in rs} for rs in all_recs)
    # every prompt the first probe sent was reserved before the first warm-up chose its prompts (§4.5.1)
    assert reserved_at_warm_up and {r.prompt_hash for r in recs} <= reserved_at_warm_up[0]

    def steady_rate(pr: Any, rs: list[Any]) -> float:  # completions over the probe's steady window
        load = json.loads((Path(pr.run_dir) / "run.json").read_text())["loads"][0]
        lo = load["start_ns"] + 0.1 * (load["send_end_ns"] - load["start_ns"])
        done = sum(1 for r in rs if r.ok and r.end_ns is not None and lo <= r.end_ns <= load["send_end_ns"])
        return done / ((load["send_end_ns"] - lo) / 1e9)

    m = result.measurements
    assert m["capacity_rate_rps"] == pytest.approx(max(steady_rate(pr, rs) for pr, rs in zip(probes, all_recs)),
                                                   rel=1e-6)
    assert m["capacity_kind"] == "own probe" and m["capacity_configuration"] == "none"
    assert "Baseline configuration" in m["capacity_source"]
    assert base.load["rate"] == pytest.approx(0.5 * m["capacity_rate_rps"], rel=1e-3)
    assert result.checks["5.10.2-PARAM-3"].status.value == "unmet"  # 50 % only, but not for a borrowed capacity
    assert "borrowed" not in result.checks["5.10.2-PARAM-3"].reason


def test_a_borrowed_capacity_is_a_deviation() -> None:
    """capacity="session" with 5.2's rate (not declared): 5.10.2-PARAM-3 is unmet and names the deviation."""
    from pytest_llmbench.procedures.p5_10_guardrails import item_checks

    p = PROC.make_params("standard", {"capacity": "session"})
    decl = {"name": "conversation"}
    ok = item_checks(p, {}, {}, decl, {})["5.10.2-PARAM-3"]
    borrowed = item_checks(p, {}, {}, decl, {}, borrowed="measured by 5.2 in this session")["5.10.2-PARAM-3"]
    assert ok.status.value == "met" and borrowed.status.value == "unmet"
    assert "borrowed" in borrowed.reason and "measured by 5.2" in borrowed.reason
    # issue 48: a capacity search that found no plateau gives a lower bound, said in the verdict
    bound = item_checks(p, {}, {}, decl, {}, standing="lower-bound")["5.10.2-PARAM-3"]
    assert bound.status.value == "unmet" and "lower bound" in bound.reason


def test_saturation_detection_on_synthetic_runs() -> None:
    """Delivered under 95 % of the offered output tok/s: saturated; delivering what is offered: not. Delivered
    is the run's output_throughput over the send window less its first 10 % (the one definition)."""
    from types import SimpleNamespace

    from factories import make_record

    from pytest_llmbench.measure.summary import summarize
    from pytest_llmbench.procedures.p5_10_guardrails import saturation_throughput

    def run(gap_ms: float, first_token_ms: float, token_gap_ms: float) -> Any:
        # 100 requests every gap_ms, 10 one-token chunks each
        recs = [make_record(i, sent=i * gap_ms, ttft=first_token_ms(i) if callable(first_token_ms) else first_token_ms,
                            itl=token_gap_ms, n_chunks=10, output_tokens_server=10) for i in range(100)]
        return SimpleNamespace(metrics=summarize(recs, send_window_ns=(0, int(99 * gap_ms * 1e6))))

    keeps_up = saturation_throughput(run(10.0, 0.5, 0.5))  # 100 req/s, each served in 5 ms
    assert keeps_up is not None and not keeps_up.saturated
    assert keeps_up.delivered_tps == pytest.approx(keeps_up.offered_tps, rel=0.03)
    # a server that serves one request per 20 ms while they arrive every 10 ms falls behind: 500 tok/s
    sat = saturation_throughput(run(10.0, lambda i: 10.0 * i + 2.0, 2.0))
    assert sat is not None and sat.saturated and sat.delivered_tps == pytest.approx(500.0, rel=0.03)


def test_skips_without_a_configuration_hook(tmp_path: Path) -> None:
    async def capacity(kind: str) -> Capacity:
        return Capacity(rate=10.0, source="test")

    sut = SUT(base_url="http://127.0.0.1:9/v1", model="m")
    ctx = ProcedureContext(sut=sut, settings=Settings(profile="smoke", report=tmp_path), tokenizer=get_tokenizer(),
                           run_root=tmp_path, get_capacity=capacity, configure_sut=lambda s, v: False)
    with pytest.raises(SkipProcedure, match="guardrails") as skipped:
        asyncio.run(PROC.run(ctx, PROC.make_params("smoke", {"requests_per_level": 5})))
    c = skipped.value.result.compliance["5.10.2-PARAM-2"]  # issue 48: the unmet item, with the reason
    assert c.status.value == "unmet" and "could not be set" in c.reason and "configure_sut" in c.reason


@pytest.mark.parametrize("bad", [{"configurations": ("none", "audit")}, {"load_fractions": (0.25, 0.0)},
                                 {"report_level": 0.9}, {"throughput_probe_fraction": 0.5},
                                 {"configurations": ("none", "none")}])
def test_bad_parameters_are_rejected(bad: dict[str, Any]) -> None:
    with pytest.raises(ProcedureError):
        PROC.make_params("standard", bad)


@pytest.mark.parametrize(("measured", "compares"), [({"none", "full"}, True), ({"none", "input", "output"}, True),
                                                    ({"full"}, False), ({"none"}, False), (set(), False)])
def test_only_a_run_with_guardrails_off_and_on_counts_as_the_comparison(measured: set[str], compares: bool,
                                                                        tmp_path: Path) -> None:
    """4.8.2-SHOULD-2 asks for an on/off comparison: a 5.10 that measured only one side does not provide it."""
    from pytest_llmbench.compliance import RunFacts

    ctx = ProcedureContext(sut=SUT(base_url="http://127.0.0.1:9/v1", model="m", api="completions"),
                           settings=Settings(report=tmp_path), tokenizer=get_tokenizer(), run_root=tmp_path,
                           get_capacity=None, configure_sut=lambda s, v: False)  # type: ignore[arg-type]
    proc = Guardrails(ctx, PROC.make_params("smoke", {"configurations": ("none", "input", "output", "full")}))
    proc.runs = {(c, 0.5): None for c in measured}
    facts = RunFacts(session_tests=("5.1",))
    proc.adjust_facts(facts)
    assert ("5.10" in facts.session_tests) is compares and "5.1" in facts.session_tests
