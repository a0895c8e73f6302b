"""Layering (shared/DESIGN.md): pytest only in the glue, and the import-linter contracts of pyproject.toml.

The contracts run in CI (``lint-imports`` in .ci/run); these tests show they hold on this tree and
that they can fail: a copy of the package with ``import pytest`` added to metrics.py breaks one.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pytest_llmbench"
#: the pytest glue: the only modules that may import pytest (llama_fixture.py: added by another branch)
GLUE = {"plugin.py", "options.py", "hookspecs.py", "llama_fixture.py"}
PYTEST_IMPORT = re.compile(r"^\s*(import|from) _?pytest\b", re.MULTILINE)
LINT_IMPORTS = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))


def test_only_glue_modules_import_pytest() -> None:
    importers = {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
                 if PYTEST_IMPORT.search(p.read_text(encoding="utf-8"))}
    assert importers, "the glue imports pytest: the grep must find it"
    assert importers <= GLUE, f"pytest imported below the glue: {sorted(importers - GLUE)}"


def _lint(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LINT_IMPORTS, "--config", str(cwd / "pyproject.toml"), "--no-cache"], cwd=cwd,
                          env={"PYTHONPATH": str(pythonpath), "PATH": str(Path(sys.executable).parent)},
                          capture_output=True, text=True, timeout=300)


def test_import_contracts_are_kept() -> None:
    out = _lint(ROOT, ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    n = (ROOT / "pyproject.toml").read_text(encoding="utf-8").count("[[tool.importlinter.contracts]]")
    assert f"{n} kept, 0 broken" in out.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("metrics.py", "import pytest", "pytest only in the glue"),
    ("report/render.py", "from ..stats import Estimate", "report renders a document"),
    ("simulator/engine.py", "from .. import load", "the simulator imports nothing from the load generator"),
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
