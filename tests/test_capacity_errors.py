"""A capacity search that finds nothing (§5.2.3, §5.3.3): one clear error per session, naming the remedy."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_llmbench.session import Session
from pytest_llmbench.settings import Settings


@pytest.mark.parametrize(("budget", "names_budget"), [(60.0, True), (None, False)])
def test_failed_capacity_search_runs_once_and_names_the_fix(budget: float | None, names_budget: bool) -> None:
    settings = Settings(profile="smoke", max_duration=budget, sources={"max_duration": "smoke profile default"})
    session = Session(settings)
    calls: list[str] = []

    async def no_capacity(proc: Any, params: Any) -> SimpleNamespace:
        calls.append(proc.id)
        return SimpleNamespace(capacity=None)

    session._run_async = no_capacity  # type: ignore[method-assign]
    messages = []
    for _dependent in ("5.3", "5.4", "5.8"):  # three tests that need the rate capacity
        with pytest.raises(RuntimeError) as err:
            asyncio.run(session.get_capacity("rate"))
        messages.append(str(err.value))
    assert calls == ["5.2"]  # the search ran once; later tests get the same error at once
    assert len(set(messages)) == 1
    assert messages[0].startswith("procedure 5.2 did not determine a capacity")
    assert ("60 s per procedure (smoke profile default)" in messages[0]) is names_budget
    assert ("--llm-capacity rate=VALUE" in messages[0]) is names_budget


def test_a_procedure_that_raised_raises_again_without_running_again() -> None:
    """Two tests of one procedure: the second gets the first one's error (like a session fixture whose
    set-up failed), not a second run of the whole procedure on a slow SUT."""
    session = Session(Settings(profile="smoke"))
    runs: list[str] = []

    async def failing(proc: Any, params: Any, stop: Any = None) -> Any:
        runs.append(proc.id)
        raise RuntimeError("5.6: no short-class request completed")

    session._run_async = failing  # type: ignore[method-assign]
    proc = SimpleNamespace(id="5.6")
    for _test in range(3):
        with pytest.raises(RuntimeError, match="no short-class request completed"):
            session.run(proc, {"workload": "synthetic-skewed"})  # type: ignore[arg-type]
    assert runs == ["5.6"]
    with pytest.raises(RuntimeError):  # other parameters are another run
        session.run(proc, {"workload": "other"})  # type: ignore[arg-type]
    assert runs == ["5.6", "5.6"]
