"""Secrets and sensitive data (§7): the API key never leaves the environment variable that holds it.

A freshly generated key is planted in a variable named with ``--llm-api-key-env``; the fault
server demands it (and counts that it got it), and one fault echoes it back in a 401 body. Then
every artefact of the session is searched for it: the report directory recursively, the JUnit
XML, the log file and the captured stdout/stderr with DEBUG logging on. Completion and prompt text
never reach the logs. TLS is verified unless ``--llm-insecure``, which the report records.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultserver import (
    COMPLETION_MARK,
    MODEL,
    FaultServer,
    self_signed_cert,
    start_fault_server,
)

from pytest_llmbench.client import ClientConfig, LLMClient
from pytest_llmbench.common.records import ErrorType, RequestSpec
from pytest_llmbench.common.storage import iter_records
from pytest_llmbench.common.tokenizer import get_tokenizer
from pytest_llmbench.workloads import build_workload

KEY_ENV = "LLMB_GATEWAY_AUTH"  # deliberately not a name the report's generic scrubber recognises

SUITE = '''
import json, logging
import pytest
from pytest_llmbench.procedures.loads import poisson

log = logging.getLogger("suite")

@pytest.mark.llm_procedure("5.1", load=poisson(rate=60), requests=40, warmup_requests=6, warmup_tokens=20,
                           slo=["success_rate >= 99%"])
def test_ttft(llm_result):
    log.debug("result %s", json.dumps(llm_result.to_json(), default=str)[:2000])
    print("measurements", llm_result.measurements)
'''


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    value = "sk-llmb-" + secrets.token_hex(20)
    monkeypatch.setenv(KEY_ENV, value)
    return value


@pytest.fixture
def auth_server(key: str) -> Iterator[FaultServer]:
    srv = start_fault_server(mix={"auth_echo": 0.15, "http_500": 0.05, "reset": 0.05}, seed=9, cap=6, api_key=key)
    yield srv
    srv.stop()


def leaks(text: str | bytes, key: str) -> list[str]:
    """The key, or any 12-character piece of its random part, found in ``text``."""
    data = text.encode() if isinstance(text, str) else text
    pieces = [key] + [key[i:i + 12] for i in range(8, len(key) - 12, 6)]
    return [p for p in pieces if p.encode() in data]


def test_api_key_appears_in_no_artefact(pytester: pytest.Pytester, key: str, auth_server: FaultServer) -> None:
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-v", "-rA", "--llm-endpoint", auth_server.url, "--llm-boundary", "gateway",
        "--llm-api-key-env", KEY_ENV, "--llm-report", "rep", "--junitxml", "junit.xml",
        "--log-level=DEBUG", "-o", "log_cli=true", "--log-file", "debug.log", "--log-file-level=DEBUG",
    )
    stdout, stderr = result.stdout.str(), result.stderr.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, stdout  # the SLO fails: ~25 % of requests fail
    assert "Success rate" in stdout and "< 99%" in stdout

    # the server got the key on every request (models list, probes, warm-up, measurement)
    auth = auth_server.stats()["auth"]
    assert auth.get("ok", 0) >= 40 + 6 and not auth.get("wrong") and not auth.get("missing")

    # the 401 bodies that echoed it were kept, redacted
    report = pytester.path / "rep"
    echoed = [r for f in report.glob("runs/*/*/records.jsonl") for r in iter_records(f.parent)
              if r.status == 401]
    assert echoed and all(r.error_type is ErrorType.HTTP_4XX for r in echoed)
    assert all("Incorrect API key provided: Bearer ***" in r.error_message for r in echoed)

    # every file the session wrote, and everything it printed
    files = [p for p in pytester.path.rglob("*") if p.is_file()]
    names = {p.name for p in files}
    assert {"results.json", "report.md", "report.html", "run.json", "records.jsonl", "junit.xml",
            "debug.log"} <= names
    found = {str(p.relative_to(pytester.path)): leaks(p.read_bytes(), key) for p in files}
    assert not any(found.values()), {k: v for k, v in found.items() if v}
    assert not leaks(stdout, key) and not leaks(stderr, key)
    assert "DEBUG" in stdout and (pytester.path / "debug.log").stat().st_size > 0  # logging was really on

    # the report names the variable, never its value
    doc = json.loads((report / "results.json").read_text(encoding="utf-8"))
    assert doc["sut"]["api_key_env"] == KEY_ENV and doc["settings"]["api_key_env"] == KEY_ENV

    # no completion or prompt text in the logs (records are data and may keep text; logs never)
    logs = stdout + stderr + (pytester.path / "debug.log").read_text(encoding="utf-8")
    assert COMPLETION_MARK.strip() not in logs
    prompt = build_workload("synthetic-uniform", n=40, seed=42, tokenizer=get_tokenizer()).specs[0].prompt_text
    assert prompt[:60] not in logs and prompt[-60:] not in logs


async def test_client_redacts_the_key_from_every_error_message(key: str, auth_server: FaultServer) -> None:
    """A 401 that echoes the key, with the key also in a ``{"error"}`` event: stored messages are redacted."""
    cfg = ClientConfig(base_url=auth_server.url, model=MODEL, api_key_env=KEY_ENV, extra_body={"fault": "auth_echo"})
    assert key not in repr(cfg) and key not in json.dumps(cfg.describe())
    spec = RequestSpec(index=0, workload="s", input_tokens=3, max_tokens=4, prompt_text="hi")
    async with LLMClient(cfg) as c:
        assert key not in repr(c) and key not in json.dumps(c.describe(), default=str)
        r = await c.send(spec)
    assert r.status == 401 and r.error_message == "HTTP 401: Incorrect API key provided: Bearer ***"
    assert not leaks(r.dumps(), key)
    # a wrong key is refused by the server: the record says so without the key
    async with LLMClient(ClientConfig(base_url=auth_server.url, model=MODEL)) as c:
        r = await c.send(spec)
    assert r.error_type is ErrorType.HTTP_4XX and "invalid API key" in r.error_message
    assert auth_server.stats()["auth"]["missing"] == 1


def test_wrong_key_is_one_clear_message(pytester: pytest.Pytester, key: str, auth_server: FaultServer,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "sk-not-the-right-one-" + secrets.token_hex(8))
    wrong = __import__("os").environ[KEY_ENV]
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-endpoint", auth_server.url,
                                           "--llm-boundary", "gateway", "--llm-api-key-env", KEY_ENV)
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "refused the credentials (HTTP 401 on /models)" in out and out.count("refused the credentials") == 1
    assert "Traceback" not in out and wrong not in out and not leaks(out, key)
    assert auth_server.stats()["requests"] == 0  # not a single completion request was sent


def _tls_suite(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite='''
import pytest
from pytest_llmbench.procedures.loads import poisson

@pytest.mark.llm_procedure("5.1", load=poisson(rate=80), requests=20, warmup_requests=4, warmup_tokens=10)
def test_ttft(llm_result):
    pass
''')


def test_tls_verified_by_default_and_insecure_is_recorded(pytester: pytest.Pytester, tmp_path: Path) -> None:
    cert = self_signed_cert(tmp_path)
    srv = start_fault_server(cap=4, tls=cert)
    try:
        _tls_suite(pytester)
        args = ["-p", "no:cacheprovider", "--llm-endpoint", srv.url, "--llm-boundary", "gateway"]
        # verification on: the self-signed certificate is refused up front, one message
        result = pytester.runpytest_subprocess(*args, "--llm-report", "strict")
        out = result.stdout.str() + result.stderr.str()
        assert result.ret == pytest.ExitCode.USAGE_ERROR and "is not reachable" in out
        assert "CERTIFICATE_VERIFY_FAILED" in out and "Traceback" not in out
        assert srv.stats()["requests"] == 0
        # --llm-insecure: the run works and the report says verification was off
        result = pytester.runpytest_subprocess(*args, "--llm-insecure", "--llm-report", "insecure")
        result.assert_outcomes(passed=1)
        doc = json.loads((pytester.path / "insecure" / "results.json").read_text(encoding="utf-8"))
        assert doc["settings"]["insecure"] is True and doc["sut"]["verify_tls"] is False
        assert doc["sut"]["base_url"].startswith("https://")
        assert "| TLS verification | off |" in (pytester.path / "insecure" / "report.md").read_text(encoding="utf-8")
        assert srv.stats()["requests"] >= 20
    finally:
        srv.stop()


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
async def test_client_verifies_tls_unless_told_not_to(tmp_path: Path, transport: str) -> None:
    srv = start_fault_server(cap=4, tls=self_signed_cert(tmp_path))
    try:
        spec = RequestSpec(index=0, workload="s", input_tokens=3, max_tokens=4, prompt_text="hi")
        cfg = ClientConfig(base_url=srv.url, model=MODEL, transport=transport)
        assert cfg.verify_tls is True  # the default
        async with LLMClient(cfg) as c:
            r = await c.send(spec)
        assert r.error_type is ErrorType.CONNECT and "CERTIFICATE_VERIFY_FAILED" in r.error_message
        async with LLMClient(ClientConfig(base_url=srv.url, model=MODEL, transport=transport, verify_tls=False)) as c:
            r = await c.send(spec)
        assert r.ok, r.error_message
    finally:
        srv.stop()
