"""Options, ini keys and environment variables: precedence and errors naming their source."""

from __future__ import annotations

import pytest


def _header(pytester: pytest.Pytester, *args: str) -> str:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess(*args)
    return result.stdout.str()


def test_defaults_in_report_header(pytester: pytest.Pytester) -> None:
    out = _header(pytester)
    assert "llmbench: endpoint=embedded simulator" in out
    assert "profile=smoke" in out and "boundary=model-engine" in out and "seed=42" in out


def test_precedence_cli_over_env_over_ini(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\nllm_profile = full\nllm_seed = 7\n")
    assert "profile=full" in _header(pytester) and "seed=7" in _header(pytester)
    monkeypatch.setenv("LLMBENCH_PROFILE", "standard")
    assert "profile=standard" in _header(pytester)
    assert "profile=smoke" in _header(pytester, "--llm-profile=smoke")


@pytest.mark.parametrize(
    ("args", "env", "ini", "message"),
    [
        (["--llm-profile=fast"], {}, "", "--llm-profile: invalid value 'fast'"),
        ([], {"LLMBENCH_SEED": "abc"}, "", "LLMBENCH_SEED environment variable: invalid value 'abc'"),
        ([], {}, "llm_boundary = edge\n", "ini llm_boundary: invalid value 'edge'"),
        (["--llm-endpoint=localhost:8000"], {}, "", "must start with http://, https://, grpc:// or grpcs://"),
        (["--llm-api-key-env=NO_SUCH_VAR_LLMBENCH"], {}, "", "'NO_SUCH_VAR_LLMBENCH'"),
        (["--llm-capacity=lots"], {}, "", "capacity 'lots' must be"),
        (["--llm-time-scale=-1"], {}, "", "must not be negative"),
    ],
)
def test_bad_values_name_their_source(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                      args: list[str], env: dict[str, str], ini: str, message: str) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    if ini:
        pytester.makeini("[pytest]\n" + ini)
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
    assert "Traceback" not in result.stderr.str()


def test_real_endpoint_requires_boundary_declaration() -> None:
    from pytest_llmbench.settings import resolve

    s = resolve(lambda name: {"llm_endpoint": "http://127.0.0.1:9/v1"}.get(name), lambda name: None, environ={})
    assert s.endpoint == "http://127.0.0.1:9/v1" and s.boundary is None and not s.embedded


def test_api_key_value_never_in_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_llmbench.settings import resolve

    monkeypatch.setenv("MY_KEY", "sk-planted-secret")
    s = resolve(lambda name: {"llm_api_key_env": "MY_KEY"}.get(name), lambda name: None)
    assert s.api_key_env == "MY_KEY"
    assert "sk-planted-secret" not in repr(s.to_json())


@pytest.mark.parametrize(("cli", "env", "fragment"), [
    ({"llm_profile": "huge"}, {}, "--llm-profile: invalid value 'huge' for profile"),
    ({}, {"LLMBENCH_TIMEOUT": "0"}, "LLMBENCH_TIMEOUT environment variable: invalid value 0.0 for timeout"),
    ({"llm_capacity": "lots"}, {}, "--llm-capacity: capacity 'lots' must be"),
])
def test_resolution_raises_the_library_error_naming_the_source(cli: dict[str, str], env: dict[str, str],
                                                               fragment: str) -> None:
    """Below the glue a bad value is an LLMBenchConfigError (a ValueError, no pytest); the plugin makes it a
    UsageError with the same message."""
    from pytest_llmbench.settings import LLMBenchConfigError, resolve

    with pytest.raises(LLMBenchConfigError) as exc:
        resolve(cli.get, lambda name: None, environ=env)
    assert fragment in str(exc.value)
    assert isinstance(exc.value, ValueError) and not isinstance(exc.value, pytest.UsageError)
