"""A report directory used by a second session holds that session's run records only: a run
directory of the same name left by the earlier session is replaced, never appended to (before,
``records.jsonl`` grew by the earlier run's records, and ``--llm-compare`` then pooled the baseline's
requests into the new side)."""

from __future__ import annotations

import json

import pytest

SMOKE_51 = '''
import pytest
from pytest_llmbench import poisson

@pytest.mark.llm_procedure("5.1", load=poisson(rate=80), requests=30, warmup_requests=4, warmup_tokens=10)
def test_ttft(llm_result):
    assert llm_result.metrics is not None
'''


def _measured(rep) -> list[dict]:
    doc = json.loads((rep / "results.json").read_text(encoding="utf-8"))
    (proc,) = doc["procedures"]
    (run,) = [r for r in proc["result"]["runs"] if r["label"] == proc["result"]["primary_run"]]
    lines = (rep / run["run_dir"] / "records.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def test_a_second_session_replaces_the_run_directory(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_smoke=SMOKE_51)
    args = ("-p", "no:cacheprovider", "--llm-profile", "smoke", "--llm-report", "rep")
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=1)
    first = _measured(pytester.path / "rep")
    pytester.runpytest_subprocess(*args, "--llm-seed", "7").assert_outcomes(passed=1)
    second = _measured(pytester.path / "rep")
    assert len(first) == len(second) == 30
    assert sorted(r["index"] for r in second) == list(range(30))
    assert {r["prompt_hash"] for r in second}.isdisjoint({r["prompt_hash"] for r in first})  # the new seed's prompts only
