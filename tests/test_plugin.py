"""Plugin mechanics through pytester: markers, fixture caching, SLO enforcement, hooks, xdist, dry run.

A fake procedure (registered from the test's conftest) stands in for a real one so that these tests
exercise the pytest glue only; it still talks to the embedded simulator through the SUT fixture.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

TESTS = str(Path(__file__).parent)  # tests/factories.py, for the fake procedure in the pytester runs

FAKE_CONFTEST = '''
import json, pathlib
from dataclasses import dataclass
from pytest_llmbench.procedures.base import Procedure, register
from pytest_llmbench.procedures.result import ProcedureResult, Table
from pytest_llmbench.measure.summary import summarize
from factories import ttft_records  # tests/factories.py: the fake fixture puts tests/ on PYTHONPATH

COUNTER = pathlib.Path("runs.txt")

@dataclass
class FakeParams:
    size: int = 3
    def validate(self):
        if self.size < 1:
            raise ValueError("size must be >= 1")

async def run(ctx, p):
    COUNTER.write_text(COUNTER.read_text() + "x" if COUNTER.exists() else "x")
    switched = ctx.configure_sut("prefix_cache", False)
    ctx.configure_sut("prefix_cache", True)
    metrics = summarize(ttft_records([100.0 * (i + 1) for i in range(p.size)]))
    return ProcedureResult(procedure="5.1", title="Fake", params={"size": p.size}, profile=ctx.settings.profile,
                           metrics=metrics, tables=[Table("T", ["a"], [["1"]])],
                           measurements={"switched": switched, "model": ctx.sut.model})

register(Procedure("5.99", "Fake procedure", FakeParams, run, {"smoke": {"size": 3}}, lambda p: {"requests": p.size, "min_duration_s": 1.0}))
'''


@pytest.fixture
def fake(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeconftest(FAKE_CONFTEST)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")])))
    return pytester


def test_one_run_for_several_assertions_and_slo_marker(fake: pytest.Pytester) -> None:
    fake.makepyfile(test_a='''
import pytest
from pytest_llmbench import assert_slo

@pytest.mark.llm_procedure("5.99", size=4, slo=["ttft.p50 <= 1s confidence=90%"])  # 4 of 4 within: 90 % shows it
def test_first(llm_result):
    assert llm_result.measurements["model"] == "llmbench-sim"
    assert llm_result.measurements["switched"] is True

@pytest.mark.llm_procedure("5.99", size=4)
def test_second(llm_result):
    assert_slo(llm_result, "ttft.max <= 1s")

@pytest.mark.llm_procedure("5.99", size=4, slo=["ttft.p50 <= 100ms"])
def test_marker_slo_fails(llm_result):
    pass
''')
    result = fake.runpytest_subprocess("-p", "no:cacheprovider", "--llm-report", "rep", "--junitxml", "j.xml")
    result.assert_outcomes(passed=2, failed=1)
    assert (fake.path / "runs.txt").read_text() == "x"  # three tests, one run
    out = result.stdout.str()
    assert "TTFT P50" in out and "> 100 ms" in out and "n=4" in out
    doc = json.loads((fake.path / "rep" / "results.json").read_text())
    assert doc["complete"] is True
    junit = (fake.path / "j.xml").read_text()
    assert 'name="llmbench.procedure" value="5.1"' in junit


def test_unknown_procedure_and_parameter_fail_at_collection(fake: pytest.Pytester) -> None:
    fake.makepyfile(test_b='''
import pytest
@pytest.mark.llm_procedure("5.42")
def test_x(llm_result):
    pass
''')
    result = fake.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown procedure '5.42'" in result.stderr.str() and "5.99" in result.stderr.str()
    fake.makepyfile(test_b='''
import pytest
@pytest.mark.llm_procedure("5.99", sise=3)
def test_x(llm_result):
    pass
''')
    result = fake.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "no parameter(s) sise" in result.stderr.str() and "known: size" in result.stderr.str()
    fake.makepyfile(test_b='''
import pytest
@pytest.mark.llm_procedure("5.99", size=0)
def test_x(llm_result):
    pass
''')
    result = fake.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "size must be >= 1" in result.stderr.str()
    fake.makepyfile(test_b='''
import pytest
@pytest.mark.llm_procedure("5.99", slo=["latency <= 1s"])
def test_x(llm_result):
    pass
''')
    result = fake.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "latency" in result.stderr.str()


def test_dry_run_and_collect_only_print_the_plan_and_send_nothing(fake: pytest.Pytester) -> None:
    fake.makepyfile(test_c='''
import pytest
@pytest.mark.llm_procedure("5.99", size=7)
def test_x(llm_result):
    pass
''')
    result = fake.runpytest_subprocess("-p", "no:cacheprovider", "--llm-dry-run")
    assert "5.99 Fake procedure: ~7 requests" in result.stdout.str()
    assert not (fake.path / "runs.txt").exists()
    result = fake.runpytest_subprocess("-p", "no:cacheprovider", "--collect-only")
    assert "~7 requests" in result.stdout.str() and not (fake.path / "runs.txt").exists()


def test_configuration_hook_user_implementation_wins(fake: pytest.Pytester) -> None:
    fake.makepyfile(test_d='''
import pytest
@pytest.mark.llm_procedure("5.99")
def test_x(llm_result):
    assert llm_result.measurements["switched"] is False
''')
    with open(fake.path / "conftest.py", "a") as f:
        f.write('''
import pytest
@pytest.hookimpl(tryfirst=True)
def pytest_llmbench_configure_sut(sut, setting, value):
    return False  # "cannot switch": falls through? no: firstresult takes the first non-None
''')
    result = fake.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_xdist_worker_refuses_load_tests(fake: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    fake.makepyfile(test_e='''
import pytest
@pytest.mark.llm_procedure("5.99")
def test_x(llm_result):
    pass
''')
    result = fake.runpytest_subprocess("-p", "no:cacheprovider", "-n", "1")
    assert "cannot run in parallel under pytest-xdist" in result.stdout.str()


def test_unreachable_endpoint_is_one_clear_message(fake: pytest.Pytester) -> None:
    fake.makepyfile(test_f='''
import pytest
@pytest.mark.llm_procedure("5.99")
def test_x(llm_result):
    pass
@pytest.mark.llm_procedure("5.99", size=2)
def test_y(llm_result):
    pass
''')
    result = fake.runpytest_subprocess("-p", "no:cacheprovider", "--llm-endpoint", "http://127.0.0.1:9/v1",
                                       "--llm-boundary", "gateway")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "endpoint http://127.0.0.1:9/v1 is not reachable" in out
    assert out.count("is not reachable") == 1 and "Traceback" not in out


def test_real_endpoint_without_boundary_is_refused(fake: pytest.Pytester) -> None:
    fake.makepyfile(test_g='''
import pytest
@pytest.mark.llm_procedure("5.99")
def test_x(llm_result):
    pass
''')
    result = fake.runpytest_subprocess("-p", "no:cacheprovider", "--llm-endpoint", "http://127.0.0.1:9/v1")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "SUT boundary must be declared" in out
