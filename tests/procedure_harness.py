"""A hand-built ProcedureContext over a running simulator, shared by the procedure tests.

Procedures run directly (no pytest plugin in between) so their numbers can be compared with the
simulator's model. Capacity is declared by the test; a procedure asking for a capacity the test
did not declare fails the test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_llmbench.common.tokenizer import get_tokenizer
from pytest_llmbench.procedures.base import Capacity, ProcedureContext
from pytest_llmbench.settings import Settings
from pytest_llmbench.sut.system import SUT


def procedure_context(sim: Any, root: Path, *, capacity: Capacity | None = None, run_root: Path | None = None,
                      **settings: Any) -> ProcedureContext:
    """Context for ``sim`` (a SimulatorProcess): reports under ``root``, ``Settings(**settings)``."""
    info = sim.get_config()
    sut = SUT(base_url=sim.base_url, model=info["model_name"], api="completions", embedded=True, server_info=info)

    async def get_capacity(kind: str) -> Capacity:
        field = "rate" if kind == "rate" else "concurrency"
        if capacity is None or getattr(capacity, field) is None:
            raise AssertionError(f"the procedure asked for a {kind} capacity the test did not declare")
        return capacity

    def configure(setting: str, value: Any) -> bool:
        if setting == "restart":  # a new simulator process on the same port (§4.5.3 cold start)
            sim.restart()
            sut.server_info = sim.get_config()
            return True
        sut.server_info = sim.set_config(**{setting: value})
        return True

    return ProcedureContext(sut=sut, settings=Settings(report=root, **settings), tokenizer=get_tokenizer(),
                            run_root=run_root or root / "runs", get_capacity=get_capacity, configure_sut=configure)
