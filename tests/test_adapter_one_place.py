"""A new server kind is one adapter module (issue 45, item 2; review 3 §5c: before, an SGLang-shaped
adapter touched 5 files at least, 7-9 with its own tokenize form, flush and counters).

:data:`MODULE` is the whole of a throw-away SGLang-shaped server kind, written as a file of
``sut/adapters/`` would be: its detection, its tokenize form at paths of its own (``/sgl/tokenize``,
a detokenize answer under ``text``), its cache flush (``/sgl/flush_cache``), its metrics page
(``/sgl/metrics``) and counters by role. Loaded into the package (it registers itself), it is
detected on a loopback fake server, flushes the cache, and runs through the plugin's own prompt
plan, client (``client_for``), prompt fitting (``prefit``) and telemetry: the server gets only its own
token ids at the intended lengths. Written into a copy of the package, the folder's discovery finds it
(``KINDS``, the ``--llm-server-kind`` choices), and a file of ``tests/data/servers/`` is all the
offline adapter tests need of it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from vocabserver import VOCAB, VocabServer, tokenize

from pytest_llmbench.common.seeds import Seeds
from pytest_llmbench.common.tokenizer import get_tokenizer
from pytest_llmbench.loadgen.warmup import scrape_for
from pytest_llmbench.measure.telemetry import TelemetrySampler
from pytest_llmbench.procedures import prompts
from pytest_llmbench.procedures.run import client_for
from pytest_llmbench.sut import adapters
from pytest_llmbench.sut.system import SUT, identify_server
from pytest_llmbench.workloads import build_workload

PACKAGE = Path(__file__).resolve().parents[1] / "pytest_llmbench"
NAME = "pytest_llmbench.sut.adapters.sglang_like"

MODULE = '''"""A throw-away SGLang-shaped server kind (tests/test_adapter_one_place.py)."""

from __future__ import annotations

from typing import Any

from .base import Fetch, ServerAdapter, TokenizeForm, models_tokenizer, register, sut_post

#: its tokenize endpoints: vLLM's request shape at paths of its own, the detokenized text under "text"
FORM = TokenizeForm("sglang-like", tokenize_path="/sgl/tokenize", detokenize_path="/sgl/detokenize",
                    detokenized_key="text")


class SGLangLikeAdapter(ServerAdapter):
    def probe(self, fetch: Fetch) -> str | None:
        status, body = fetch("/get_model_info")
        if status == 200 and isinstance(body, dict) and "model_path" in body:
            return "/get_model_info has model_path"
        return None

    def describe(self, fetch: Fetch) -> dict[str, Any]:
        info: dict[str, Any] = {}
        status, body = fetch("/get_model_info")
        if status == 200 and isinstance(body, dict) and isinstance(body.get("context_length"), int):
            info["context_window"] = body["context_length"]
            info["context_window_source"] = "/get_model_info context_length"
        info.update(models_tokenizer(fetch))
        return info

    def configure(self, sut: Any, setting: str, value: Any) -> bool | None:
        if setting == "flush_prefix_cache" and value:
            r = sut_post(sut, "/sgl/flush_cache")
            sut.server_info["flush_prefix_cache"] = f"POST /sgl/flush_cache answered {r.status_code}"
            return True if r.status_code < 400 else None
        return None


SGLANG_LIKE = register(SGLangLikeAdapter(
    kind="sglang-like", title="An SGLang-shaped server", owned_by=("sglang-like",),
    metrics={"waiting": ("sgl_like:num_queue_reqs",), "running": ("sgl_like:num_running_reqs",),
             "requests_finished": ("sgl_like:num_requests_total",)},
    metrics_path="/sgl/metrics",
    tokenize_forms=(FORM,),
    honours=("ignore_eos", "min_tokens", "token-id prompts"),
    documented="tests/test_adapter_one_place.py (a fake server)",
))
'''

FIXTURE = {
    "kind": "sglang-like",
    "_source": "tests/test_adapter_one_place.py: the fake server's answers",
    "responses": {
        "/v1/models": {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "sglang-like"}]},
        "/get_model_info": {"model_path": "/models/m", "context_length": 4096},
    },
    "metrics": "# TYPE sgl_like:num_queue_reqs gauge\nsgl_like:num_queue_reqs 0\n"
               "# TYPE sgl_like:num_running_reqs gauge\nsgl_like:num_running_reqs 1\n",
    "expect": {"context_window": 4096, "waiting": 0.0, "running": 1.0},
}


@dataclass
class SGLangLikeServer(VocabServer):
    """A loopback SGLang-shaped server (tests/vocabserver.py's machinery): its own tokenize paths (one id
    per two characters), flush, metrics page, and streamed completions whose usage counts the prompt
    it received."""

    calls: list[str] = field(default_factory=list)  # "METHOD path" of every request, in order
    users: list[str] = field(default_factory=list)  # chat: the user message received
    finished: int = 0

    def routes(self, app: web.Application) -> None:
        app.router.add_route("*", "/{tail:.*}", self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        self.calls.append(f"{request.method} {path}")
        body = await request.json() if request.method == "POST" and request.can_read_body else {}
        if path == "/v1/models":
            return web.json_response(FIXTURE["responses"]["/v1/models"])
        if path == "/get_model_info":
            return web.json_response(FIXTURE["responses"]["/get_model_info"])
        if path == "/sgl/tokenize":
            ids = tokenize(str(body.get("prompt", "")))
            return web.json_response({"tokens": ids, "count": len(ids)})
        if path == "/sgl/detokenize":
            return web.json_response({"text": "xy" * len(body.get("tokens") or [])})
        if path == "/sgl/flush_cache":
            self.flushes += 1
            return web.Response(status=200)
        if path == "/sgl/metrics":
            return web.Response(text=FIXTURE["metrics"] + "# TYPE sgl_like:num_requests_total counter\n"
                                f"sgl_like:num_requests_total {self.finished}\n")
        if path in ("/v1/completions", "/v1/chat/completions"):
            return await self.stream(request, body)
        return web.json_response({"detail": "Not Found"}, status=404)

    async def stream(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        if "messages" in body:
            self.users.append(body["messages"][-1]["content"])
            n_in = sum(len(tokenize(m["content"])) for m in body["messages"])
        else:
            prompt = body["prompt"]
            ids = [int(t) for t in prompt] if isinstance(prompt, list) else tokenize(str(prompt))
            self.prompts.append(ids)
            n_in = len(ids)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = int(body.get("max_tokens") or 4)
        for i in range(n):
            delta = {"text": " ok"} if "prompt" in body else {"delta": {"content": " ok"}}
            chunk = {"id": "c", "choices": [{"index": 0, **delta, "finish_reason": "length" if i == n - 1 else None}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        usage = {"prompt_tokens": n_in, "completion_tokens": n, "total_tokens": n_in + n}
        await resp.write(f"data: {json.dumps({'id': 'c', 'choices': [], 'usage': usage})}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        self.finished += 1
        return resp


@pytest.fixture
def sglang_like() -> Iterator[ModuleType]:
    """:data:`MODULE` loaded as ``sut/adapters/sglang_like.py`` (registering its adapter), then forgotten."""
    spec = importlib.util.spec_from_loader(NAME, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "pytest_llmbench.sut.adapters"
    sys.modules[NAME] = module
    try:
        exec(compile(MODULE, f"<{NAME}>", "exec"), module.__dict__)
        yield module
    finally:
        adapters.unregister("sglang-like")
        sys.modules.pop(NAME, None)
    assert "sglang-like" not in adapters.KINDS


@pytest.fixture
def server() -> Iterator[SGLangLikeServer]:
    with SGLangLikeServer() as s:
        yield s


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_an_sglang_shaped_adapter_runs_through_prompt_fitting(sglang_like: ModuleType, server: SGLangLikeServer,
                                                              api: str) -> None:
    assert adapters.KINDS[-1] == "openai-compatible" and "sglang-like" in adapters.KINDS
    sut = SUT(base_url=server.endpoint, model="m", api=api)
    identify_server(sut)
    assert sut.server_kind == "sglang-like" and sut.adapter is sglang_like.SGLANG_LIKE, sut.server_kind_source
    assert sut.server_info["context_window"] == 4096
    assert adapters.configure(sut, "flush_prefix_cache", True) is True and server.flushes == 1

    server.calls.clear()
    plan = prompts.plan_prompts(sut)
    assert plan.mode == "server-ids" and plan.tokenize_style == "sglang-like", plan
    assert "offers /sgl/tokenize (sglang-like form)" in plan.reason
    # every form any server is probed with (at /tokenize: 404 here), then the adapter's own
    assert server.calls == ["GET /v1/models", "POST /tokenize", "POST /tokenize", "POST /sgl/tokenize"]

    tok = get_tokenizer("cl100k_base")
    specs = list(build_workload("conversation", n=6, seed=Seeds(5, "one-place").derive("w"), tokenizer=tok).specs)
    ctx = SimpleNamespace(sut=sut, tokenizer=tok, progress=lambda line: None,
                          settings=SimpleNamespace(timeout=30.0, http_trace=False, refusal_codes=(),
                                                   refusal_pattern=None))

    async def run() -> tuple[list[Any], dict[str, Any], TelemetrySampler]:
        client = client_for(ctx)  # type: ignore[arg-type]
        async with client:
            sampler = TelemetrySampler(scrape_for(client), adapters.telemetry_names(sut.adapter), interval_s=0)
            await sampler.start()
            await prompts.prefit(client, ctx, specs[:3])  # the rest is fitted at its send
            recs = [await client.send(s) for s in specs]
            await sampler.stop()
            return recs, client.describe(), sampler

    recs, described, sampler = asyncio.run(run())
    assert [r.error_message for r in recs] == [None] * len(specs)
    assert described["prompt_mode"] == "server-ids (/sgl/tokenize, sglang-like form)"
    assert "POST /sgl/detokenize" in server.calls if api == "chat" else "POST /sgl/detokenize" not in server.calls
    if api == "completions":  # the server's own ids, exactly the intended length
        assert [len(p) for p in server.prompts] == [s.input_tokens for s in specs]
        assert all(r.input_tokens_server == s.input_tokens for r, s in zip(recs, specs))
        assert max(max(p) for p in server.prompts) < VOCAB
    else:  # the detokenized server ids as the user message
        assert len(server.users) == len(specs) and all(u and set(u) == {"x", "y"} for u in server.users)
    # its metrics page and counters by role
    assert sampler.series.path == "/sgl/metrics" and len(sampler.series.t_ns) == 2  # before and after
    assert sampler.series.names["requests_finished"] == "sgl_like:num_requests_total"
    assert sampler.series.increase("requests_finished") == len(specs)
    assert "sgl_like:num_requests_total" in adapters.metric_names("requests_finished")


def test_its_test_data_is_all_the_offline_adapter_tests_need(sglang_like: ModuleType, tmp_path: Path) -> None:
    """The parametrized tests of tests/test_adapters.py run on a new file of tests/data/servers/ as they are."""
    import test_adapters

    path = tmp_path / "sglang-like.json"
    path.write_text(json.dumps(FIXTURE), encoding="utf-8")
    test_adapters.test_detects_kind_and_describes(path)
    test_adapters.test_detects_without_owned_by(path)
    test_adapters.test_metric_roles(path)


def test_a_module_in_the_adapters_folder_is_found(tmp_path: Path) -> None:
    """Discovery by directory: the module, dropped into the folder, is a server kind and a CLI choice."""
    shutil.copytree(PACKAGE, tmp_path / "pytest_llmbench", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "pytest_llmbench" / "sut" / "adapters" / "sglang_like.py").write_text(MODULE, encoding="utf-8")
    code = ("import json; from pytest_llmbench.sut import adapters; from pytest_llmbench.options import CHOICES; "
            "print(json.dumps([adapters.KINDS, CHOICES['server-kind'], adapters.get_adapter('sglang-like').title]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={"PYTHONPATH": str(tmp_path), "PATH": str(Path(sys.executable).parent)})
    assert out.returncode == 0, out.stderr
    kinds, choices, title = json.loads(out.stdout)
    assert kinds == choices == ["llama.cpp", "sglang", "vllm", "openai", "sglang-like", "openai-compatible"]
    assert title == "An SGLang-shaped server"


def test_a_kind_is_registered_once() -> None:
    with pytest.raises(ValueError, match="'vllm' is registered already"):
        adapters.register(adapters.ServerAdapter(kind="vllm", title="another vLLM"))
    assert adapters.register(adapters.VLLM) is adapters.VLLM  # the same adapter again: nothing changes
    assert adapters.get_adapter("vllm") is adapters.VLLM and adapters.get_adapter("llama-server") is adapters.LLAMACPP
