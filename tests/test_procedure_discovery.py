"""Procedures as a plug-in folder (issue 45): found by file name and through an entry point, every list
of them derived from (or checked against) the discovered set, and the shared code in named modules.

The end-to-end test registers a throw-away procedure 5.11 from a distribution in a temporary folder
(its ``.dist-info`` names the module in the entry-point group ``pytest_llmbench.procedures``) with its
own compliance items, and shows it is found, run against the embedded simulator and reported.
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
import textwrap
import tomllib
from pathlib import Path

import jsonschema
import pytest

import pytest_llmbench.procedures as procedures
from pytest_llmbench.common import draft
from pytest_llmbench.common.draft import DraftError
from pytest_llmbench.compliance import ComplianceError, applicable_items, draft_tests
from pytest_llmbench.compliance.registry import BOUNDARY_ALIASES, check_test
from pytest_llmbench.document.schema import schema
from pytest_llmbench.procedures.base import get_procedure, procedure_ids
from pytest_llmbench.settings import BOUNDARIES

ROOT = Path(__file__).resolve().parents[1]
PKG = Path(procedures.__file__).parent
#: the size of a shared module and a function in procedures/ (issue 45)
MAX_SHARED_LINES, MAX_FUNCTION_LINES, MAX_PARAMETERS = 500, 80, 10


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}


def test_procedures_are_found_by_file_name_in_draft_order() -> None:
    files = sorted(p.stem for p in PKG.glob("p5_*.py"))
    assert sorted(procedures.module_names()) == files and len(files) >= 10
    ids = [f"5.{procedures.MODULE_NAME.fullmatch(m)['n']}" for m in procedures.module_names()]  # type: ignore[index]
    assert ids == procedure_ids()  # draft order: 5.2 before 5.10; nothing registered from elsewhere here
    for name, pid in zip(procedures.module_names(), ids):
        assert get_procedure(pid).module == f"{procedures.__name__}.{name}"
    assert not (PKG / "__init__.py").read_text(encoding="utf-8").count("p5_1_ttft")  # no import list


def test_the_import_contracts_list_exactly_the_discovered_procedures() -> None:
    """pyproject.toml is static: its two lists of procedure modules are checked here instead."""
    modules = [f"{procedures.__name__}.{m}" for m in procedures.module_names()]
    contracts = _contracts()
    assert sorted(contracts["procedures-independent"]["modules"]) == sorted(modules)
    top = [m.strip() for m in contracts["procedures-layers"]["layers"][0].split("|")]
    assert sorted(top) == sorted(procedures.module_names())
    shared = {p.stem for p in PKG.glob("*.py")} - set(procedures.module_names()) - {"__init__"}
    placed = {m.strip() for layer in contracts["procedures-layers"]["layers"][1:] for m in layer.split("|")}
    assert placed == shared, "every shared module of procedures/ has its place in the procedures-layers contract"


def test_compliance_tests_schema_and_test_lists_follow_the_procedures() -> None:
    assert list(draft_tests()) == [*procedure_ids(), "6"]  # the items' applies_to, in draft order
    pattern = re.compile(schema()["$defs"]["procedure_result"]["properties"]["procedure"]["pattern"])
    assert all(pattern.fullmatch(pid) for pid in [*procedure_ids(), "6", "5.11", "5.42"])
    assert not any(pattern.fullmatch(x) for x in ("5.0", "5.01", "7", "5.1.1", "x5.1"))


def test_every_discovered_procedure_has_its_rows_in_the_data_files() -> None:
    """What a procedure of this package needs in data/: its items (requirements.yaml) and its profiles
    (profiles.yaml); a missing one is an error naming the file and the key."""
    for pid in procedure_ids():
        assert check_test(pid) == pid
        assert any(req.applies_to == pid for req, _ in applicable_items(pid)), pid
        assert set(draft.profiles(pid)) == {"smoke", "standard", "full"}, pid
    with pytest.raises(ComplianceError, match=r"no item of data/requirements\.yaml has applies_to: '5\.42'"):
        check_test("5.42")
    with pytest.raises(DraftError, match=r"data/profiles\.yaml has no procedure '5\.42'"):
        draft.profiles("5.42")
    with pytest.raises(DraftError, match=r"'long_context\.nope' is not a number of data/draft\.yaml"):
        draft.value("long_context.nope")


def test_boundaries_are_defined_once() -> None:
    assert set(BOUNDARY_ALIASES.values()) == set(BOUNDARIES)
    assert all(BOUNDARY_ALIASES[b] == b for b in BOUNDARIES)


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_the_shared_code_lives_in_named_modules_of_bounded_size() -> None:
    long, big = [], []
    for path in sorted(PKG.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        if not procedures.MODULE_NAME.fullmatch(path.stem) and len(text.splitlines()) > MAX_SHARED_LINES:
            big.append(f"{path.name}: {len(text.splitlines())} lines")
        for fn in _functions(ast.parse(text)):
            lines = fn.end_lineno - fn.lineno + 1  # type: ignore[operator]
            a = fn.args
            params = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
            if lines > MAX_FUNCTION_LINES or len(params) + bool(a.vararg) + bool(a.kwarg) > MAX_PARAMETERS:
                long.append(f"{path.name}:{fn.lineno} {fn.name}: {lines} lines, {len(params)} parameters")
    assert not big, f"shared modules of procedures/ over {MAX_SHARED_LINES} lines: {big}"
    assert not long, f"functions of procedures/ over {MAX_FUNCTION_LINES} lines or {MAX_PARAMETERS} parameters: {long}"
    assert not (PKG / "common.py").exists()


# ------------------------------------------------------------------ a procedure from another distribution

ECHO = '''
"""§5.11 (throw-away, for tests/test_procedure_discovery.py): a few requests, two at a time; their TTFT."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_llmbench.compliance import Check, decide
from pytest_llmbench.loadgen.load import ClosedLoop
from pytest_llmbench.measure.units import Cell
from pytest_llmbench.procedures.helpers import level_specs, pvalue
from pytest_llmbench.procedures.pipeline import Outcome, ProcedureRun
from pytest_llmbench.procedures.result import Table


