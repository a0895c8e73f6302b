"""Hooks a user's conftest.py can implement (registered in plugin.pytest_addhooks): the SUT switch, the
results document's generate/update pair and the machine fingerprint's (docs/architecture.md, "The document's
hooks")."""

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


# --- the results document (pytest-benchmark's ``generate_json`` / ``update_json`` pair) --------------------
@pytest.hookspec(firstresult=True)
def pytest_llmbench_generate_document(config: Any, result: Any) -> dict[str, Any] | None:
    """Build the results document (``results.json``) of the session's ``result`` (a
    ``pytest_llmbench.session.SessionResult``), before its updates.

    The plugin's own implementation (trylast) is ``pytest_llmbench.document.build.generate_document``, each
    procedure's entry built once per session; return a dict to replace it. Called once at session end, and
    under ``--llm-compare`` after every test: the gate compares the test against that document (without
    the updates below, which only the document written at the end receives).
    """


def pytest_llmbench_update_document(config: Any, result: Any, document: dict[str, Any]) -> None:
    """Add to or change ``document`` in place before it is written, e.g. ``document["ci"] = {...}``.

    Called once, at session end, in a declared order: the plugin's headline first (``tryfirst``:
    ``headline``, ``compliance_overview``, per test and procedure labels, warnings and sweeps), then
    implementations without an order (yours), then the plugin's comparison with the baseline last
    (``trylast``, under ``--llm-compare``: ``comparison``). Afterwards the plugin writes the top-level keys
    in their order (new keys last), scrubs secrets from every string (§7) and writes ``results.json``,
    the reports and the exports from it. Every figure a report shows must be in the document: a renderer
    never computes one.
    """


# --- the machine the harness ran on (pytest-benchmark's ``generate_machine_info`` / ``update_machine_info``) ---
@pytest.hookspec(firstresult=True)
def pytest_llmbench_generate_machine_info(config: Any) -> dict[str, Any] | None:
    """The fingerprint of the machine this session runs on, stored with a saved session (``--llm-save``) and
    compared by the §6.1 machine item (6.1-MUST-3) of ``--llm-compare``. The plugin's own implementation
    (trylast) is ``pytest_llmbench.gate.storage.machine_fingerprint`` (host name, architecture, processor,
    CPU count, OS and Python); return a dict to replace it."""


def pytest_llmbench_update_machine_info(config: Any, machine_info: dict[str, Any]) -> None:
    """Add to ``machine_info`` in place, e.g. ``machine_info["gpu"] = "H100 x 8"``; runs after the
    fingerprint is generated."""
