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


def _paired(a: Any, b: Any, name: str) -> tuple[np.ndarray, list[int]]:
    va, vb = _per_request(a, name), _per_request(b, name)
    keys = sorted(set(va) & set(vb))
    return np.array([va[k] - vb[k] for k in keys]), keys


def test_each_filter_adds_its_configured_delay(tmp_path: Path) -> None:
    # cheap prefills: a long prompt arriving does not stall the others for long, so paired
    # per-request differences isolate the filters' delays
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
    isl = _per_request(base, "isl")

    # input filter: TTFT grows by base + per-token delay of each prompt, request by request
    d_in, keys = _paired(inp, base, "ttft")
    pred_in = np.array([cfg.replace(guardrails="input").predicted_input_guardrail_s(int(isl[k])) for k in keys])
    assert len(keys) >= 30
    ratio = np.median(d_in) / np.median(pred_in)
    assert 0.8 < ratio < 1.3, (np.median(d_in), np.median(pred_in))
    reported = result.measurements["input_filter_overhead_ttft_p50_ms_50pct"] / 1000
    assert 0.7 < reported / np.median(pred_in) < 1.4

    # output filter: a FIFO check of every chunk, slower (20 ms) than decoding (ITL ~12 ms): the
    # first chunk waits one slot, then the filter paces the stream, so E2E grows by
    # g + (n - 1) * (g - ITL) for an n-token answer (ITL from the same request's baseline TPOT)
    g = cfg.replace(guardrails="output").predicted_output_guardrail_s(1)
    d_out_ttft, _ = _paired(out, base, "ttft")
    assert 0.6 < np.median(d_out_ttft) / g < 1.6, np.median(d_out_ttft)
    d_out_e2e, keys = _paired(out, base, "e2e")
    osl, tpot = _per_request(base, "osl"), _per_request(base, "tpot")
    pred_out = np.array([g + (osl[k] - 1) * max(g - tpot.get(k, 0.0), 0.0) for k in keys])
    assert 0.75 < np.median(d_out_e2e) / np.median(pred_out) < 1.3, (np.median(d_out_e2e), np.median(pred_out))
    # the input filter does not delay tokens after the first: E2E grows by the TTFT delay only
    d_in_e2e, _ = _paired(inp, base, "e2e")
    assert 0.7 < np.median(d_in_e2e) / np.median(pred_in) < 1.4

    # full = both
    d_full, keys = _paired(full, base, "ttft")
    assert 0.8 < np.median(d_full) / (np.median(pred_in) + g) < 1.3
    total = result.measurements["total_overhead_e2e_p50_ms_50pct"] / 1000
    assert 0.7 < total / (np.median(pred_in) + np.median(pred_out)) < 1.4

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