@dataclass
class EchoParams:
    requests: int = 6
    workload: str = "synthetic-uniform"
    max_output_tokens: int | None = 8
    warmup_requests: int = 2
    warmup_tokens: int = 16


class Echo(ProcedureRun[EchoParams]):
    id, title, params_type = "5.11", "Echo (throw-away)", EchoParams
    profiles = {"smoke": {}, "standard": {}, "full": {}}
    measurement_keys = ("echo_requests", "echo_ttft_p50_ms")
    requirements = (
        {"id": "5.11.2-MUST-1", "level": "MUST", "section": "5.11.2",
         "summary": "The run sends the planned request count.", "check": "sent == planned"},
        {"id": "5.11.4-REPORT-1", "level": "REPORT", "section": "5.11.4",
         "summary": "The report shows the echo table.", "check": "table present"},
    )

    @staticmethod
    def plan(p: EchoParams) -> dict[str, Any]:
        return {"requests": p.requests + p.warmup_requests, "min_duration_s": 0.0}

    async def prepare(self) -> None:
        p = self.p
        self.specs, self.wl = level_specs(self.ctx, p.workload, p.requests, self.seeds.derive("measure"),
                                          p.max_output_tokens)
        self.reserve(self.specs)

    async def warm_up(self, client: Any) -> Any:
        return await self.warm_up_on_workload(client)

    async def run_loads(self, client: Any) -> None:
        self.main = await self.measure(client, "measure", self.specs, ClosedLoop(2, max_requests=self.p.requests))

    def summarize(self) -> Outcome:
        met, sent = self.main.metrics, self.main.load.sent
        ttft = pvalue(met, "ttft", 50)
        self.table = Table("Echo (§5.11.4)", ["Requests", "TTFT P50"], [[Cell(sent, "requests"), Cell(ttft, "s")]])
        return Outcome(metrics=met, tables=[self.table], workload=self.wl.declaration.to_json(),
                       measurements={"echo_requests": sent,
                                     "echo_ttft_p50_ms": None if ttft is None else round(ttft * 1000, 3)})

    def checks(self, out: Outcome) -> dict[str, Check]:
        sent = self.main.load.sent
        return {"5.11.2-MUST-1": decide("5.11.2-MUST-1", ok=sent == self.p.requests, met=f"{sent} sent",
                                        unmet=f"{sent} of {self.p.requests} sent", source="measured"),
                "5.11.4-REPORT-1": decide("5.11.4-REPORT-1", ok=self.table in out.tables, met="echo table",
                                          unmet="no echo table", source="measured")}
'''

SUITE = '''
import pytest


@pytest.mark.llm_procedure("5.11", requests=6)
def test_echo(llm_result):
    assert llm_result.procedure == "5.11" and llm_result.title == "Echo (throw-away)"
    assert llm_result.measured("echo_requests") == 6
'''


def _distribution(site: Path) -> None:
    """``llmbench-echo`` 0.1 installed in ``site``: its module and a .dist-info naming it as an entry point."""
    package = site / "llmbench_echo"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "p5_11_echo.py").write_text(textwrap.dedent(ECHO), encoding="utf-8")
    info = site / "llmbench_echo-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: llmbench-echo\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[pytest_llmbench.procedures]\n5.11 = llmbench_echo.p5_11_echo\n",
                                           encoding="utf-8")


def test_a_procedure_registered_through_the_entry_point_is_found_run_and_reported(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    site = pytester.path / "site"
    _distribution(site)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    pytester.makepyfile(test_echo=SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "--llm-profile", "smoke",
                                           "--llm-report", "rep")
    result.assert_outcomes(passed=1)
    doc = json.loads((pytester.path / "rep" / "results.json").read_text(encoding="utf-8"))
    jsonschema.validate(doc, schema(), cls=jsonschema.Draft202012Validator)
    entry = next(p for p in doc["procedures"] if p["procedure"] == "5.11")
    res = entry["result"]
    assert res["measurements"]["echo_requests"] == 6 and res["runs"][0]["load"]["sent"] == 6
    items = {i["id"]: i for i in res["compliance"]["items"]}
    assert items["5.11.2-MUST-1"]["status"] == "met" and items["5.11.4-REPORT-1"]["status"] == "met"
    assert "4.1-MUST-1" in items  # the rows of every test apply to it too
    report = (pytester.path / "rep" / "report.md").read_text(encoding="utf-8")
    assert "Echo (throw-away)" in report and "Echo (§5.11.4)" in report


def test_an_entry_point_that_registers_nothing_is_named(pytester: pytest.Pytester,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    site = pytester.path / "site"
    _distribution(site)
    (site / "llmbench_echo" / "p5_11_echo.py").write_text("X = 1\n", encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    result = pytester.run(sys.executable, "-c", "import pytest_llmbench.procedures")
    assert result.ret != 0
    assert ("procedure module llmbench_echo.p5_11_echo (entry point '5.11' of pytest_llmbench.procedures, "
            "distribution llmbench-echo) registers no procedure") in result.stderr.str()
