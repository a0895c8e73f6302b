"""Procedures declare what they show (issue 28): no procedure id and no procedure's own measurement
key outside ``procedures/`` (and ``compliance/``, the draft's item-to-test map; the suites), and what
they declare reaches the document, the headline, the plots and the gate.

The scan parses every module with ``ast`` and looks at string constants only, so prose in docstrings
and comments that cites "5.3" is not a hit; a constant equal to "5.3" is.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import pytest_llmbench
from pytest_llmbench.document.exports import LEVEL_COLUMNS
from pytest_llmbench.document.headline import key_figures, procedure_warnings, sweep
from pytest_llmbench.document.plotdata import configuration_differences, run_overlays
from pytest_llmbench.document.schema import schema
from pytest_llmbench.gate.storage import primary_label
from pytest_llmbench.procedures import base, p5_7_prefix_cache
from pytest_llmbench.procedures.base import capacity_provider, get_procedure, procedure_ids
from pytest_llmbench.procedures.pipeline import PIPELINE_KEYS
from pytest_llmbench.procedures.result import Finding, KeyFigure, Sweep

PACKAGE = Path(pytest_llmbench.__file__).parent
#: where procedure knowledge lives: the procedures, and compliance (the draft's item -> test map)
OWNERS = ("procedures", "compliance", "suites")
#: layers below procedures: they never see a procedure's result, so a word they use is their own
LOWER = ("common", "measure", "loadgen", "client", "sut", "workloads", "simulator", "settings.py")
#: a procedure id of §5, any of them ("5.1", "5.10", "5.11" ...): a string constant that is one, whole
PROCEDURE_ID = re.compile(r"5\.[1-9][0-9]*")
#: words a procedure uses as a measurement key that also name something of the document's own
#: layout (not in schema.json's property names), each read for that, not for the measurement
DOCUMENT_WORDS = {
    "errors": "render.py's view-model key for a run's errors_by_type",
    "isolation": "repetitions[].isolation: how --llm-runs repetitions were kept apart (§6.3)",
    "load_model": "App. C.1's 'Load Model' line of the Minimum Viable Report",
}


def _modules(*, owners: bool) -> list[Path]:
    out = []
    for f in sorted(PACKAGE.rglob("*.py")):
        rel = f.relative_to(PACKAGE)
        if (rel.parts[0] in OWNERS) == owners:
            out.append(f)
    return out


def _constants(path: Path) -> list[tuple[int, str]]:
    return [(n.lineno, n.value) for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def _schema_names() -> set[str]:
    names: set[str] = set()

    def walk(x: Any) -> None:
        if isinstance(x, dict):
            names.update(x.get("properties") or {})
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(schema())
    return names


def _lower_words() -> set[str]:
    words: set[str] = set()
    for f in _modules(owners=False):
        if f.relative_to(PACKAGE).parts[0] in LOWER:
            words.update(v for _, v in _constants(f))
    return words


def _id_hits(files: list[Path], root: Path) -> list[str]:
    """Every string constant of ``files`` that is a procedure id, as ``path:line: '5.3'``."""
    return [f"{f.relative_to(root)}:{line}: {v!r}" for f in files for line, v in _constants(f)
            if PROCEDURE_ID.fullmatch(v)]


def test_no_procedure_id_outside_the_procedures() -> None:
    hits = _id_hits(_modules(owners=False), PACKAGE)
    assert not hits, "procedure ids outside procedures/ (declare it on the procedure instead):\n" + "\n".join(hits)


def test_the_guard_catches_an_id_past_5_10_planted_outside_the_procedures(tmp_path: Path) -> None:
    """A new procedure's id leaks outside procedures/: "5.11" is caught like "5.1", prose citing it is not."""
    assert all(PROCEDURE_ID.fullmatch(i) for i in ("5.1", "5.10", "5.11", "5.42"))
    assert not any(PROCEDURE_ID.fullmatch(v) for v in ("5.0", "5.01", "6", "4.5", "5.11.2", "§5.11", "15.1"))
    copy = tmp_path / "document"
    copy.mkdir()
    source = (PACKAGE / "document" / "headline.py").read_text(encoding="utf-8")
    (copy / "headline.py").write_text(source, encoding="utf-8")
    assert _id_hits([copy / "headline.py"], tmp_path) == []  # the module as shipped holds no id
    planted = source + '\n\nNEW_PROCEDURE = "5.11"  # a procedure id outside procedures/\n'
    (copy / "headline.py").write_text(planted, encoding="utf-8")
    (copy / "prose.py").write_text('"""Cites §5.11 and 5.11 in prose only."""\n# "5.11" in a comment\n', encoding="utf-8")
    hits = _id_hits(sorted(copy.glob("*.py")), tmp_path)
    assert hits == [f"document/headline.py:{len(planted.splitlines())}: '5.11'"]


