"""§5.9 Long Context Scaling against the simulator's prefill model.

A lone request's TTFT on the simulator is ``SimConfig.predicted_ttft_s(L)`` =
``(step + a·L + b·L²) · time_scale``. The quadratic term is raised here (b = 1e-5 ms/token²) so the
model is clearly super-linear over 1K–16K (log-log slope ≈ 1.29, not ≈ 1): the exponent the
procedure fits to measured TTFTs must agree within ±0.1 with the model's own log-log slope over
the same lengths.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from factories import simulator_harness
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmbench.common.storage import iter_records, load_run
from pytest_llmbench.procedures.base import get_procedure
from pytest_llmbench.procedures.p5_9_long_context import (
    LengthThroughput,
    SweepLevel,
    default_lengths,
    effective_lengths,
    level_ends_sweep,
    long_context_standing,
)
from pytest_llmbench.simulator import SimConfig

LENGTHS = (1024, 2048, 4096, 8192, 16384)
CONFIG = SimConfig(time_scale=0.5, prefill_per_token2_ms=1e-5, context_window=16384 + 8, seed=9)


CTX = {"profile": "standard", "seed": 21, "timeout": 60.0}  # the procedure contexts' settings


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    proc = get_procedure("5.9")
    params = proc.make_params("standard", {
        "lengths": LENGTHS, "requests_per_length": 3, "max_output_tokens": 4,
        "warmup_requests": 8, "warmup_tokens": 200, "throughput_concurrencies": (),
    })
    root = tmp_path_factory.mktemp("p59")
    with simulator_harness(CONFIG, root, **CTX) as (_, ctx):
        result = asyncio.run(proc.run(ctx, params))
    return result


def model_exponent(lengths: list[int]) -> float:
    L = np.asarray(lengths, dtype=float)
    y = np.array([CONFIG.predicted_ttft_s(int(x)) for x in L])
    return float(np.polyfit(np.log(L), np.log(y), 1)[0])


def test_exponent_matches_prefill_model(outcome):
    lengths = outcome.measurements["lengths"]
    # 16384 + 256 output exceeds the 16392-token window: lowered to 16136 and noted
    assert lengths == [1024, 2048, 4096, 8192, 16136]
    assert any("tested at 16136" in n for n in outcome.tables[0].notes)
    k_model = model_exponent(lengths)
    assert 1.2 < k_model < 1.4  # the configuration really is super-linear
    k = outcome.measurements["scaling_exponent"]
    assert abs(k - k_model) <= 0.1, (k, k_model)
    assert outcome.plots["scaling"]["fit"]["k"] == pytest.approx(k)
    assert outcome.measurements["r2_loglog"] > 0.98


def test_per_length_ttft_follows_the_model(outcome):
    """Mean TTFT per length over the model's lone-request TTFT: a ratio near 1 at every length."""
    ratios = [v["ttft_mean_s"] / CONFIG.predicted_ttft_s(int(L))
              for L, v in outcome.measurements["per_length"].items()]
    assert all(0.9 <= r <= 1.6 for r in ratios), ratios


def test_table12_columns_are_consistent(outcome):
    table = outcome.tables[0]
    assert table.columns == ["Context (tokens)", "TTFT Mean", "TTFT P95", "ms/1K tokens"]
    assert table.notes[0].startswith("Best fit: ")
    for row in table.rows:
        v = outcome.measurements["per_length"][row[0]]
        # ms/1K tokens is mean TTFT / (length / 1000) (the draft's own Table 12 gets this wrong)
        assert float(row[3]) == pytest.approx(v["ttft_mean_s"] * 1e6 / int(row[0]), abs=0.06)
        assert v["n"] == 3 and v["ttft_p50_s"] <= v["ttft_p95_s"]
    c = outcome.checks
    assert c["5.9.2-PARAM-2"].status.value == "unmet"  # output capped at 4 tokens
    assert c["5.9.2-PARAM-4"].status.value == "unmet"  # 3 < 20 requests per length
    assert c["5.9.2-PARAM-3"].status.value == "met"
    assert c["5.9.4-REPORT-4"].status.value == "unmet"  # no sweep asked for: no maximum throughput
    assert "no sweep" in c["5.9.4-REPORT-4"].reason
    # the capped run is reported as a custom workload derived from long-context (§4.3-MUST-1)
    assert outcome.facts.workload["name"] == "long-context (custom: output capped at 4 tokens)"
    assert outcome.facts.workload_base == "long-context" and outcome.facts.workload["custom"] is True


SWEEP_CONFIG = SimConfig(time_scale=1.0, step_ms=10.0, decode_per_seq_ms=0.1, max_num_seqs=4,
                         prefill_per_token_ms=0.005, prefill_per_token2_ms=0.0, eos_mean_tokens=0.0, seed=2)


