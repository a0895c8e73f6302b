"""Fixtures shared by the plugin's own tests; the builders behind them are in tests/factories.py.

The repository-root conftest.py enables ``pytester`` and prints the real_sut figures.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from factories import StartHarness, simulator_harness


@pytest.fixture
def harness(tmp_path: Path) -> StartHarness:
    """``with harness(config, capacity=..., profile="smoke", seed=4) as (sim, ctx)``: a simulator and a
    ProcedureContext over it whose reports go under the test's ``tmp_path`` (factories.simulator_harness)."""
    return functools.partial(simulator_harness, root=tmp_path)

