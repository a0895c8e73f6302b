"""The procedure skeleton (procedures/pipeline.py), its registry and shared helpers (helpers.py)."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import pytest_llmbench.procedures as procedures
from pytest_llmbench.common.records import RequestSpec
from pytest_llmbench.compliance import Status
from pytest_llmbench.procedures import base, result
from pytest_llmbench.procedures.base import get_procedure, procedure_ids
from pytest_llmbench.procedures.helpers import cap_output
from pytest_llmbench.procedures.p5_2_throughput import report_checks
from pytest_llmbench.procedures.pipeline import ProcedureRun
from pytest_llmbench.procedures.result import Table

PKG = Path(procedures.__file__).parent


def _relative_imports(path: Path) -> set[str]:
    """Modules of the procedures package that ``path`` imports (``from .x import`` / ``from . import x``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(a.name for a in node.names)
    return out


def test_every_procedure_registers_through_its_pipeline_subclass() -> None:
    assert procedure_ids() == [f"5.{k}" for k in range(1, 11)]
    for pid in procedure_ids():
        proc = get_procedure(pid)
        owner = proc.run.__self__  # the classmethod ProcedureRun.entry bound to the subclass
        assert issubclass(owner, ProcedureRun) and owner.id == pid and owner.params_type is proc.params_type
        assert set(proc.plan(proc.make_params("smoke", {}))) == {"requests", "min_duration_s"}


def test_no_import_cycle_and_no_procedure_imports_another() -> None:
    graph = {p.stem: _relative_imports(p) for p in PKG.glob("*.py") if p.stem != "__init__"}
    for name, deps in graph.items():
        if name.startswith("p5_"):
            assert not {d for d in deps if d.startswith("p5_")}, f"{name} imports another procedure: {deps}"
    shared = {name: deps for name, deps in graph.items() if not name.startswith("p5_")}
    assert {"base", "pipeline", "run", "facts"} <= set(shared)  # the shared rooms are there to be checked
    assert not any(d.startswith("p5_") for deps in shared.values() for d in deps)

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, f"import cycle: {' -> '.join(path + (node,))}"
        for dep in graph.get(node, ()):
            visit(dep, path + (node,))

    for name in graph:
        visit(name, ())


def test_a_subclass_with_an_id_registers_itself_and_one_without_does_not() -> None:
    class Abstract(ProcedureRun[Any]):
        pass

    class Dummy(Abstract):
        id, title, params_type, profiles = "9.9", "Dummy", dict, {"smoke": {}}

    try:
        assert get_procedure("9.9").run.__self__ is Dummy
        assert "Abstract" not in {p.title for p in base._REGISTRY.values()}
    finally:
        base._REGISTRY.pop("9.9", None)


def test_report_items_refer_to_the_table_object_not_its_title() -> None:
    """5.2.5-REPORT-1: a table with Table 3's title that is not the one 5.2 built does not count."""
    meas = {"slo_applied": False, "max_output_throughput_tok_s": 1.0, "max_request_throughput_req_s": 1.0,
            "max_input_throughput_tok_s": 1.0, "tokens_per_gpu_second": None, "batch_utilization": None,
            **{f"{n}_p{q}_ms": 1.0 for n in ("ttft", "tpot", "e2e") for q in (50, 95, 99)}}
    ctx = SimpleNamespace(sut=SimpleNamespace(embedded=True))
    t3 = Table("Table 3: Throughput Summary", ["Metric", "Value"], [["x", "1"]])
    t4 = Table("Table 4: Latency at Maximum Throughput", ["Metric", "P50"], [["TTFT", "1 ms"]])
    look_alike = Table(t3.title, t3.columns, [r[:] for r in t3.rows])
    best: Any = object()
    ok = report_checks(ctx, best, None, meas, {"5.2.5-REPORT-1": t3, "5.2.5-REPORT-2": t4}, [t3, t4])  # type: ignore[arg-type]
    assert ok["5.2.5-REPORT-1"].status is Status.MET and ok["5.2.5-REPORT-2"].status is Status.MET
    bad = report_checks(ctx, best, None, meas, {"5.2.5-REPORT-1": t3, "5.2.5-REPORT-2": None},  # type: ignore[arg-type]
                         [look_alike])
    assert bad["5.2.5-REPORT-1"].status is Status.UNMET and bad["5.2.5-REPORT-2"].status is Status.UNMET


def test_report_items_are_read_back_from_the_written_tables() -> None:
    """5.3/5.4 REPORT items: met only when the table is in the result and the column/row has a value in every row."""
    from pytest_llmbench.procedures.helpers import reported, reported_line
    from pytest_llmbench.procedures.p5_3_tradeoff import report_checks as report_5_3
    from pytest_llmbench.procedures.p5_4_itl import report_checks as report_5_4

    t5 = Table("Table 5: Throughput-Latency Table", ["Offered (r/s)", "Achieved (tok/s)", "TTFT P50", "TTFT P99",
                                                     "TPOT P50", "TPOT P99", "Success"],
               [["1.00", "50", "10 ms", "20 ms", "5 ms", "9 ms", "100.0%"]],
               notes=["Knee point: not reached", "Saturation point: 1.00 req/s", "Optimal operating point: none"])
    detail = Table("Per-level detail (§5.3.4)", ["Load", "TTFT P95", "TPOT P95", "E2E P50", "E2E P95", "E2E P99",
                                                 "Queue"], [["10%", "15 ms", "7 ms", "1 s", "2 s", "3 s", "stable"]])
    ok = report_5_3(t5, detail, [t5, detail])
    assert {c.status for c in ok.values()} == {Status.MET}, {k: c.reason for k, c in ok.items()}
    assert ok["5.3.4-REPORT-9"].reason == "Knee point: not reached"
    assert ok["5.3.4-REPORT-5"].reason == "E2E P50/P95/P99 per level: E2E P50, E2E P95, E2E P99 in Per-level detail (§5.3.4)"
    dropped = report_5_3(t5, detail, [t5])  # the detail table never reached the result
    assert dropped["5.3.4-REPORT-7"].status is Status.UNMET and "not in the result" in dropped["5.3.4-REPORT-7"].reason
    blank = Table(detail.title, detail.columns, [["10%", "15 ms", "7 ms", "1 s", "2 s", "", "stable"]])
    assert report_5_3(t5, blank, [t5, blank])["5.3.4-REPORT-5"].status is Status.UNMET
    no_knee = Table(t5.title, t5.columns, t5.rows, notes=["Saturation point: 1.00 req/s"])
    assert reported_line("5.3.4-REPORT-9", no_knee, "Knee point:", [no_knee]).status is Status.UNMET

    t6 = Table("Table 6: ITL Results (50%)", ["Metric", "Value"],
               [["ITL Samples", "900"], *([f"ITL P{q}", "5 ms"] for q in ("50", "90", "95", "99", "99.9")),
                ["ITL Mean", "5 ms"], ["ITL Std Dev", "1 ms"], ["P99/P50 Ratio", "1.8"]])
    shape = Table("Per-request ITL statistics", ["Load", "Jitter P50", "Jitter P95", "Jitter P99", "Max Pause P50",
                                                 "Max Pause P95", "Max Pause P99", "Modality", "Tail", "P99/P50"],
                  [["50%", "1 ms", "2 ms", "3 ms", "9 ms", "12 ms", "15 ms", "unimodal", "light", "1.80"]])
    ok4 = report_5_4([t6], shape, [t6, shape])
    assert {c.status for c in ok4.values()} == {Status.MET}, {k: c.reason for k, c in ok4.items()}
    no_std = Table(t6.title, t6.columns, [r for r in t6.rows if r[0] != "ITL Std Dev"])
    assert report_5_4([no_std], shape, [no_std, shape])["5.4.4-REPORT-3"].status is Status.UNMET
    assert reported("5.4.4-REPORT-1", "x", [(t6, "ITL Mean")], [Table(t6.title, t6.columns, t6.rows)]).status is Status.UNMET

    from pytest_llmbench.procedures.p5_7_prefix_cache import report_checks as report_5_7
    t10 = Table("Table 10: Cache Effectiveness", ["Configuration", "TTFT P50", "TTFT P95", "TTFT P99"],
                [["Cache Disabled", "90 ms", "99 ms", "120 ms"], ["Cache (Cold)", "40 ms", "60 ms", "70 ms"]])
    fx = Table("Prefix cache effect (§5.7.4)", ["Configuration", "TTFT Reduction P50", "TTFT Reduction P95",
                                                "TTFT Reduction P99", "Output Throughput", "Throughput Change"],
               [["Cache (Cold)", "55%", "39%", "42%", "80.0 tok/s", "+3%"]])
    ok7 = report_5_7(["disabled", "cold"], t10, fx, [t10, fx])
    assert {c.status for c in ok7.values()} == {Status.MET}, {k: c.reason for k, c in ok7.items()}
    no_cold = Table(t10.title, t10.columns, t10.rows[:1])
    lost = report_5_7(["disabled", "cold"], no_cold, fx, [no_cold])
    assert lost["5.7.4-REPORT-2"].status is Status.UNMET and lost["5.7.4-REPORT-3"].status is Status.UNMET


def test_one_cap_output_caps_max_and_min_tokens() -> None:
    specs = [RequestSpec(index=0, workload="w", input_tokens=4, max_tokens=100, prompt_text="a b", min_tokens=100),
             RequestSpec(index=1, workload="w", input_tokens=4, max_tokens=10, prompt_text="c d")]
    capped = cap_output(specs, 32)
    assert [(s.max_tokens, s.min_tokens) for s in capped] == [(32, 32), (10, None)]
    assert cap_output(specs, None) == specs


def test_each_procedure_draws_warmup_and_measured_prompts_from_different_streams() -> None:
    ctx = SimpleNamespace(settings=SimpleNamespace(seed=42))
    seeds = {pid: base.ProcedureContext.seeds(ctx, pid) for pid in procedure_ids()}  # type: ignore[arg-type]
    values = [s.derive(purpose, 0) for s in seeds.values() for purpose in ("warmup", "measure", "level", "arrivals")]
    assert len(set(values)) == len(values)


def _result(measurements: dict[str, Any], notes: list[str]) -> result.ProcedureResult:
    return result.ProcedureResult(procedure="5.6", title="t", params={}, profile="smoke", metrics=None,
                                measurements=measurements, notes=notes)


def test_measured_returns_the_value() -> None:
    assert _result({"short_ttft_p99_ms": 812.5}, []).measured("short_ttft_p99_ms") == 812.5
    assert _result({"levels": []}, []).measured("levels") == []  # empty is a value, only None is missing


def test_measured_none_fails_with_the_procedures_notes() -> None:
    r = _result({"short_ttft_p99_ms": None}, ["short class: 0 completed requests (budget 60 s)"])
    with pytest.raises(result.MeasurementMissing, match=r"5\.6 measured no 'short_ttft_p99_ms'.*short class: 0 completed"):
        r.measured("short_ttft_p99_ms")
    assert issubclass(result.MeasurementMissing, AssertionError)  # a test failure, not an error


def test_measured_unknown_key_lists_the_known_ones() -> None:
    with pytest.raises(result.MeasurementMissing, match=r"no measurement 'jain'.*known: jain_index, level_count"):
        _result({"jain_index": 0.9, "level_count": 3}, []).measured("jain")


def test_a_suite_style_slo_on_a_missing_figure_fails_rather_than_crashes(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        from pytest_llmbench.procedures.result import ProcedureResult

        def test_slo():
            r = ProcedureResult(procedure="5.6", title="t", params={}, profile="smoke", metrics=None,
                                measurements={"short_ttft_p99_ms": None}, notes=["no short-class sample"])
            assert r.measured("short_ttft_p99_ms") <= 2000
    """)
    res = pytester.runpytest_inprocess("-p", "no:llmbench")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*MeasurementMissing: procedure 5.6 measured no 'short_ttft_p99_ms'*no short-class sample*"])
    res.stdout.no_fnmatch_line("*TypeError: '<=' not supported*")


def test_5_1_waits_for_every_request_up_to_llm_timeout(tmp_path: Path) -> None:
    """§5.1.3 step 5: 5.1's measured run drains for --llm-timeout, not the 60 s default of other runs.

    Against llama-server at 0.3 req/s (2 cores) the queue held about 100 requests: a 60 s drain after
    the last send would have cancelled most of them, and 5.1.2-MUST-3 counts successful requests.
    """
    import asyncio

    from pytest_llmbench.procedures.p5_1_ttft import TTFT
    from pytest_llmbench.settings import Settings

    seen: dict[str, Any] = {}

    async def fake_measure(client: Any, label: str, specs: Any, load: Any, **kw: Any) -> Any:
        seen.update(kw, label=label)
        return SimpleNamespace()

    ctx = SimpleNamespace(settings=Settings(report=tmp_path, timeout=900.0), seeds=lambda proc: None)
    proc = TTFT.__new__(TTFT)
    proc.ctx, proc.cold_specs, proc.specs, proc.load, proc.load_desc = ctx, [], [], None, {}
    proc.measure = fake_measure  # type: ignore[method-assign]
    asyncio.run(proc.run_loads(client=None))  # type: ignore[arg-type]
    assert seen["label"] == "measure" and seen["drain_timeout_s"] == 900.0
