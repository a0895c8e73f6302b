"""Repository-level conftest: enables ``pytester`` for the plugin's own tests (tests/), and shows the
figures the ``real_sut`` tests print in the terminal summary, so a CI log carries them without ``-s``."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

_REAL_SUT_OUTPUT: list[tuple[str, str, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep the captured output of every real_sut test's call phase (passed, failed or skipped)."""
    if report.when == "call" and "real_sut" in report.keywords:
        _REAL_SUT_OUTPUT.append((report.nodeid, report.outcome, report.capstdout))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the real_sut tests' figures (client vs server timing, token counts) in one section."""
    if not _REAL_SUT_OUTPUT:
        return
    terminalreporter.section("real SUT figures (captured output of the real_sut tests)")
    for nodeid, outcome, out in _REAL_SUT_OUTPUT:
        terminalreporter.write_line(f"{nodeid} [{outcome}]")
        for line in out.strip("\n").splitlines():
            terminalreporter.write_line(f"    {line}")
