"""§5.10 Guardrail Overhead against the simulator: each filter adds the delay it is configured
with, refusals are counted as failures, the SUT's guardrail setting is restored."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from procedure_harness import procedure_context
from pytest_llmbench.procedures.base import Capacity, ProcedureContext, ProcedureError, SkipProcedure, get_procedure
from pytest_llmbench.records import ErrorType
from pytest_llmbench.settings import Settings
from pytest_llmbench.simulator import SimConfig, start_simulator
from pytest_llmbench.storage import iter_records
from pytest_llmbench.sut import SUT
from pytest_llmbench.tokenizer import get_tokenizer

PROC = get_procedure("5.10")


@contextlib.contextmanager
def harness(tmp_path: Path, config: SimConfig, rate: float) -> Iterator[tuple[Any, ProcedureContext]]:
    """A simulator and a hand-built ProcedureContext with a declared request-rate capacity."""
    with start_simulator(config) as sim:
        yield sim, procedure_context(sim, tmp_path, capacity=Capacity(rate=rate, source="declared by the test"), profile="smoke", seed=5)


def _per_request(run: Any, name: str) -> dict[int, float]:
    pr = run.metrics.per_request
    return {int(i): float(v) for i, v in zip(pr["index"], pr[name]) if np.isfinite(v)}


def _ok_records(run: Any) -> list[Any]:
    return [r for r in iter_records(run.run_dir) if r.phase == "measure" and r.ok]


def test_each_filter_adds_its_configured_delay(tmp_path: Path) -> None:
    cfg = SimConfig(time_scale=1.0, seed=3, step_ms=12.0, prefill_per_token_ms=0.01, prefill_per_token2_ms=0.0,
                    guardrail_input_base_ms=40.0,
                    guardrail_input_per_token_ms=0.02, guardrail_output_per_chunk_ms=20.0,
                    guardrail_refusal_rate=0.0)
    params = PROC.make_params("smoke", {"load_fractions": (0.5,), "report_level": 0.5, "requests_per_level": 32,
                                        "throughput_probe_concurrency": None, "max_output_tokens": 12,
                                        "warmup_requests": 10, "warmup_tokens": 100})
    with harness(tmp_path, cfg, rate=16.0) as (sim, ctx):
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
        recs = _ok_records(run)
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
        for r in _ok_records(run):
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


def test_refusals_are_failures_and_counted(tmp_path: Path) -> None:
    cfg = SimConfig(time_scale=0.25, seed=11, guardrails="input", guardrail_refusal_rate=0.25)
    params = PROC.make_params("smoke", {"configurations": ("none", "input", "output"), "load_fractions": (0.5,),
                                        "report_level": 0.5, "requests_per_level": 40, "max_output_tokens": 16,
                                        "throughput_probe_concurrency": 8, "throughput_probe_requests": 24,
                                        "warmup_requests": 10, "warmup_tokens": 100})
    with harness(tmp_path, cfg, rate=40.0) as (sim, ctx):
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


def test_skips_without_a_configuration_hook(tmp_path: Path) -> None:
    async def capacity(kind: str) -> Capacity:
        return Capacity(rate=10.0, source="test")

    sut = SUT(base_url="http://127.0.0.1:9/v1", model="m")
    ctx = ProcedureContext(sut=sut, settings=Settings(profile="smoke", report=tmp_path), tokenizer=get_tokenizer(),
                           run_root=tmp_path, get_capacity=capacity, configure_sut=lambda s, v: False)
    with pytest.raises(SkipProcedure, match="guardrails"):
        asyncio.run(PROC.run(ctx, PROC.make_params("smoke", {"requests_per_level": 5})))


@pytest.mark.parametrize("bad", [{"configurations": ("none", "audit")}, {"load_fractions": (0.25, 0.0)},
                                 {"report_level": 0.9}, {"throughput_probe_concurrency": 0},
                                 {"configurations": ("none", "none")}])
def test_bad_parameters_are_rejected(bad: dict[str, Any]) -> None:
    with pytest.raises(ProcedureError):
        PROC.make_params("standard", bad)
