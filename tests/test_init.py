"""``python -m pytest_llmbench init [DIR]``: the suites, a conftest.py, a declarations file, pytest
configuration and a CI workflow written into a user's repository; never over a file without --force."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from pytest_llmbench.__main__ import main
from pytest_llmbench.compliance.declarations import (
    DECLARATION_FACTS,
    PLACEHOLDER,
    DeclarationError,
    check_declaration,
)
from pytest_llmbench.starter import BENCH_DIR, WORKFLOW, StarterError, declarations_template, plan, write_starter

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SUITES = Path(__file__).resolve().parents[1] / "pytest_llmbench" / "suites"


def test_init_writes_the_starting_point(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    names = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    shipped = {f"{BENCH_DIR}/{p.name}" for p in SUITES.glob("test_*.py")}
    assert len(shipped) == 10 and shipped <= names
    assert {f"{BENCH_DIR}/conftest.py", f"{BENCH_DIR}/declarations.toml", WORKFLOW, "pytest.ini"} <= names
    assert all(f"wrote {(tmp_path / n).as_posix()}" in out for n in names)
    ttft = (tmp_path / BENCH_DIR / "test_5_1_ttft.py").read_text(encoding="utf-8")
    assert "EXAMPLES" in ttft.splitlines()[1] and ttft.endswith((SUITES / "test_5_1_ttft.py").read_text(encoding="utf-8"))
    assert str(tmp_path) not in "".join(p.read_text(encoding="utf-8") for p in tmp_path.rglob("*") if p.is_file())


def test_init_refuses_to_overwrite_and_names_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / BENCH_DIR).mkdir()
    mine = tmp_path / BENCH_DIR / "conftest.py"
    mine.write_text("# the user's own\n", encoding="utf-8")
    assert main(["init", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{mine} exists" in err and "--force" in err
    assert mine.read_text(encoding="utf-8") == "# the user's own\n"
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["conftest.py"]  # nothing written
    with pytest.raises(StarterError, match="conftest.py exists"):
        write_starter(tmp_path)
    assert main(["init", str(tmp_path), "--force"]) == 0
    assert f"overwrote {mine.as_posix()}" in capsys.readouterr().out
    assert "pytest_llmbench_configure_sut" in mine.read_text(encoding="utf-8")


def test_pytest_configuration_goes_where_the_folder_has_none(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "mine"\n', encoding="utf-8")
    write_starter(tmp_path)
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    assert data["project"] == {"name": "mine"}  # kept
    assert data["tool"]["pytest"]["ini_options"]["llm_declarations"] == f"{BENCH_DIR}/declarations.toml"
    assert not (tmp_path / "pytest.ini").exists()
    again = tmp_path / "again"
    again.mkdir()
    (again / "pyproject.toml").write_text("[tool.pytest.ini_options]\naddopts = '-q'\n", encoding="utf-8")
    assert "pyproject.toml" not in plan(again) and "pytest.ini" not in plan(again)
    (again / "pyproject.toml").unlink()
    (again / "tox.ini").write_text("[pytest]\n", encoding="utf-8")
    assert "pytest.ini" not in plan(again)


def test_every_declaration_is_a_commented_line_naming_its_items() -> None:
    text = declarations_template()
    assert tomllib.loads(text) == {}  # all commented: every key absent, each item needs a declaration
    lines = text.splitlines()
    for key, fact in DECLARATION_FACTS.items():
        (i,) = [n for n, line in enumerate(lines) if line.startswith(f"# {key} = ")]
        value = tomllib.loads(lines[i][2:])[key]  # uncommented, a valid TOML line
        for item in fact.get("items") or ():
            assert item in lines[i + 1]
        if PLACEHOLDER in (value.values() if isinstance(value, dict) else (value,)):
            with pytest.raises(DeclarationError, match="placeholder"):  # a line uncommented unfilled is refused
                check_declaration(key, value, "declarations.toml")
        else:
            check_declaration(key, value, "declarations.toml")  # of the key's type (booleans, enums)


def test_the_workflow_saves_on_main_and_compares_on_pull_requests(tmp_path: Path) -> None:
    wf = yaml.safe_load(plan(tmp_path)[WORKFLOW])
    steps = wf["jobs"]["benchmark"]["steps"]
    runs = " ".join(s.get("run", "") for s in steps)
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("actions/cache@") for u in uses) and any(u.startswith("actions/upload-artifact@") for u in uses)
    assert "--llm-runs 3 --llm-save main" in runs and "--llm-compare main" in runs and "--llm-compare-fail" in runs
    assert "${{ vars.LLM_ENDPOINT }}" in plan(tmp_path)[WORKFLOW]


def test_the_written_suites_collect(pytester: pytest.Pytester) -> None:
    write_starter(pytester.path)
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider", BENCH_DIR)
    result.stdout.fnmatch_lines(["*20 tests collected*"])
