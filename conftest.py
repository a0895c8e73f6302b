"""Repository-level conftest: enables ``pytester`` for the plugin's own tests (tests/), and shows the
figures the ``real_sut`` tests print in the terminal summary, so a CI log carries them without ``-s``."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

_REAL_SUT_OUTPUT: list[tuple[str, str, str]] = []


REAL_SERVER_MARKS = ("real_sut", "vllm")
# every test against a real server, by node id (prefixes): one unit of work under ``-n N``. A test that carries
# one of the marks and is not listed stops the collection (pytest_collection_modifyitems below).
REAL_SERVER_TESTS = ("tests/test_real_sut.py::", "tests/test_vllm_live.py::", "tests/test_vllm_grpc_live.py::",
                     "tests/test_tokencount.py::test_llama_server_chunk_counts_and_tpot")
# simulator tests whose verdict rests on the simulator's throughput in wall time with a narrow margin, seen to
# fail under ``-n 2`` while a real server started in the other process (5.5's fluidity criterion sits 6 % above
# the rate at concurrency 8): they join the real-servers unit, and, collected before the real-server files, run
# in its process before any server starts, beside ordinary tests only.
WALL_CLOCK_TESTS = ("tests/test_procedure_5_5.py::test_fluidity_criterion_bounds_capacity",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test marked real_sut or vllm must be in ``REAL_SERVER_TESTS``, so that ``-n N`` keeps it in
    the one process that starts the servers."""
    stray = [i.nodeid for i in items if any(i.get_closest_marker(m) for m in REAL_SERVER_MARKS)
             and not i.nodeid.startswith(REAL_SERVER_TESTS)]
    if stray:
        raise pytest.UsageError(f"real-server tests missing from REAL_SERVER_TESTS in conftest.py: {stray}; "
                                "add them there, so pytest -n N runs them in the process that starts the servers")


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """With ``-n N`` (pytest-xdist): every real-server test in one unit of work, so each server starts once,
    in one process; the largest unit is sent first, while the other processes run the rest one test at a
    time. The ``WALL_CLOCK_TESTS`` join that unit, so none of them runs beside a server's start. (xdist's own ``--dist loadgroup`` cannot be used: xdist 3.8 renames a grouped test through
    ``item._nodeid``, which pytest 9 no longer reads.)"""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class RealServersTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "real-servers" if nodeid.startswith(REAL_SERVER_TESTS + WALL_CLOCK_TESTS) else nodeid

    return RealServersTogether(config, log)


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
