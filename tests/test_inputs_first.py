"""Every input checked before the first request (issue 46, item 2): a bad declarations file, marker
parameter, workload spec, request file or dataset file is a usage error at configure or collection
(pytest exit 4) naming the key or line, the file and the right form; no traceback, no ``runs/``, and
the server sees no completion request.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from faultserver import FaultServer, start_fault_server

# imported here so that in-process pytester runs reuse them (numpy cannot be imported twice)
import pytest_llmbench.procedures
import pytest_llmbench.workloads  # noqa: F401

SUITE = '''
import pytest
from pytest_llmbench.procedures.loads import poisson

@pytest.mark.llm_procedure("{proc}", {params}warmup_requests=4, warmup_tokens=10{extra})
def test_it(llm_result):
    pass
'''


@pytest.fixture(scope="module")
def server() -> Iterator[FaultServer]:
    srv = start_fault_server(cap=4)
    yield srv
    srv.stop()


def _run(pytester: pytest.Pytester, srv: FaultServer, *args: str, proc: str = "5.1",
         extra: str = "") -> tuple[pytest.RunResult, str, float]:
    srv.reset()
    params = "load=poisson(rate=80), requests=20, " if proc == "5.1" else ""
    pytester.makepyfile(test_suite=SUITE.format(proc=proc, params=params, extra=extra))
    t0 = time.monotonic()
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-endpoint", srv.url,
                                           "--llm-boundary", "gateway", *args)
    return result, result.stdout.str() + result.stderr.str(), time.monotonic() - t0


def _assert_usage_error(result: pytest.RunResult, out: str, srv: FaultServer, root: Path, *needles: str) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, out[-3000:]
    for needle in needles:
        assert needle in out, (needle, out[-3000:])
    assert "Traceback" not in out, out[-3000:]
    assert srv.stats()["requests"] == 0, srv.stats()  # no completion request reached the server
    assert not (root / "llmbench-report" / "runs").exists()


def test_a_declaration_of_the_wrong_type_stops_before_any_request(pytester: pytest.Pytester,
                                                                    server: FaultServer) -> None:
    """``model_loaded = "false"`` (a string, not a boolean): exit 4 at configure, within seconds; the
    same mistake used to cost 5.1's and 5.2's measurement (26 s) and end in two fixture ERRORs."""
    decl = pytester.path / "decl.toml"
    decl.write_text('model_loaded = "false"\n', encoding="utf-8")
    result, out, took = _run(pytester, server, "--llm-declarations", str(decl))
    _assert_usage_error(result, out, server, pytester.path, "model_loaded", "decl.toml", "not a boolean")
    assert took < 15, took


@pytest.mark.parametrize(("text", "needles"), [
    ('modle_loaded = true\n', ("unknown declaration 'modle_loaded'", "model_loaded")),  # a typo, with the keys
    ('[model]\nname = "..."\nversion = "1"\nquantization = "none"\n', ("placeholder", "'...'")),
])
def test_unknown_keys_and_placeholders_in_declarations(pytester: pytest.Pytester, server: FaultServer,
                                                       text: str, needles: tuple[str, ...]) -> None:
    decl = pytester.path / "decl.toml"
    decl.write_text(text, encoding="utf-8")
    result, out, _ = _run(pytester, server, "--llm-declarations", str(decl))
    _assert_usage_error(result, out, server, pytester.path, "decl.toml", *needles)


def test_declarations_in_pyproject_are_checked_too(pytester: pytest.Pytester, server: FaultServer) -> None:
    pytester.makefile(".toml", pyproject='[tool.llmbench.declarations]\nisolated_system = "yes please"\n')
    result, out, _ = _run(pytester, server)
    _assert_usage_error(result, out, server, pytester.path, "isolated_system", "pyproject.toml")


def test_a_bad_request_file_names_its_line(pytester: pytest.Pytester, server: FaultServer) -> None:
    requests = pytester.path / "replay.jsonl"
    requests.write_text('{"index": 0, "workload": "w", "input_tokens": 4, "max_tokens": 4, "prompt_text": "hi"}\n'
                        "not json\n", encoding="utf-8")
    result, out, _ = _run(pytester, server, extra=f", workload={str(requests)!r}")
    _assert_usage_error(result, out, server, pytester.path, "replay.jsonl:2", "not a request spec")


def test_a_missing_request_file(pytester: pytest.Pytester, server: FaultServer) -> None:
    result, out, _ = _run(pytester, server, extra=", workload='nowhere.jsonl'")
    _assert_usage_error(result, out, server, pytester.path, "request file 'nowhere.jsonl' does not exist")


def test_a_bad_workload_spec_file(pytester: pytest.Pytester, server: FaultServer) -> None:
    spec = pytester.path / "spec.toml"
    spec.write_text('name = "x"\n[input_length]\ntype = "uniform"\nmin = 30\n', encoding="utf-8")
    result, out, _ = _run(pytester, server, extra=f", workload={str(spec)!r}")
    _assert_usage_error(result, out, server, pytester.path, "spec.toml")


@pytest.mark.parametrize(("content", "needle"), [
    (None, "does not exist"),
    ('[{"conversations": [{"from": "human", "value": "hello there"}]}]', "no conversation with a human turn"),
    ("{not json", "not JSON or JSON Lines"),
])
def test_a_dataset_file_without_what_it_needs(pytester: pytest.Pytester, server: FaultServer,
                                              content: str | None, needle: str) -> None:
    """5.10 on the Conversation workload with the user's ShareGPT file (``workload_params``): a missing
    file, one without an assistant turn, one that is not JSON, each named before any request."""
    data = pytester.path / "sharegpt.json"
    if content is not None:
        data.write_text(content, encoding="utf-8")
    result, out, _ = _run(pytester, server, proc="5.10",
                          extra=f", workload_params={{'dataset': {str(data)!r}}}")
    _assert_usage_error(result, out, server, pytester.path, "sharegpt.json", needle)
