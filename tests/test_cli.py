"""``python -m pytest_llmbench``: re-rendering reports from a stored results.json alone."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_llmbench.__main__ import COMMANDS, main

SMOKE_51 = '''
import pytest
from pytest_llmbench import poisson

@pytest.mark.llm_procedure("5.1", load=poisson(rate=80), requests=30, warmup_requests=4, warmup_tokens=10)
def test_ttft(llm_result):
    assert llm_result.metrics is not None
'''


def test_report_command_rebuilds_byte_identical_reports_without_runs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_smoke=SMOKE_51)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-profile", "smoke", "--llm-report", "rep")
    result.assert_outcomes(passed=1)
    rep = pytester.path / "rep"
    assert (rep / "runs").is_dir()
    shutil.rmtree(rep / "runs")  # the document alone must be enough
    out_dir = pytester.path / "again"
    done = subprocess.run([sys.executable, "-m", "pytest_llmbench", "report", str(rep / "results.json"),
                           "--output", str(out_dir)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    for name in ("report.md", "report.html"):
        assert (out_dir / name).read_bytes() == (rep / name).read_bytes(), name
    assert f"{(out_dir / 'report.md').as_posix()}\n" in done.stdout


def test_report_command_names_a_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "results.json"
    bad.write_text('{"schema_version": "9.0"}', encoding="utf-8")
    assert main(["report", str(bad), "--output", str(tmp_path / "out")]) == 2
    assert "schema_version 9.0 is not supported" in capsys.readouterr().err


def test_a_command_is_one_table_entry() -> None:
    name, (help_text, add_arguments, run) = next(iter(COMMANDS.items()))
    assert name == "report" and help_text and callable(add_arguments) and callable(run)
