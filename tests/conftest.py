"""Fixtures shared by the plugin's own tests; the builders behind them are in tests/factories.py.

The repository-root conftest.py enables ``pytester`` and prints the real_sut figures.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import scipy.stats  # noqa: F401  loaded once here: an in-process pytester run that imports it first would drop it
# from sys.modules at its end, and the next run's import fails (numpy.fft 'cannot load module more than once')
from factories import StartHarness, simulator_harness
from faultserver import FaultServer, start_fault_server


@pytest.fixture
def harness(tmp_path: Path) -> StartHarness:
    """``with harness(config, capacity=..., profile="smoke", seed=4) as (sim, ctx)``: a simulator and a
    ProcedureContext over it whose reports go under the test's ``tmp_path`` (factories.simulator_harness)."""
    return functools.partial(simulator_harness, root=tmp_path)



@pytest.fixture
def fault_server() -> Iterator[Callable[..., FaultServer]]:
    """Factory: ``srv = fault_server(mix={"reset": 0.1}, seed=1)`` (tests/faultserver.py); stopped after the test."""
    started: list[FaultServer] = []

    def start(**kwargs: Any) -> FaultServer:
        srv = start_fault_server(**kwargs)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture(scope="module")
def slow_server() -> Iterator[FaultServer]:
    """A fault server whose completions take ~8 × 25 ms, so a run has requests in flight when it is interrupted."""
    srv = start_fault_server(cap=8, itl_ms=25.0)
    yield srv
    srv.stop()
