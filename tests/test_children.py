"""Servers started by the plugin die with the pytest process, even on SIGKILL (no orphan SUT)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from pytest_llmbench.sut.children import die_with_parent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for a reaper)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def _kill_parent_and_wait(script: str, tmp_path: Path, wait_s: float = 10.0) -> tuple[int, bool]:
    """Run ``script`` (prints the child's pid), SIGKILL it, then wait up to ``wait_s`` for the child to end."""
    path = tmp_path / "parent.py"
    path.write_text(textwrap.dedent(script))
    parent = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=10)
    deadline = time.monotonic() + wait_s
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    gone = not _alive(child)
    if not gone:
        os.kill(child, signal.SIGKILL)
    return child, gone


def test_a_plain_child_dies_with_its_parent(tmp_path: Path) -> None:
    _, gone = _kill_parent_and_wait("""
        import subprocess, sys, time
        from pytest_llmbench.sut.children import die_with_parent
        p = subprocess.Popen(["sleep", "120"], preexec_fn=die_with_parent(), start_new_session=True)
        print(p.pid, flush=True)
        time.sleep(120)
    """, tmp_path)
    assert gone


def test_the_embedded_simulator_dies_with_its_parent(tmp_path: Path) -> None:
    _, gone = _kill_parent_and_wait("""
        import time
        from pytest_llmbench.simulator.process import start_simulator
        sim = start_simulator()
        print(sim.proc.pid, flush=True)
        time.sleep(120)
    """, tmp_path)
    assert gone


def test_without_the_hook_the_child_would_survive(tmp_path: Path) -> None:
    """The control: the same parent without ``preexec_fn`` leaves an orphan (so the tests above can fail)."""
    child, gone = _kill_parent_and_wait("""
        import subprocess, time
        p = subprocess.Popen(["sleep", "120"], start_new_session=True)
        print(p.pid, flush=True)
        time.sleep(120)
    """, tmp_path, wait_s=2.0)
    assert not gone


def test_no_hook_from_a_worker_thread() -> None:
    """PDEATHSIG follows the forking thread: from a worker thread nothing is set (its exit must not kill)."""
    seen: list[object] = []
    t = threading.Thread(target=lambda: seen.append(die_with_parent()))
    t.start()
    t.join()
    assert seen == [None]
    assert callable(die_with_parent())
