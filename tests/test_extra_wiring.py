"""Issue 19 wiring through the plugin: --llm-export aiperf writes AIPerf's files next to each measured
run's records, --llm-http-trace fills record.http_trace and the http_* columns; bad values are named."""

from __future__ import annotations

import json

import pytest

from pytest_llmbench.client import ClientConfig
from pytest_llmbench.settings import LLMBenchConfigError, resolve

TEST_5_1 = '''
import pytest
from pytest_llmbench import poisson

@pytest.mark.llm_procedure("5.1", load=poisson(rate=80), requests=12, warmup_requests=4, warmup_tokens=10,
                           warmup_probes=0, max_output_tokens=8)
def test_ttft(llm_result):
    assert llm_result.metrics.scalars["request_count"].value == 12
'''


def test_export_aiperf_and_http_trace_through_the_plugin(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x=TEST_5_1)
    pytester.makeini("[pytest]\nllm_export = aiperf\n")  # the ini key, as a user's pytest.ini would set it
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-report", "rep", "--llm-http-trace")
    result.assert_outcomes(passed=1)
    runs = [p for p in (pytester.path / "rep").rglob("records.jsonl") if "warmup" not in str(p.parent)]
    assert runs, "no measured run directory"
    run_dir = runs[0].parent
    export = run_dir / "aiperf"
    assert {p.name for p in export.iterdir()} == {"profile_export.jsonl", "profile_export_aiperf.json",
                                                  "profile_export_aiperf.csv"}
    lines = (export / "profile_export.jsonl").read_text().splitlines()
    assert len(lines) == 12
    first = json.loads(lines[0])
    assert first["metrics"]["http_req_waiting"]["value"] > 0  # traced: TTFB present in the export
    records = [json.loads(x) for x in runs[0].read_text().splitlines()]
    traced = [r for r in records if r.get("http_trace")]
    assert len(traced) == len(records)
    doc = json.loads((pytester.path / "rep" / "results.json").read_text())
    proc = doc["procedures"][0]
    assert proc["experience"][0]["values"]["token_weighted_goodput"]["unit"] == "tokens/s"
    assert {"goodput", "token_weighted_goodput", "fluid_token_rate"} <= set(doc["metrics"]) | {"goodput"}
    waiting = next(r for r in proc["http_timing"] if r["metric"] == "http_waiting")
    assert waiting["aiperf"] == "http_req_waiting" and waiting["n"] == 12 and waiting["percentiles"]["p50"] > 0
    md = (pytester.path / "rep" / "report.md").read_text()
    assert "Token-weighted goodput" in md and "Fluid token rate" in md and "HTTP timing" in md
    assert "http_req_waiting" in (pytester.path / "rep" / "report.html").read_text()


def test_without_the_flags_nothing_is_traced_or_exported(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x=TEST_5_1)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-report", "rep")
    result.assert_outcomes(passed=1)
    runs = [p for p in (pytester.path / "rep").rglob("records.jsonl") if "warmup" not in str(p.parent)]
    assert runs and not (runs[0].parent / "aiperf").exists()
    assert not any(json.loads(x).get("http_trace") for x in runs[0].read_text().splitlines())
    assert "HTTP timing" not in (pytester.path / "rep" / "report.md").read_text()


def _resolve(cli: dict[str, object], env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return resolve(lambda dest: cli.get(dest), lambda ini: None, env or {})


def test_export_and_http_trace_settings() -> None:
    s = _resolve({"llm_export": ["AIPerf"], "llm_http_trace": True})
    assert s.export == ["aiperf"] and s.http_trace
    s = _resolve({}, {"LLMBENCH_EXPORT": "aiperf", "LLMBENCH_HTTP_TRACE": "yes"})
    assert s.export == ["aiperf"] and s.http_trace
    assert s.sources["export"] == "LLMBENCH_EXPORT environment variable"
    with pytest.raises(LLMBenchConfigError, match=r"--llm-export: unknown export format 'genai-perf'; known: aiperf"):
        _resolve({"llm_export": ["aiperf,genai-perf"]})


def test_http_trace_needs_the_aiohttp_transport() -> None:
    with pytest.raises(ValueError, match=r"--llm-http-trace\) needs transport 'aiohttp'.*'httpx'"):
        ClientConfig(base_url="http://127.0.0.1:1/v1", model="m", transport="httpx", http_trace=True)
    assert ClientConfig(base_url="http://127.0.0.1:1/v1", model="m", http_trace=True).http_trace
