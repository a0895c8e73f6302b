"""Layering (docs/architecture.md): one import-linter ``layers`` contract plus the forbidden ones of
pyproject.toml, no import circle, a root of at most eight modules, and a renderer that loads no
measuring code.

The contracts run in CI (``lint-imports`` in .ci/run); these tests show they hold on this tree and
that they can fail: a copy of the package with one planted import breaks exactly one contract.
"""

from __future__ import annotations

import graphlib
import re
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pytest_llmbench"
#: the pytest glue: the only modules that may import pytest
GLUE = {"plugin.py", "options.py", "hookspecs.py", "llama_fixture.py"}
PYTEST_IMPORT = re.compile(r"^\s*(import|from) _?pytest\b", re.MULTILINE)
LINT_IMPORTS = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))


def test_only_glue_modules_import_pytest() -> None:
    importers = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
                 if PYTEST_IMPORT.search(p.read_text(encoding="utf-8"))
                 and p.relative_to(PACKAGE).parts[0] != "suites"}  # user-facing tests, written in pytest
    assert importers, "the glue imports pytest: the grep must find it"
    assert importers <= GLUE, f"pytest imported below the glue: {sorted(importers - GLUE)}"


def _lint(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LINT_IMPORTS, "--config", str(cwd / "pyproject.toml"), "--no-cache"], cwd=cwd,
                          env={"PYTHONPATH": str(pythonpath), "PATH": str(Path(sys.executable).parent)},
                          capture_output=True, text=True, timeout=300)


def _contracts() -> list[dict]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_import_contracts_are_kept() -> None:
    out = _lint(ROOT, ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    contracts = _contracts()  # the count follows pyproject.toml, so a new contract needs no edit here
    assert f"{len(contracts)} kept, 0 broken" in out.stdout
    assert [c["type"] for c in contracts].count("layers") >= 1


def test_every_root_folder_and_module_has_a_layer() -> None:
    """A new folder or root module must be placed in the layers contract, or nothing checks it."""
    layers = next(c for c in _contracts() if c["id"] == "layers")["layers"]
    named = {n.strip().strip("()") for layer in layers for n in layer.split("|")}
    present = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    present |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert present - named == set(), f"not in the layers contract: {sorted(present - named)}"


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("measure/summary.py", "import pytest", "pytest only in the glue"),
    ("report/render.py", "from ..measure.stats import Estimate", "report renders a document"),
    ("simulator/engine.py", "from ..loadgen import load", "the package in layers"),
    ("sut/system.py", "from ..compliance import Declarations", "the package in layers"),
    ("measure/metrics/latency.py", "from ...client import LLMClient", "the package in layers"),
    ("compliance/facts.py", "from ..measure import summary", "compliance judges facts"),
    ("gate/storage.py", "from ..measure.summary import summarize", "the gate builds comparison documents"),
    ("procedures/prompts.py", "from ..sut.adapters.vllm.switch import fresh_salt", "procedures speak to a server"),
])
def test_an_offending_import_breaks_a_contract(tmp_path: Path, module: str, line: str, contract: str) -> None:
    shutil.copytree(PACKAGE, tmp_path / "pytest_llmbench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "pytest_llmbench" / module
    target.write_text(target.read_text(encoding="utf-8") + f"\n{line}  # planted\n", encoding="utf-8")
    out = _lint(tmp_path, tmp_path)
    assert out.returncode != 0, out.stdout
    assert f"{contract}" in out.stdout and "BROKEN" in out.stdout
    assert "1 broken" in out.stdout


def _import_graph() -> dict[str, set[str]]:
    """Every module's direct imports of package modules, function-level and TYPE_CHECKING ones included."""
    graph = grimp.build_graph("pytest_llmbench", cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def test_no_import_circle() -> None:
    assert _cycle(_import_graph()) is None


def test_a_circle_is_found() -> None:
    graph = _import_graph()
    graph["pytest_llmbench.measure.units"].add("pytest_llmbench.measure.registry")  # registry -> units already
    cycle = _cycle(graph)
    assert cycle is not None and {"pytest_llmbench.measure.units", "pytest_llmbench.measure.registry"} <= set(cycle)


def test_root_holds_at_most_eight_modules() -> None:
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= 8, root


def test_the_renderer_loads_no_measuring_code() -> None:
    """``python -m pytest_llmbench report`` loads the document format and the renderer only."""
    code = ("import sys, pytest_llmbench.report; "
            "print('\\n'.join(sorted(m for m in sys.modules if m.startswith('pytest_llmbench'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    loaded = out.stdout.split()
    assert len(loaded) <= 18, loaded  # the renderer's own modules (report.looks, report.phases, report.rates) included
    for heavy in ("pytest_llmbench.procedures", "pytest_llmbench.loadgen", "pytest_llmbench.client",
                  "pytest_llmbench.measure.metrics", "pytest_llmbench.measure.summary",
                  "pytest_llmbench.document.build"):
        assert not any(m == heavy or m.startswith(heavy + ".") for m in loaded), (heavy, loaded)


def test_public_api_is_importable_and_lazy() -> None:
    code = ("import sys, pytest_llmbench as p; n = len([m for m in sys.modules if m.startswith('pytest_llmbench')]); "
            "from pytest_llmbench import assert_slo, poisson, closed, uniform, bursty, LoadSpec, __version__; "
            "print(n, LoadSpec.__module__, callable(assert_slo), bool(__version__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    n, module, ok, version = out.stdout.split()
    assert int(n) == 1 and module == "pytest_llmbench.procedures.loads" and ok == "True" and version == "True"


#: private names imported across folders that another change owns (issue 45: procedures/ is reworked
#: beside this one); a new entry needs a reason
KNOWN_PRIVATE_IMPORTS: set[tuple[str, str]] = set()


def _private_imports() -> set[tuple[str, str]]:
    """(module path, imported private name) of every ``from ... import _name`` whose module is in another
    folder of the package than the importer (a root module is a folder of its own)."""
    import ast

    out = set()
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        here = rel.with_suffix("").parts[:-1]  # the importer's package
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            names = [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            if not names:
                continue
            target = (here[:len(here) - node.level + 1] if node.level else ()) + tuple((node.module or "").split("."))
            target = target[1:] if not node.level and target[:1] == ("pytest_llmbench",) else target
            if target[:1] != rel.parts[:1] or len(rel.parts) == 1:
                out.update((rel.as_posix(), ".".join((*target, n))) for n in names)
    return out


def test_no_private_name_is_imported_from_another_folder() -> None:
    """A folder's underscored names are its own: what another folder needs is public (``gate.compare.
    summary_value``, ``compliance.engine.onoff``), so a rename inside a folder stays inside it."""
    found = _private_imports()
    assert found - KNOWN_PRIVATE_IMPORTS == set(), sorted(found - KNOWN_PRIVATE_IMPORTS)
    assert ("compliance/s4_7_clocks.py", "compliance.engine._Ctx") not in found  # same folder: allowed


def test_a_private_import_from_another_folder_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(PACKAGE / "document", tmp_path / "document", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "document" / "mvr.py").write_text("from ..gate.compare import _matches\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path)
    assert _private_imports() == {("document/mvr.py", "gate.compare._matches")}
