"""Warm-up never contaminates the measured sample (§4.5.1-MUST-4): warm-up prompts come from the
same distribution but their own seed stream, records say which prompts were warm-up, and every
procedure reports the measured prefix-cache hit fraction."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from factories import StartHarness, make_record

from pytest_llmbench import closed
from pytest_llmbench.common.storage import iter_records
from pytest_llmbench.procedures.base import get_procedure
from pytest_llmbench.procedures.helpers import CacheHits
from pytest_llmbench.simulator import SimConfig


def test_5_1_warmup_prompts_are_disjoint_from_measured_ones(tmp_path: Path, harness: StartHarness) -> None:
    proc = get_procedure("5.1")
    params = proc.make_params("smoke", {"requests": 40, "load": closed(4), "max_output_tokens": 4,
                                        "warmup_requests": 20, "warmup_tokens": 40})
    with harness(SimConfig(time_scale=0.2, seed=3, prefix_cache=True), profile="smoke", seed=5) as (sim, ctx):
        assert sim.get_config()["prefix_cache"] is True
        result = asyncio.run(proc.run(ctx, params))
    records = [r for d in sorted((tmp_path / "runs").rglob("records.jsonl")) for r in iter_records(d.parent)]
    warm = {r.prompt_hash for r in records if r.phase == "warmup"}
    measured = [r.prompt_hash for r in records if r.phase == "measure"]
    assert len(warm) >= 10 and len(measured) == 40 and None not in warm | set(measured)
    assert warm.isdisjoint(measured)
    assert len(set(measured)) == len(measured)  # no measured prompt repeats
    m = result.measurements
    assert m["measured_prompts_seen_in_warmup"] == 0 and m["measured_prompt_repeats"] == 0
    # the simulator reports cached_tokens: nothing of a measured prompt was cached by the warm-up
    assert m["measured_cache_hit_fraction"] == 0.0
    assert m["measured_requests_over_half_cached"] == "0 of 40"


def cache_hit_summary(records: list[Any]) -> dict[str, Any]:
    """The measured prefix-cache hit figures of ``records`` (helpers.CacheHits, one record at a time)."""
    hits = CacheHits()
    for r in records:
        hits.add(r)
    return hits.summary()


def test_cache_hit_summary_counts_contaminated_requests() -> None:
    recs = [make_record(input_tokens_server=100, cached_tokens=cached) for cached in (90, 0, 50, None)]
    s = cache_hit_summary(recs)
    assert s["requests_reporting"] == 3
    assert s["fraction"] == round(140 / 300, 4)
    assert s["requests_over_half_cached"] == 1 and s["share_over_half_cached"] == round(1 / 3, 4)
    assert cache_hit_summary([make_record(input_tokens_server=100)])["fraction"] is None


def test_time_budget_cuts_a_long_run_and_says_so(harness: StartHarness) -> None:
    """--llm-max-duration: a 5.1 run planned beyond the budget stops by it, notes the cut,
    and its request count below the draft minimum stays an unmet item."""
    import time

    proc = get_procedure("5.1")
    params = proc.make_params("smoke", {"requests": 3000, "load": closed(2), "max_output_tokens": 4,
                                        "warmup_requests": 10, "warmup_tokens": 20})
    with harness(SimConfig(time_scale=0.2, seed=3), profile="smoke", seed=5, max_duration=8.0) as (_, ctx):
        ctx.deadline = time.monotonic() + 8.0
        result = asyncio.run(proc.run(ctx, params))
    assert 0 < result.measurements["requests"] < 3000
    assert any("Time budget" in n and "cut to" in n for n in result.notes), result.notes
    unmet = {u["id"] for u in result.compliance["unmet"]} if isinstance(result.compliance, dict) else None
    if unmet is not None:
        assert "5.1.2-MUST-4" in unmet or "5.1.2-MUST-3" in unmet
