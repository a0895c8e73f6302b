"""Stop when decided against the embedded simulator (issue 47 item 3): a 5.1 run planned for 2,000 requests
with ``stop_when_decided=True`` ends at an early look once its SLOs are settled, PASS for ``ttft.p99 <= 10s``
(far above every TTFT of the simulator), FAIL for ``ttft.p50 <= 1ms`` (below its P50); a stopped run is
unmet on 5.1.2-MUST-2 and says ``stopped: decided`` with the look, in its result, its run and its test.
The error control of the looks is tests/test_slo_sequential.py's (a seeded simulation, no network).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

PLANNED = 2000

TESTS = f'''
import pytest
from pytest_llmbench import poisson

RUN = dict(workload="synthetic-uniform", requests={PLANNED}, load=poisson(rate=40), max_output_tokens=16)

@pytest.mark.llm_procedure("5.1", slo=["ttft.p99 <= 10s"], stop_when_decided=True, **RUN)
def test_far_above(llm_result):
    pass

@pytest.mark.llm_procedure("5.1", slo=["ttft.p50 <= 1ms"], stop_when_decided=True, **RUN)
def test_below_the_median(llm_result):
    pass

@pytest.mark.llm_procedure("5.1", slo=["ttft.p99 <= 10s"], stop_when_decided=True, **RUN)
def test_same_slos_same_run(llm_result):
    assert llm_result.measurements["stopped"] == "decided"
'''


def _proc(doc: dict[str, Any], slo: str) -> dict[str, Any]:
    return next(p for p in doc["procedures"] if slo in p["key"])


def test_a_run_stops_early_with_pass_far_from_the_threshold_and_with_fail_below_the_median(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_stop=TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-report", "rep", "--llm-max-duration", "0",
                                           "--junitxml", "j.xml")
    result.assert_outcomes(passed=2, failed=1)
    doc = json.loads((pytester.path / "rep" / "results.json").read_text())
    assert len(doc["procedures"]) == 2  # the SLOs are in the run's key: one run per set of SLOs
    for slo, verdict in (("ttft.p99 <= 10s", "PASS"), ("ttft.p50 <= 1ms", "FAIL")):
        p = _proc(doc, slo)
        m = p["result"]["measurements"]
        assert m["stopped"] == "decided" and m["stopped_at_look"] < PLANNED
        assert m["requests"] < PLANNED / 2  # far fewer than planned; the in-flight ones finished and count
        assert m["requests"] >= m["stopped_at_look"]
        (run,) = [r for r in p["result"]["runs"] if r["label"] == "measure"]
        assert run["extra"]["stopped"] == "decided" and run["extra"]["stopped_at_look"] == m["stopped_at_look"]
        meta = json.loads((pytester.path / "rep" / run["run_dir"] / "run.json").read_text())
        assert meta["parameters"]["stopped"] == "decided"
        assert meta["loads"][0]["parameters"]["stop_predicate"] is True
        unmet = {u["id"]: u for u in p["compliance"]["unmet"]}
        assert "5.1.2-MUST-2" in unmet and f"{m['requests']} sent" in unmet["5.1.2-MUST-2"]["reason"]
        assert any(n.startswith("Stopped when decided") for n in p["result"]["notes"])
        t = next(t for t in doc["tests"] if t["result_key"] == p["key"])
        (r,) = t["slo_results"]
        assert r["outcome"] == verdict and r["look"] == m["stopped_at_look"] and r["judged"] <= r["look"]
        assert "[sequential: look" in r["message"]
        # issue 47 (g): the run keeps each look's bounds, and report.html draws them (report/looks.py)
        (trace,) = run["extra"]["look_trace"]
        last = trace["points"][-1]
        assert trace["slo"] == slo and last["look"] == m["stopped_at_look"] == trace["run_stopped_at"]
        assert last["verdict"] == verdict
        assert (last["upper"] < last["limit"]) if verdict == "PASS" else (last["lower"] > last["limit"])
    html = (pytester.path / "rep" / "report.html").read_text()
    assert html.count('data-kind="slo-looks"') == 2 and "SLO bounds at each look" in html
    fail = _proc(doc, "ttft.p50 <= 1ms")["result"]["measurements"]
    assert fail["stopped_at_look"] <= 64  # every request beyond 1 ms: a handful decide a P50
    out = result.stdout.str()
    assert "FAIL at" in out and "TTFT P50" in out


def test_searches_ignore_stop_when_decided_and_say_so(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_stop='''
import pytest

@pytest.mark.llm_procedure("5.2", slo=["ttft.p50 <= 2s"], stop_when_decided=True)
def test_search(llm_result):
    pass

@pytest.mark.llm_procedure("5.1", slo=["ttft.p50 <= 2s"], stop_when_decided="yes")
def test_bad(llm_result):
    pass
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-dry-run", "-k", "search")
    assert "procedure 5.2 (Output Token Throughput) has no single measured run to stop" in result.stdout.str()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-dry-run")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "stop_when_decided='yes') must be True or False" in result.stderr.str()


def test_the_runner_takes_a_look_once_all_of_its_requests_have_finished() -> None:
    """procedures/stopping.StopWhenDecided on stored records, out of order: requests sent past the first look
    finish before one of the look's; the look is judged only when that one finishes, on exactly its
    requests, and the run's verdict is the look's (n = the look), whatever came after."""
    import asyncio
    from types import SimpleNamespace

    from factories import make_record

    from pytest_llmbench.measure.summary import summarize
    from pytest_llmbench.procedures.base import StopRequest
    from pytest_llmbench.procedures.stopping import StopWhenDecided

    st = StopWhenDecided(StopRequest(("ttft.p99 <= 1s",)), planned=PLANNED)
    first = st.looks[0]
    assert first == 437 and st.looks[-1] == PLANNED  # 4 looks at 98.75 % (5 % over 4), the first where 0 of n decide
    sent = [spec.index for spec in st.specs(SimpleNamespace(index=i) for i in range(first + 40))]
    assert sent == list(range(first + 40))
    records = {i: make_record(i, sent=20 * i, ttft=50, itl=5, text=["a", "b"], n_chunks=2, max_tokens=2,
                              input_tokens_client=100, output_tokens_client=2) for i in sent}

    async def run() -> None:
        for i in sent:  # every request but the look's 7th, those after the look too
            if i != 6:
                st.on_record(records[i])
        await asyncio.sleep(0.05)
        assert st.decision is None and not st(SimpleNamespace(in_flight=1))  # the look waits for its last one
        st.on_record(records[6])
        await st.finish()

    asyncio.run(run())
    assert st.stopped and st.stopped_at == first and st(SimpleNamespace(in_flight=0))
    info = st.run_info()
    trace = info.pop("look_trace")  # the look's bounds (issue 47: report/looks.py draws them)
    assert info == {"stopped": "decided", "stop_slos": ["ttft.p99 <= 1s"], "looks": st.looks, "stopped_at_look": first}
    assert [(p["look"], p["verdict"], p["exceedances"]) for p in trace[0]["points"]] == [(first, "PASS", 0.0)]
    ((r, n),) = st.verdicts(summarize(records.values()), len(sent)).values()
    assert r.passed and n == first and (r.n, r.exceedances) == (first, 0)
    assert f"look 1 of 4 at {first:,} requests" in r.message