def _sweep_run(tmp_path: Path, deadline_s: float | None) -> Any:
    proc = get_procedure("5.9")
    params = proc.make_params("smoke", {
        "lengths": (512, 1024), "requests_per_length": 3, "max_output_tokens": 8, "warmup_requests": 8,
        "warmup_tokens": 64, "throughput_concurrencies": (2, 4, 8, 16, 32), "throughput_waves": 2})
    with simulator_harness(SWEEP_CONFIG, tmp_path, **CTX) as (_, ctx):
        if deadline_s is not None:
            ctx.settings.max_duration = 1.0  # what the notes name; the deadline is what the run obeys
            ctx.deadline = time.monotonic() + deadline_s
        return asyncio.run(proc.run(ctx, params))


def test_max_throughput_per_length_from_a_concurrency_sweep(tmp_path: Path) -> None:
    """§5.9.4 "throughput at length": a sweep per length to a plateau; the engine batches at most 4
    sequences, so the throughput cannot rise past concurrency 4 and the sweep must end at a plateau."""
    result = _sweep_run(tmp_path, None)
    per = result.measurements["per_length"]
    sweep_runs = [r for r in result.runs if r.extra.get("throughput_sweep")]
    assert sweep_runs and {r.extra["context_length"] for r in sweep_runs} == {512, 1024}
    for L in (512, 1024):
        v = per[str(L)]
        levels = v["throughput_sweep"]
        assert [lv["concurrency"] for lv in levels][:2] == [1, 2]  # the latency run, then the sweep ascending
        for lv in levels[1:]:  # exact recomputation from the records on disk
            run = next(r for r in sweep_runs if r.extra["context_length"] == L
                       and r.extra["concurrency"] == lv["concurrency"])
            recs = [r for r in iter_records(run.run_dir) if r.phase == "measure"]
            assert lv["requests"] == 2 * lv["concurrency"] == len(recs)
            # over the steady window (§5.2.3.2): the send window (the load's start to its last send) less its
            # first 10 %, no drain tail; the simulator streams one token per chunk, so a chunk's tokens are the
            # output tokens it delivers
            load = load_run(run.run_dir).metadata.loads[0]
            t0 = int(load["start_ns"])
            t1 = min(int(load["send_end_ns"]), max(r.sent_ns for r in recs))
            lo = t0 + 0.1 * (t1 - t0)
            tokens = sum(k for r in recs for t, k in zip(r.chunk_ns, r.chunk_tokens) if lo <= t <= t1)
            assert t1 > lo and lv["output_tps"] == pytest.approx(tokens / ((t1 - lo) / 1e9), rel=1e-3)
            drained = sum(k for r in recs for t, k in zip(r.chunk_ns, r.chunk_tokens) if t > t1)
            assert drained > 0  # the drain after the last submission delivered tokens the figure leaves out
            # never above the engine's decode-only bound at this batch (a busy host only lowers it)
            assert lv["output_tps"] <= SWEEP_CONFIG.predicted_output_throughput(
                min(lv["concurrency"], SWEEP_CONFIG.max_num_seqs)) * 1.05
        assert v["max_throughput_is_maximum"] is True, v["throughput_sweep_stopped"]
        assert v["throughput_sweep_stopped"].startswith("plateau")
        assert v["max_output_tps"] == max(lv["output_tps"] for lv in levels)
        assert result.measurements[f"max_output_tps_{L}"] == pytest.approx(v["max_output_tps"], abs=0.01)
    table = next(t for t in result.tables if t.title.startswith("Maximum throughput per context length"))
    assert [row[0] for row in table.rows] == ["512", "1024"] and all(row[-1].startswith("maximum") for row in table.rows)
    assert result.checks["5.9.4-REPORT-4"].status.value == "met"


def test_sweep_respects_the_time_budget(tmp_path: Path) -> None:
    """A budget already spent: the latency runs still run (1 s each), the sweeps do not, and say so."""
    result = _sweep_run(tmp_path, -1.0)
    assert not any(r.extra.get("throughput_sweep") for r in result.runs)
    for L in ("512", "1024"):
        v = result.measurements["per_length"][L]
        assert v["max_throughput_is_maximum"] is False and v["throughput_sweep_stopped"].startswith("time budget")
    assert result.checks["5.9.4-REPORT-4"].status.value == "unmet"
    assert any("throughput sweep stopped before concurrency 2" in n for n in result.notes)


@settings(deadline=None)
@given(lengths=st.lists(st.integers(128, 200_000), min_size=1, max_size=10),
       window=st.one_of(st.none(), st.integers(1024, 140_000)), out=st.integers(1, 512))
def test_effective_lengths_fit_the_window(lengths, window, out):
    eff, notes = effective_lengths(tuple(lengths), window, out)
    assert eff == sorted(set(eff))
    if window is not None:
        assert all(L + out <= window for L in eff)
        assert len(notes) == sum(1 for L in set(lengths) if L + out > window)
    else:
        assert eff == sorted(set(lengths)) and not notes