def test_no_procedure_measurement_key_outside_the_procedures() -> None:
    csv_columns = {name for name, _, _ in LEVEL_COLUMNS}  # levels.csv headers: run metrics, in ms
    from pytest_llmbench.measure import registry

    metric_names = {n for m in registry.METRICS.values() for n in (m.name, *m.aliases)}  # declared by function name
    shared = _schema_names() | _lower_words() | set(DOCUMENT_WORDS) | set(PIPELINE_KEYS) | csv_columns | metric_names
    private = {k: pid for pid in procedure_ids() for k in get_procedure(pid).measurement_keys if k not in shared}
    assert len(private) > 50  # the scan has something to find: most keys are the procedure's own
    # families named by a fixed prefix; one named by a parameter (5.6's class names) could be any word
    families = [(re.compile(p), pid) for pid in procedure_ids() for p in get_procedure(pid).measurement_patterns
                if not p.startswith(".")]

    def owner(v: str) -> str | None:
        if v in private:
            return private[v]
        if v in shared:
            return None
        return next((pid for rx, pid in families if rx.fullmatch(v)), None)

    hits = [f"{f.relative_to(PACKAGE)}:{line}: {v!r} (a measurement of {who})"
            for f in _modules(owners=False) for line, v in _constants(f) if (who := owner(v))]
    assert not hits, "measurement keys read outside procedures/ (declare what to show instead):\n" + "\n".join(hits)


def test_the_document_words_are_still_used_and_still_collide() -> None:
    """DOCUMENT_WORDS lists only what it must: each is a declared key and a constant outside procedures/."""
    declared = {k for pid in procedure_ids() for k in get_procedure(pid).measurement_keys}
    used = {v for f in _modules(owners=False) for _, v in _constants(f)}
    assert set(DOCUMENT_WORDS) <= declared & used


def test_every_procedure_declares_its_keys_and_capacity() -> None:
    for pid in procedure_ids():
        proc = get_procedure(pid)
        assert proc.measurement_keys, pid
        assert not proc.undeclared(PIPELINE_KEYS), pid
        for pattern in proc.measurement_patterns:
            re.compile(pattern)
    assert capacity_provider("rate").id == "5.2" and capacity_provider("concurrency").id == "5.5"
    with pytest.raises(base.ProcedureError, match="provides"):
        capacity_provider("tokens")
    p58 = get_procedure("5.8")
    assert p58.undeclared(["l110_completion_pct", "l110_typo", "degradation"]) == ["l110_typo"]


# ---------------------------------------------------------------------- the declarations, aggregated


def _entry(procedure: str, anchor: str, **result: Any) -> dict[str, Any]:
    runs = result.pop("runs", [])
    return {"procedure": procedure, "title": f"title {procedure}", "anchor": anchor, "figures": {},
            "configuration": {"workload": "synthetic", "load": "declared load"}, "complete": True,
            "result": {"runs": runs, "metrics": {"x": 1}, **result}}


def _fig(name: str, group: str, rank: int, value: float | None = 1.0, level: str | None = None) -> dict[str, Any]:
    return KeyFigure(name, name.upper(), value, "s", group, rank, level=level, definition=f"def {name}").to_json()


def test_headline_shows_per_group_the_first_ranked_procedure_in_rank_order() -> None:
    procs = [
        _entry("A", "a", key_figures=[_fig("lat_a", "latency", 6), _fig("thr_a", "throughput", 30)]),
        _entry("B", "b", key_figures=[_fig("thr_b", "throughput", 10, value=None), _fig("cap_b", "capacity", 20)]),
        _entry("C", "c", key_figures=[_fig("lat_c", "latency", 3, level="at 50%")],
               runs=[{"label": "only", "load": {"rate": 2.0}}]),
    ]
    figs = key_figures(procs)
    # latency: C ranks 3 < A's 6; throughput: B (rank 10) wins with no value, so A's is not shown either
    assert [(f["name"], f["procedure"], f["level"]) for f in figs] == [("lat_c", "C", "at 50%"),
                                                                        ("cap_b", "B", "declared load")]
    assert figs[0]["definition"] == "def lat_c" and figs[0]["value"] == 1.0


