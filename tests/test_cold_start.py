"""§4.5.3 cold start on the simulator: 5.1 with ``cold_start=True`` restarts the SUT through the
``restart`` setting, measures the first requests before any warm-up against as many warm ones,
labels it in results.json and both reports, and the 4.5.3 items read it.

The simulator's first engine iteration after a (re)start costs ``cold_start_ms`` more; the cold
request's TTFT is bounded below by that cost (a busy host only lengthens it).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from factories import StartHarness, simulator_harness

from pytest_llmbench.common.storage import iter_records
from pytest_llmbench.document.build import build_document
from pytest_llmbench.procedures.base import SkipProcedure, get_procedure
from pytest_llmbench.procedures.loads import closed
from pytest_llmbench.procedures.result import ProcedureResult
from pytest_llmbench.report import schema
from pytest_llmbench.report import write_reports as doc_write_reports
from pytest_llmbench.session import SessionResult
from pytest_llmbench.simulator import SimConfig

PROC = get_procedure("5.1")
CONFIG = SimConfig(time_scale=1.0, cold_start_ms=250.0, step_ms=5.0, prefill_per_token_ms=0.005,
                   prefill_per_token2_ms=0.0, seed=8)
PARAMS = {"requests": 20, "load": closed(2), "warmup_requests": 10, "warmup_tokens": 80, "warmup_probes": 0,
          "max_output_tokens": 8}


def _run(tmp_path: Path, **extra: Any) -> tuple[ProcedureResult, Any, tuple[int, int]]:
    params = PROC.make_params("smoke", {**PARAMS, **extra})
    with simulator_harness(CONFIG, tmp_path, seed=3, timeout=60.0) as (sim, ctx):
        pid_before = sim.proc.pid
        result = asyncio.run(PROC.run(ctx, params))
        return result, ctx, (pid_before, sim.proc.pid)


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory) -> tuple[ProcedureResult, Any, tuple[int, int]]:
    return _run(tmp_path_factory.mktemp("cold"), cold_start=True, cold_start_requests=3)


def _records(ctx: Any, label: str) -> list[Any]:
    return sorted(iter_records(ctx.run_root / label), key=lambda r: r.sent_ns)


def test_cold_requests_come_first_after_a_restart(cold: tuple[ProcedureResult, Any, tuple[int, int]]) -> None:
    result, ctx, (pid_before, pid_after) = cold
    assert pid_after != pid_before  # a new simulator process: the restart setting was used
    cs = result.cold_start
    assert cs is not None and cs["requests"] == 3 and cs["server_requests_before"] == 0
    cold_recs = _records(ctx, "cold-start")
    warmup = list(iter_records(ctx.run_root / "warmup"))
    warm_ref = _records(ctx, "warm-reference")
    measured = list(iter_records(ctx.run_root / "measure"))
    # cold requests one at a time, all before the first warm-up request; the reference after the warm-up
    assert all(a.end_ns <= b.sent_ns for a, b in zip(cold_recs, cold_recs[1:]))
    assert max(r.end_ns for r in cold_recs) <= min(r.sent_ns for r in warmup)
    assert max(r.end_ns for r in warmup) <= min(r.sent_ns for r in warm_ref)
    assert max(r.end_ns for r in warm_ref) <= min(r.sent_ns for r in measured)
    # exact recomputation from the records on disk
    ttft = [(r.first_token_ns - r.sent_ns) / 1e9 for r in cold_recs]
    warm = [(r.first_token_ns - r.sent_ns) / 1e9 for r in warm_ref]
    assert cs["cold_ttft_s"] == pytest.approx(ttft, abs=1e-9) and cs["first_ttft_s"] == pytest.approx(ttft[0])
    assert cs["warm_ttft_p50_s"] == pytest.approx(float(np.median(warm)))
    assert cs["first_over_warm_p50"] == pytest.approx(ttft[0] / float(np.median(warm)))
    # the first request after the restart pays the simulator's cold-start cost (a busy host only adds to it)
    assert cs["first_ttft_s"] >= CONFIG.predicted_cold_start_s()
    assert result.measurements["cold_start_first_ttft_ms"] == pytest.approx(ttft[0] * 1000, abs=1e-3)


def test_cold_start_is_labelled_and_judged(cold: tuple[ProcedureResult, Any, tuple[int, int]]) -> None:
    result, _, _ = cold
    table = next(t for t in result.tables if t.title == "Cold start (§4.5.3)")
    assert table.notes[0].startswith("COLD START measurement") and result.notes[0] == table.notes[0]
    assert [row[0] for row in table.rows][:1] == ["cold #1 (first after restart)"]
    checks = {c.id: c for c in result.compliance.checks}
    assert checks["4.5.3-MUST-1"].status.value == "met" and "0 requests finished" in checks["4.5.3-MUST-1"].reason
    assert checks["4.5.3-MUST-2"].status.value == "met"
    assert result.facts.cold_start is not None and result.facts.cold_start.restarted
    # the warm measured run keeps its warm-up items (4.5.1 is judged, not waived)
    assert checks["4.5.1-MUST-2"].status.value != "not-applicable"


def test_results_json_and_reports_carry_the_cold_start(cold: tuple[ProcedureResult, Any, tuple[int, int]],
                                                        tmp_path: Path) -> None:
    result, ctx, _ = cold
    settings = ctx.settings
    settings.report = tmp_path / "report"
    s = SessionResult(settings=settings, sut=ctx.sut, command_line=["suites"], started=1_769_000_000.0)
    s.results["5.1:{}"] = result
    paths = doc_write_reports(build_document(s))
    doc = json.loads(paths["json"].read_text(encoding="utf-8"))
    jsonschema.validate(doc, schema(), cls=jsonschema.Draft202012Validator)
    proc = doc["procedures"][0]
    assert proc["cold_start"]["first_ttft_s"] == pytest.approx(result.cold_start["first_ttft_s"])
    for key in ("markdown", "html"):
        text = paths[key].read_text(encoding="utf-8")
        assert "COLD START measurement (§4.5.3)" in text and "Cold start (§4.5.3)" in text


def test_without_cold_start_nothing_restarts(tmp_path: Path) -> None:
    result, ctx, (pid_before, pid_after) = _run(tmp_path)
    assert pid_after == pid_before and result.cold_start is None
    assert not (ctx.run_root / "cold-start").exists()
    checks = {c.id: c for c in result.compliance.checks}
    assert checks["4.5.3-MUST-1"].status.value == checks["4.5.3-MUST-2"].status.value == "not-applicable"


def test_skipped_when_no_hook_can_restart(harness: StartHarness) -> None:
    params = PROC.make_params("smoke", {**PARAMS, "cold_start": True})
    with harness(CONFIG, seed=3) as (_, ctx):
        ctx.configure_sut = lambda setting, value: False
        with pytest.raises(SkipProcedure, match="'restart' setting of pytest_llmbench_configure_sut"):
            asyncio.run(PROC.run(ctx, params))
