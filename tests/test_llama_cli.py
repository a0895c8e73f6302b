"""The llama.cpp build-and-run module is imported only when used, runs as ``python -m pytest_llmbench
llama-server``, and the adapters' configure hook is the plugin's (review §4.4, §4.5)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_llmbench import __main__ as cli
from pytest_llmbench import plugin
from pytest_llmbench.sut import adapters
from pytest_llmbench.sut.adapters.llamacpp import server as ls
from pytest_llmbench.sut.system import SUT

ROOT = Path(__file__).resolve().parents[1]
SERVER_MODULE = "pytest_llmbench.sut.adapters.llamacpp.server"


def test_plugin_and_llama_entry_point_do_not_import_the_server_module() -> None:
    code = (f"import sys, pytest_llmbench.plugin, pytest_llmbench.llama_fixture; "
            f"print({SERVER_MODULE!r} in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_llama_server_command_forwards_its_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []
    monkeypatch.setattr(ls, "main", lambda argv: seen.append(list(argv)) or 7)
    assert cli.main(["llama-server", "serve", "--port", "9000"]) == 7
    assert seen == [["serve", "--port", "9000"]]


def test_llama_server_help_names_the_command() -> None:
    out = subprocess.run([sys.executable, "-m", "pytest_llmbench", "llama-server", "--help"], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "usage: python -m pytest_llmbench llama-server" in out.stdout and "install" in out.stdout
    listing = subprocess.run([sys.executable, "-m", "pytest_llmbench", "--help"], capture_output=True, text=True,
                             timeout=60, cwd=ROOT)
    assert "llama-server" in listing.stdout


def test_the_plugin_asks_the_adapters_first() -> None:
    restarted: list[bool] = []
    sut = SUT(base_url="http://127.0.0.1:9/v1", model="m", server_kind="llama.cpp")
    adapters.register_restart(sut.root_url, lambda: restarted.append(True))
    try:
        assert plugin.pytest_llmbench_configure_sut(sut, "restart", True) is True and restarted == [True]
    finally:
        adapters.unregister_restart(sut.root_url)
    assert plugin.pytest_llmbench_configure_sut(sut, "prefix_cache", False) is True
    assert sut.extra_body["cache_prompt"] is False
    other = SUT(base_url="http://127.0.0.1:9/v1", model="m", server_kind="vllm")
    assert plugin.pytest_llmbench_configure_sut(other, "guardrails", "full") is None  # nobody can: not embedded
