"""Bad configuration is one clear message at the start, naming its source (never a traceback,
never a run of failed requests). Complements tests/test_settings.py (option values and their
sources) and tests/test_plugin.py (unreachable endpoint, undeclared boundary, unknown procedure
or parameter, bad SLO text).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from faultserver import FaultServer, start_fault_server

import pytest_llmbench.measure.slo

# imported here so that in-process pytester runs reuse them (numpy cannot be imported twice)
import pytest_llmbench.procedures
import pytest_llmbench.workloads  # noqa: F401

SUITE = '''
import pytest
from pytest_llmbench.procedures.loads import poisson

@pytest.mark.llm_procedure("5.1", load=poisson(rate=80), requests=20, warmup_requests=4, warmup_tokens=10{extra})
def test_ttft(llm_result):
    pass
'''

COMPLETE_TOML = '''
name = "support-chat"
[input_length]
type = "uniform"
min = 30
max = 60
unit = "tokens"
tokenizer = "cl100k_base"
[output_length]
type = "fixed"
value = 4
unit = "tokens"
control = "max_tokens"
[content]
domain = "conversation"
language = "English"
system_prompt = false
system_prompt_tokens = 0
[prefix_sharing]
fraction = 0
length = "none"
'''


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    srv = start_fault_server(cap=4)
    yield srv
    srv.stop()


def run(pytester: pytest.Pytester, srv: FaultServer | None, *args: str, extra: str = "",
        suite: str = SUITE, inprocess: bool = False) -> tuple[pytest.RunResult, str]:
    """Run the suite; usage errors that stop before any request can run in-process (faster)."""
    pytester.makepyfile(test_suite=suite.format(extra=extra))
    endpoint = ["--llm-endpoint", srv.url, "--llm-boundary", "gateway"] if srv is not None else []
    runner = pytester.runpytest_inprocess if inprocess else pytester.runpytest_subprocess
    result = runner("-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function", *endpoint, *args)
    return result, result.stdout.str() + result.stderr.str()


def completions_sent(srv: FaultServer) -> int:
    return srv.stats()["requests"]


def test_wrong_model_lists_what_the_endpoint_offers(pytester: pytest.Pytester, server: FaultServer) -> None:
    server.reset()
    result, out = run(pytester, server, "--llm-model", "gpt-nonexistent")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "model 'gpt-nonexistent' is not served by" in out and "it offers: fault-model, fault-model-large" in out
    assert out.count("is not served by") == 1 and "Traceback" not in out
    assert completions_sent(server) == 0 and not (pytester.path / "llmbench-report" / "runs").exists()


def test_empty_api_key_variable(pytester: pytest.Pytester, server: FaultServer,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMB_EMPTY_KEY", "")
    server.reset()
    result, out = run(pytester, server, "--llm-api-key-env", "LLMB_EMPTY_KEY")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--llm-api-key-env: environment variable 'LLMB_EMPTY_KEY'" in out and "is empty" in out
    assert "Traceback" not in out and completions_sent(server) == 0


def test_server_demanding_a_key_none_configured(pytester: pytest.Pytester) -> None:
    srv = start_fault_server(api_key="sk-required-" + "x" * 20)
    try:
        result, out = run(pytester, srv)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        assert "refused the credentials (HTTP 401 on /models)" in out and "--llm-api-key-env" in out
        assert "Traceback" not in out and completions_sent(srv) == 0
        assert srv.stats()["auth"] == {"missing": 1}  # one look at /models, then stop
    finally:
        srv.stop()


def test_endpoint_that_is_not_the_api_root(pytester: pytest.Pytester, server: FaultServer) -> None:
    pytester.makepyfile(test_suite=SUITE.format(extra=""))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-endpoint", server.root,  # no /v1
                                           "--llm-boundary", "gateway")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "answered HTTP 404 on GET /models" in out
    assert "Traceback" not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--llm-timeout=0"], "--llm-timeout: invalid value 0.0 for timeout: must be > 0 seconds"),
        (["--llm-tokenizer=hf:/no/such/tokenizer.json"], "--llm-tokenizer: Hugging Face tokenizer file"),
        (["--llm-tokenizer=bogus"], "--llm-tokenizer: tiktoken encoding 'bogus' is not available"),
    ],
)
def test_invalid_option_values(pytester: pytest.Pytester, server: FaultServer, args: list[str], message: str) -> None:
    server.reset()
    result, out = run(pytester, server, *args, inprocess=True)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out
    assert message in out and "Traceback" not in out
    assert completions_sent(server) == 0


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (', load="poisson"', "load must be poisson(...)"),
        (', requests="many"', "parameter requests='many' must be a number"),
        (', workload="synthetic-uniformm"', "unknown workload 'synthetic-uniformm': use one of synthetic-uniform"),
        (', workload="wl/missing.toml"', "workload spec file 'wl/missing.toml' does not exist"),
    ],
)
def test_invalid_marker_values(pytester: pytest.Pytester, server: FaultServer, extra: str, message: str) -> None:
    server.reset()
    marker = SUITE.replace("load=poisson(rate=80), requests=20, ", "")
    result, out = run(pytester, server, extra=extra, suite=marker, inprocess=True)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out
    assert "test_suite.py::test_ttft" in out and message in out, out
    assert "Traceback" not in out and completions_sent(server) == 0


def test_incomplete_custom_workload_names_the_file_and_every_missing_field(pytester: pytest.Pytester,
                                                                           server: FaultServer) -> None:
    wl = pytester.mkdir("wl")
    # drop [content] and the output control: three fields missing in all
    text = COMPLETE_TOML.split("[content]")[0].replace('control = "max_tokens"\n', "") + COMPLETE_TOML.split(
        "system_prompt_tokens = 0\n")[1]
    (wl / "incomplete.toml").write_text(text)
    server.reset()
    result, out = run(pytester, server, extra=', workload="wl/incomplete.toml"')
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out
    assert "wl/incomplete.toml: incomplete or invalid workload spec (§4.3.1)" in out
    for missing in ("output_length.control", "content"):
        assert missing in out
    assert out.count("incomplete or invalid workload spec") == 1 and "Traceback" not in out
    assert completions_sent(server) == 0
    # the complete file runs
    (wl / "complete.toml").write_text(COMPLETE_TOML)
    result, out = run(pytester, server, extra=', workload="wl/complete.toml"')
    result.assert_outcomes(passed=1)


def test_workload_error_while_running_is_a_clean_failure(pytester: pytest.Pytester, server: FaultServer) -> None:
    """A replayed request file that goes missing after collection (where it was read and found good,
    tests/test_inputs_first.py) fails its test with the file named, no traceback; the other tests of
    the session still run and the report is written."""
    (pytester.path / "saved").mkdir()
    (pytester.path / "saved" / "requests.jsonl").write_text(
        '{"index": 0, "workload": "w", "input_tokens": 4, "max_tokens": 4, "prompt_text": "hi"}\n', encoding="utf-8")
    pytester.makeconftest("import os\n\ndef pytest_collection_finish(session):\n"
                          "    os.remove('saved/requests.jsonl')\n")
    pytester.makepyfile(test_suite=SUITE.format(extra=', workload="saved/requests.jsonl"') + '''

@pytest.mark.llm_procedure("5.1", load=poisson(rate=80), requests=12, warmup_requests=4, warmup_tokens=10)
def test_other(llm_result):
    pass
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-endpoint", server.url,
                                           "--llm-boundary", "gateway")
    result.assert_outcomes(passed=1, errors=1)
    out = result.stdout.str()
    assert "workload error: request file 'saved/requests.jsonl' does not exist" in out
    assert "Traceback" not in out and "def run(" not in out  # pytrace=False: no source listing
    doc = json.loads((pytester.path / "llmbench-report" / "results.json").read_text(encoding="utf-8"))
    by_complete = {p["complete"]: p for p in doc["procedures"]}
    assert by_complete[True]["configuration"]["requests"] == 12
    assert by_complete[False]["configuration"]["requests"] == 0  # nothing measured, said so
