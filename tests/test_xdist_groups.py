"""``pytest tests -n 2`` (README command 2): the repository conftest schedules every real-server test as one
unit of work, so a server starts once, in one process (conftest.REAL_SERVER_TESTS); the llama.cpp server
takes the cores the other workers leave (llama_fixture.default_threads)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_llmbench import llama_fixture

ROOT_CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

WHERE = '''
import os, pathlib, pytest

def _where(name):
    pathlib.Path(name).write_text(os.environ["PYTEST_XDIST_WORKER"])
'''
REAL = WHERE + '''
@pytest.mark.real_sut
@pytest.mark.parametrize("i", range(4))
def test_llama(i):
    _where(f"llama{i}")

@pytest.mark.vllm
@pytest.mark.parametrize("i", range(4))
def test_vllm(i):
    _where(f"vllm{i}")
'''
UNITS = WHERE + '''
@pytest.mark.parametrize("i", range(8))
def test_unit(i):
    _where(f"unit{i}")
'''


def _project(pytester: pytest.Pytester, units: str) -> None:
    pytester.makeconftest(ROOT_CONFTEST.read_text(encoding="utf-8").replace('pytest_plugins = ["pytester"]', ""))
    pytester.makeini("[pytest]\nmarkers =\n    real_sut: x\n    vllm: x\n")
    tests = pytester.mkdir("tests")
    (tests / "test_real_sut.py").write_text(REAL)
    (tests / "test_units.py").write_text(units)


def test_real_server_tests_share_one_worker(pytester: pytest.Pytester) -> None:
    _project(pytester, UNITS)
    pytester.runpytest_subprocess("-n", "2", "-p", "no:randomly").assert_outcomes(passed=16)
    where = {p.name: p.read_text() for p in Path(str(pytester.path)).iterdir() if p.is_file() and p.name[-1].isdigit()}
    servers = {where[f"{kind}{i}"] for kind in ("llama", "vllm") for i in range(4)}
    assert len(servers) == 1, where  # one process ran every real-server test
    assert {where[f"unit{i}"] for i in range(8)} - servers, where  # the other ran unit tests meanwhile


def test_wall_clock_tests_run_in_the_servers_process(pytester: pytest.Pytester) -> None:
    """conftest.WALL_CLOCK_TESTS: a simulator test whose margin a server's start beside it can eat runs in the
    real-servers unit (here a stand-in under the listed node id)."""
    path, name = conftest_module().WALL_CLOCK_TESTS[0].split("::")
    _project(pytester, UNITS)
    pytester.path.joinpath(path).write_text(WHERE + f"\ndef {name}():\n    _where('wall')\n")
    pytester.runpytest_subprocess("-n", "2", "-p", "no:randomly").assert_outcomes(passed=17)
    where = {p.name: p.read_text() for p in Path(str(pytester.path)).iterdir() if p.is_file()
             and (p.name[-1].isdigit() or p.name == "wall")}
    assert where["wall"] == where["llama0"] == where["vllm0"], where


def test_each_wall_clock_test_exists() -> None:
    """An entry that names no test any more would keep nothing together: each is a test function in its file."""
    root = ROOT_CONFTEST.parent
    for entry in conftest_module().WALL_CLOCK_TESTS:
        path, name = entry.split("::")
        assert f"\ndef {name}(" in (root / path).read_text(encoding="utf-8"), entry


def conftest_module():  # type: ignore[no-untyped-def]
    import importlib.util

    spec = importlib.util.spec_from_file_location("_root_conftest", ROOT_CONFTEST)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_marked_test_outside_the_list_stops_the_collection(pytester: pytest.Pytester) -> None:
    _project(pytester, UNITS + "\n@pytest.mark.vllm\ndef test_stray():\n    pass\n")
    res = pytester.runpytest_subprocess("-p", "no:randomly")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*real-server tests missing from REAL_SERVER_TESTS*tests/test_units.py::test_stray*"])


@pytest.mark.parametrize(("workers", "load", "threads"), [(None, 0.2, 2), ("2", 0.2, 1), ("1", 0.2, 2),
                                                           (None, 2.5, 1), ("4", 0.2, 1)])
def test_llama_threads_leave_the_other_workers_a_core(monkeypatch: pytest.MonkeyPatch, workers: str | None,
                                                      load: float, threads: int) -> None:
    monkeypatch.delenv("LLMBENCH_LLAMA_THREADS", raising=False)
    if workers is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", workers)
    monkeypatch.setattr(llama_fixture.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(llama_fixture.os, "getloadavg", lambda: (load, load, load))
    assert llama_fixture.default_threads() == threads