# ---- the draft's lengths and the standard Long Context workload (issue 36 item 5) ------------------
def test_default_lengths_follow_the_sequence_up_to_the_window() -> None:
    """§5.9.2's sequence up to the context window, the window's top when a longer length was cut."""
    assert default_lengths(32768, 256)[0] == [1024, 2048, 4096, 8192, 16384, 32512]
    assert default_lengths(131072 + 256, 256)[0] == [1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
    assert default_lengths(4096, 256)[0] == [1024, 2048, 3840]
    lengths, notes = default_lengths(None, 256)  # unknown window: up to 4.3.2.5's 32K, said so
    assert lengths == [1024, 2048, 4096, 8192, 16384, 32768] and "context window unknown" in notes[0]


@pytest.mark.parametrize(("lengths", "window", "out", "capped", "why"), [
    ([1024, 2048, 8192], 32768, 256, False, []),
    ([1024, 2048, 3840], 4096, 256, False, ["context window 4096 < 8192"]),
    ([1024, 2048, 8100], 8356, 256, False, ["context window 8356 leaves 8100 input tokens beside 256 output, < 8192"]),
    ([1024, 4096], None, 256, False, ["no App. A.5 length (>= 8192) among the lengths 1024, 4096"]),
    ([1024, 8192], 32768, 16, True, ["output capped at 16 tokens"]),
    ([1024, 8192], 32768, 128, False, ["output fixed at 128 tokens, not 256"]),
])
def test_standing_of_the_long_context_workload(lengths, window, out, capped, why) -> None:
    assert long_context_standing(lengths, window, out, capped=capped) == why


def _level(c: int, tps: float | None, failed: int = 0, n: int = 200) -> SweepLevel:
    return SweepLevel(c, tps, None, None, n, failed)


def test_a_level_ends_the_sweep_only_above_max_error_rate() -> None:
    """One failed request in 200 (0.5 %) no longer ends the sweep; 3 in 200 (1.5 %) do, and such a level
    is never the maximum."""
    best = _level(2, 100.0)
    assert level_ends_sweep(_level(4, 180.0, failed=1), best, 0.1, 0.01) is None
    why = level_ends_sweep(_level(4, 180.0, failed=3), best, 0.1, 0.01)
    assert why is not None and why.startswith("3 of 200 requests failed at concurrency 4 (1.5% > max_error_rate 1.0%)")
    assert level_ends_sweep(_level(4, 105.0), best, 0.1, 0.01).startswith("plateau")
    sweep = LengthThroughput(1024, [best, _level(4, 180.0, failed=1), _level(8, 400.0, failed=3)], 0.01)
    assert sweep.best is not None and sweep.best.concurrency == 4
    with pytest.raises(Exception, match="max_error_rate"):
        get_procedure("5.9").make_params("standard", {"max_error_rate": 1.5})
    with pytest.raises(Exception, match="throughput_waves must be >= 2"):
        get_procedure("5.9").make_params("standard", {"throughput_waves": 1})


def _window_run(tmp_path: Path, window: int) -> Any:
    proc = get_procedure("5.9")
    cfg = SimConfig(time_scale=0.05, context_window=window, seed=4)
    params = proc.make_params("standard", {"lengths": None, "requests_per_length": 2, "warmup_requests": 4,
                                           "warmup_tokens": 40, "throughput_concurrencies": ()})
    with simulator_harness(cfg, tmp_path, **CTX) as (_, ctx):
        return asyncio.run(proc.run(ctx, params))


@pytest.mark.parametrize(("window", "lengths", "standard"), [(4096, [1024, 2048, 3840], False),
                                                             (9000, [1024, 2048, 4096, 8192, 8744], True)])
def test_the_run_is_the_standard_long_context_workload_only_with_an_a5_length(tmp_path, window, lengths, standard):
    """The default sequence up to the discovered window; a run without an A.5 length (>= 8192) is custom
    with the reason, and 5.9.2-MUST-1, 4.3.2-MUST-2 and 4.3.2-PARAM-6 agree."""
    result = _window_run(tmp_path, window)
    assert result.measurements["lengths"] == lengths
    statuses = {rid: result.checks[rid].status.value for rid in ("5.9.2-MUST-1", "4.3.2-MUST-2", "4.3.2-PARAM-6")}
    assert set(statuses.values()) == {"met" if standard else "unmet"}, statuses
    facts = result.facts
    if standard:
        assert facts.workload["name"] == "long-context" and facts.workload["custom"] is False
        assert "8192, 8744" in result.checks["5.9.2-MUST-1"].reason
        assert not {"5.9.2-MUST-1", "4.3.2-MUST-2"} & {c.id for c in result.compliance.unmet_must}
    else:
        assert facts.workload["name"] == "long-context (custom: context window 4096 < 8192)"
        assert facts.workload["custom"] is True and facts.workload_base == "long-context"
        assert "context window 4096 < 8192" in result.checks["5.9.2-MUST-1"].reason
        assert "5.9.2-MUST-1" in [c.id for c in result.compliance.unmet_must]
