"""Prompt fitting sends the same requests as before (issue 45, item 2): what goes on the wire for both
``/tokenize`` forms (vLLM's ``{"prompt"}``, llama.cpp's ``{"content"}``), both APIs and two workloads
(shared prefixes, system prompts) against ``tests/data/prompt-fit-wire.json``, which was recorded from
the old path (``procedures/prompts.ServerPromptClient`` at 1c1b56e) with this same harness.

The harness goes through the plugin's own steps (``plan_prompts``, ``client_for``, ``prefit``, then
``send`` for prefitted specs and for specs fitted at the send), in process: the plan's probes and the
fitting calls through ``httpx.MockTransport``, the measured requests through the client's
``MockTransport``. Compared: every probe in order, every tokenize/detokenize call (as a sorted list:
they run concurrently), every measured body in send order (vLLM's fresh ``cache_salt`` masked, and
checked distinct), a request whose fitting fails, the client's description and the plan's reasons.
``LLMBENCH_RECORD_WIRE=1`` rewrites the file (only ever from the old path).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import zlib
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from pytest_llmbench import client as client_module
from pytest_llmbench.client import MockRequest, MockResponse, MockTransport
from pytest_llmbench.common.records import RequestRecord, RequestSpec
from pytest_llmbench.common.seeds import Seeds
from pytest_llmbench.common.tokenizer import get_tokenizer
from pytest_llmbench.procedures import prompts
from pytest_llmbench.procedures.run import client_for
from pytest_llmbench.sut.system import SUT
from pytest_llmbench.workloads import build_workload

GOLDEN = Path(__file__).parent / "data" / "prompt-fit-wire.json"
VOCAB = 32_000
KEY_ENV = "LLMBENCH_WIRE_TEST_KEY"
FAIL = "this text makes the tokenizer fail"
SALT = re.compile(r"llmbench-[0-9a-f]{32}")
FRESH = "llmbench-fresh-salt-per-request"  # vLLM's placeholder (sut/adapters/vllm/switch.py)
REAL_CLIENT, REAL_ASYNC_CLIENT = httpx.Client, httpx.AsyncClient


def _ids(text: str) -> list[int]:
    return [100 + zlib.crc32(text[i:i + 2].encode()) % (VOCAB - 100) for i in range(0, len(text), 2)]


class FakeServer:
    """A server of one tokenize form (``vllm``/``llama.cpp``, or None: no tokenize endpoint)."""

    def __init__(self, form: str | None, n_vocab: int | None = None) -> None:
        self.form, self.n_vocab = form, n_vocab
        self.probes: list[list[Any]] = []  # the plan's requests, in order
        self.fits: list[str] = []  # tokenize/detokenize calls of the fitting, as "path body"
        self.auth: set[str | None] = set()

    def models(self) -> dict[str, Any]:
        m: dict[str, Any] = {"id": "m", "object": "model", "owned_by": "fake"}
        if self.n_vocab:
            m["meta"] = {"n_vocab": self.n_vocab}
        return {"object": "list", "data": [m]}

    def answer(self, path: str, body: dict[str, Any]) -> httpx.Response:
        if path == "/v1/models":
            return httpx.Response(200, json=self.models())
        if self.form is None or path not in ("/tokenize", "/detokenize"):
            return httpx.Response(404, json={"detail": "Not Found"})
        if path == "/tokenize":
            text = body.get("prompt" if self.form == "vllm" else "content")
            if text is None:  # the other form: vLLM rejects it, llama.cpp answers no tokens
                return (httpx.Response(400, json={"detail": "prompt missing"}) if self.form == "vllm"
                        else httpx.Response(200, json={"tokens": []}))
            if text == FAIL:
                return httpx.Response(500, text="tokenizer exploded")
            ids = _ids(text)
            return httpx.Response(200, json={"count": len(ids), "tokens": ids} if self.form == "vllm"
                                  else {"tokens": ids})
        n = len(body.get("tokens") or [])
        return httpx.Response(200, json={"prompt" if self.form == "vllm" else "content": "ab" * n})

    def handler(self, phase: list[str]) -> Callable[[httpx.Request], httpx.Response]:
        def handle(request: httpx.Request) -> httpx.Response:
            body = json.loads(request.content) if request.content else None
            self.auth.add(request.headers.get("authorization"))
            if phase[0] == "plan":
                self.probes.append([request.method, request.url.path, request.content.decode()])
            else:
                self.fits.append(f"{request.url.path} {json.dumps(body, sort_keys=False)}")
            return self.answer(request.url.path, body or {})
        return handle


def _specs(workload: str, n: int) -> list[RequestSpec]:
    tok = get_tokenizer("cl100k_base")
    return list(build_workload(workload, n=n, seed=Seeds(11, "wire").derive(workload), tokenizer=tok).specs)


def _sut(kind: str, api: str) -> SUT:
    sut = SUT(base_url="http://sut.test:8000/v1", model="m", api=api, api_key_env=KEY_ENV, server_kind=kind)
    if kind == "vllm":
        sut.extra_body.update({"stream_options": {"continuous_usage_stats": True}, "cache_salt": FRESH})
    elif kind == "llama.cpp":
        sut.extra_body["cache_prompt"] = False
    return sut


def _h(text: str) -> str:
    """Bodies are compared by their SHA-256 (the file stays small); the first one is kept in part."""
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def _ends(text: str) -> str:
    return text if len(text) <= 400 else text[:200] + " ... " + text[-200:]


def _settings() -> SimpleNamespace:
    return SimpleNamespace(timeout=30.0, http_trace=False, refusal_codes=(), refusal_pattern=None)


def _completion(request: MockRequest) -> MockResponse:
    chunk = {"id": "c", "choices": [{"index": 0, "text": " ok", "finish_reason": "length"}]}
    usage = {"id": "c", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    return MockResponse.sse([chunk, usage])


def _scenario(monkeypatch: pytest.MonkeyPatch, kind: str, form: str, api: str, workload: str) -> dict[str, Any]:
    server = FakeServer(form)
    phase = ["plan"]
    monkeypatch.setattr(httpx, "Client", lambda **kw: REAL_CLIENT(
        transport=httpx.MockTransport(server.handler(phase)), **kw))
    monkeypatch.setattr(httpx, "AsyncClient", lambda **kw: REAL_ASYNC_CLIENT(
        transport=httpx.MockTransport(server.handler(phase)), **kw))
    bodies: list[bytes] = []

    def completion(request: MockRequest) -> MockResponse:
        bodies.append(request.body)
        return _completion(request)

    monkeypatch.setattr(client_module, "make_transport", lambda config, n: MockTransport(completion))
    sut = _sut(kind, api)
    tok = get_tokenizer("cl100k_base")
    ctx = SimpleNamespace(sut=sut, settings=_settings(), tokenizer=tok, progress=lambda line: None)
    plan = prompts.plan_prompts(sut)
    phase[0] = "fit"
    specs = _specs(workload, 8)
    late = [RequestSpec(index=99, workload="w", input_tokens=5, max_tokens=2, prompt_text=FAIL)]

    async def run() -> tuple[list[RequestRecord], dict[str, Any]]:
        client = client_for(ctx)  # type: ignore[arg-type]
        async with client:
            await prompts.prefit(client, ctx, specs[:5])
            recs = [await client.send(s) for s in specs + late]
            return recs, client.describe()

    recs, described = asyncio.run(run())
    salts = [m.group(0) for b in bodies for m in [SALT.search(b.decode())] if m]
    assert len(set(salts)) == len(salts)  # a fresh salt per request
    if kind == "vllm":
        assert len(salts) == len(bodies)
    failed = recs[-1]
    return {
        "plan": plan.to_json(),
        "probes": server.probes,
        "fits": sorted(_h(f) for f in server.fits),
        "fit_calls": len(server.fits),
        "auth": sorted(a or "" for a in server.auth),
        "bodies": [_h(SALT.sub("<salt>", b.decode())) for b in bodies],
        "first_body": _ends(SALT.sub("<salt>", bodies[0].decode())),
        "failed": [failed.error_type.value if failed.error_type else None, failed.error_message, failed.sent_ns],
        "ok": [r.ok for r in recs[:-1]],
        "describe": json.loads(json.dumps(described, default=str)),
    }


CASES = [(kind, form, api, workload) for kind, form in (("vllm", "vllm"), ("llama.cpp", "llama.cpp"),
                                                        ("", "vllm"), ("", "llama.cpp"))
         for api in ("completions", "chat") for workload in ("code-completion", "conversation")]


def _plans(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The plan's probes and reasons on servers without a tokenize endpoint or with a large vocabulary."""
    out = {}
    for name, server, api in (("no-tokenize", FakeServer(None), "completions"),
                              ("large-vocab", FakeServer("llama.cpp", 128_256), "completions"),
                              ("small-vocab", FakeServer("llama.cpp", 32_000), "chat")):
        monkeypatch.setattr(httpx, "Client", lambda s=server, **kw: REAL_CLIENT(transport=httpx.MockTransport(
            s.handler(["plan"])), **kw))
        plan = prompts.plan_prompts(_sut("", api))
        out[name] = {"plan": plan.to_json(), "probes": server.probes}
    bad = RequestRecord.from_spec(RequestSpec(index=0, workload="w", input_tokens=1, max_tokens=1, prompt_text="x"))
    from pytest_llmbench.common.records import ErrorType

    bad.error_type, bad.error_message = ErrorType.HTTP_4XX, "Token id 100130 is out of vocabulary"
    out["failure_cause"] = prompts.failure_cause([bad])
    return out


def _capture(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setenv(KEY_ENV, "sk-wire")
    got = {"/".join(c or "generic" for c in case): _scenario(monkeypatch, *case) for case in CASES}
    got["plans"] = _plans(monkeypatch)
    return got


def test_prompt_fitting_sends_what_the_old_path_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    got = _capture(monkeypatch)
    if os.environ.get("LLMBENCH_RECORD_WIRE") == "1":
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    want = json.loads(GOLDEN.read_text(encoding="utf-8"))
    for key in want:
        assert got[key] == want[key], key
    assert set(got) == set(want)
    # the harness can fail: the recorded bodies are the fitted ones (server ids or detokenized text)
    for case in CASES:
        first = want["/".join(c or "generic" for c in case)]["first_body"]
        assert ('"prompt":[' in first) if case[2] == "completions" else ('ababab"}]' in first), (case, first)