def test_sweep_warnings_and_primary_run_come_from_the_declaration() -> None:
    runs = [{"label": "lo", "load": {"rate": 1.0, "sent": 10, "ok": 10}, "metrics": {"x": 1}},
            {"label": "hi", "load": {"rate": 4.0, "sent": 10, "ok": 10}, "metrics": {"x": 1}}]
    p = _entry("X", "x", runs=runs, primary_run="hi", sweep=Sweep("found it").to_json(),
               warnings=[Finding("overloaded", "declared").to_json(), Finding("unfair", "skewed").to_json()])
    s = sweep(p)
    assert s is not None and s["result"] == "found it" and s["primary"] == "hi (4 req/s offered)"
    assert s["range"] == "1–4 req/s offered"
    assert procedure_warnings(p) == ["unfair: skewed", "declared"]  # grouped by kind, most severe first
    assert primary_label(p["result"]) == "hi"  # equal metrics in both runs: the declaration decides
    del p["result"]["primary_run"]
    assert primary_label(p["result"]) == "lo"  # a 1.3 document: the first run whose metrics are equal


def _run(label: str, extra: dict[str, Any], ttft: np.ndarray) -> SimpleNamespace:
    return SimpleNamespace(label=label, extra=extra,
                           metrics=SimpleNamespace(distributions={"ttft": SimpleNamespace(samples=np.sort(ttft))}))


def test_overlays_and_differences_follow_the_declared_series() -> None:
    rng = np.random.default_rng(11)
    runs = [_run("cache-disabled", {"prefix_cache": "disabled"}, 0.2 + rng.gamma(3, 0.01, 300)),
            _run("cache-cold", {"prefix_cache": "enabled", "prepopulated": False}, 0.2 + rng.gamma(3, 0.01, 300)),
            _run("cache-warm", {"prefix_cache": "enabled", "prepopulated": True}, 0.05 + rng.gamma(3, 0.01, 300))]
    declared = p5_7_prefix_cache.overlays(runs)
    assert [(s.label, s.run) for s in declared.series] == [("Cache Disabled", "cache-disabled"),
                                                           ("Cache (Cold)", "cache-cold"),
                                                           ("Cache (Warm)", "cache-warm")]
    result = SimpleNamespace(procedure="anything", runs=runs, overlays=declared)
    d = run_overlays(result)["cdfs_ttft"]
    assert d["section"] == "§5.7.4" and [s["label"] for s in d["series"]] == ["Cache Disabled", "Cache (Cold)",
                                                                              "Cache (Warm)"]
    diff = configuration_differences(result)
    assert diff is not None and diff["baseline"] == "Cache Disabled"
    assert {(r["series"], r["statistic"]) for r in diff["rows"]} == {
        (c, f"p{q}") for c in ("Cache (Cold)", "Cache (Warm)") for q in (50, 95, 99)}
    # a series whose run is not reported is left out; no declaration, no overlay
    declared.series[1].run = "not-a-run"
    assert [s["label"] for s in run_overlays(result)["cdfs_ttft"]["series"]] == ["Cache Disabled", "Cache (Warm)"]
    assert run_overlays(SimpleNamespace(procedure="5.7", runs=runs)) == {}


def test_each_procedure_figure_is_declared_by_its_own_procedure_module():
    """An SLO-nameable figure of a procedure's result (5.5's ``max_concurrency``, ...) is declared beside
    the measurement it reads, in that procedure's module: its name and measurement key are string
    constants there, and its declaration (title) is in no module of the layers below (measure/ once
    declared them all)."""
    from pytest_llmbench.measure.registry import procedure_figures

    figures = procedure_figures()
    assert len(figures) >= 10
    lower = {f: {v for _, v in _constants(f)} for f in _modules(owners=False)
             if f.relative_to(PACKAGE).parts[0] in LOWER}
    for m in figures:
        section = m.section.lstrip("§").rsplit(".", 1)[0]  # §5.5.4 -> 5.5
        mod = next(f for f in (PACKAGE / "procedures").glob("p*.py")
                   if f.stem.startswith("p" + section.replace(".", "_") + "_"))
        consts = {v for _, v in _constants(mod)}
        assert {m.name, m.measurement} <= consts, (m.name, mod.name)
        assert not [f for f, words in lower.items() if m.title in words], m.name  # declared nowhere else
