"""Hooks a user's conftest.py can implement (registered in plugin.pytest_addhooks)."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.hookspec(firstresult=True)
def pytest_llmbench_configure_sut(sut: Any, setting: str, value: Any) -> bool | None:
    """Switch the SUT to a configuration before a run (§5.7 prefix cache, §5.10 guardrails).

    ``setting`` is one of ``"prefix_cache"`` (bool), ``"flush_prefix_cache"`` (True),
    ``"guardrails"`` (``"none"``, ``"input"``, ``"output"``, ``"full"``) or ``"restart"`` (True:
    stop and start the server process, for cold-start measurements; same flags, empty caches). Return True when the
    switch was made, None when this implementation cannot make it (the next one is asked). When
    no implementation makes it, the procedure's test is skipped with that reason and the
    compliance table shows the unmet item. The plugin's own implementation (trylast) asks the
    server adapters (``pytest_llmbench.sut.adapters.configure``: llama.cpp's
    ``prefix_cache``/``flush_prefix_cache``, ``restart`` of a server this process started), then
    switches the embedded simulator through its admin endpoint (``restart``: a new simulator process).
    """
