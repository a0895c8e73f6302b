"""Refusal detection (§4.8.1, §5.10; refusals.py): every way a server refuses becomes ``refused``.

A local aiohttp server on 127.0.0.1 answers each request with one canned refusal (or a
non-policy error that must stay what it is); the client's record must carry the class.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web
from factories import delta_chunk, serve_app, sse

from pytest_llmbench.client import ClientConfig, LLMClient
from pytest_llmbench.common.records import ErrorType, RequestRecord, RequestSpec
from pytest_llmbench.measure.refusals import RefusalPolicy, policy_code, refusal_reason
from pytest_llmbench.settings import LLMBenchConfigError, resolve

ANSWERS: dict[str, tuple[int, str, bytes]] = {
    # Azure OpenAI: 400 with code content_filter and innererror ResponsibleAIPolicyViolation
    "azure400": (400, "application/json", json.dumps({"error": {
        "message": "The response was filtered", "type": None, "param": "prompt", "code": "content_filter",
        "innererror": {"code": "ResponsibleAIPolicyViolation"}}}).encode()),
    # OpenAI: 400 content_policy_violation
    "openai400": (400, "application/json", json.dumps({"error": {
        "message": "Your request was rejected", "type": "invalid_request_error",
        "code": "content_policy_violation"}}).encode()),
    # a gateway's 403 with a code only the tester knows (declared)
    "gateway403": (403, "application/json", json.dumps({"error": {"code": "LG_BLOCKED", "message": "no"}}).encode()),
    # a 400 that is not a policy rejection: stays http_4xx
    "plain400": (400, "application/json", json.dumps({"error": {
        "message": "max_tokens too large", "type": "invalid_request_error", "code": "invalid_value"}}).encode()),
    # OpenAI structured refusal: the refusal streams in delta.refusal, content stays null
    "refusal_field": (200, "text/event-stream", sse(
        delta_chunk({"role": "assistant", "content": None, "refusal": ""}),
        delta_chunk({"refusal": "I'm sorry, "}), delta_chunk({"refusal": "I can't help with that."}),
        delta_chunk(None, "stop"), done=True)),
    # a refusal in plain text: only the declared pattern makes it one
    "text": (200, "text/event-stream", sse(
        delta_chunk({"role": "assistant", "content": "I cannot assist"}), delta_chunk(" with that request."),
        delta_chunk(None, "stop"), done=True)),
    # an error event inside the 200 stream with a policy code
    "stream_error": (200, "text/event-stream", sse(
        delta_chunk("Sure"), {"error": {"code": "content_filter", "message": "output filtered"}}, done=True)),
    "content_filter": (200, "text/event-stream", sse(delta_chunk("Well"), delta_chunk(None, "content_filter"),
                                                     done=True)),
    "ok": (200, "text/event-stream", sse(delta_chunk("Hello there"), delta_chunk(None, "stop"), done=True)),
}


async def _exchange(kinds: list[str], policy: RefusalPolicy) -> dict[str, RequestRecord]:
    async def handler(request: web.Request) -> web.Response:
        body = await request.json()
        status, ctype, payload = ANSWERS[body["messages"][-1]["content"]]
        return web.Response(status=status, body=payload, content_type=ctype)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    async with serve_app(app) as url:
        cfg = ClientConfig(base_url=url, model="m", api="chat", tokenizer=None, refusals=policy)
        async with LLMClient(cfg) as client:
            out = {}
            for i, kind in enumerate(kinds):
                spec = RequestSpec(index=i, workload="t", prompt_text=kind, input_tokens=1, max_tokens=8)
                out[kind] = await client.send(spec)
            return out


def test_every_refusal_form_is_refused() -> None:
    policy = RefusalPolicy(codes=("LG_BLOCKED",), pattern=r"^I cannot assist")
    recs = asyncio.run(_exchange(list(ANSWERS), policy))
    refused = {k for k, r in recs.items() if r.error_type is ErrorType.REFUSED}
    assert refused == {"azure400", "openai400", "gateway403", "refusal_field", "text", "stream_error",
                       "content_filter"}
    assert recs["plain400"].error_type is ErrorType.HTTP_4XX
    assert recs["ok"].ok
    assert "content_filter" in recs["azure400"].error_message and recs["azure400"].status == 400
    assert "content_policy_violation" in recs["openai400"].error_message
    assert recs["refusal_field"].refusal == "I'm sorry, I can't help with that."
    assert "declared refusal pattern" in recs["text"].error_message


def test_without_declarations_only_builtin_rules_apply() -> None:
    """The tester's code and pattern are what turn the gateway 403 and the plain-text answer into refusals."""
    recs = asyncio.run(_exchange(["gateway403", "text", "azure400"], RefusalPolicy()))
    assert recs["gateway403"].error_type is ErrorType.HTTP_4XX
    assert recs["text"].ok
    assert recs["azure400"].error_type is ErrorType.REFUSED


@pytest.mark.parametrize("status,body,expected", [
    (400, {"error": {"code": "content_filter"}}, "content_filter"),
    (403, {"error": {"code": "x", "innererror": {"code": "ResponsibleAIPolicyViolation"}}},
     "ResponsibleAIPolicyViolation"),
    (404, {"error": {"code": "content_filter"}}, None),  # not a status a policy rejection uses
    (400, {"error": "content_filter"}, None),  # a bare string has no code
    (None, {"error": {"type": "moderation"}}, "moderation"),  # stream error event
])
def test_policy_code(status: int | None, body: Any, expected: str | None) -> None:
    assert policy_code(status, body) == expected


def test_refusal_reason_order_and_bad_pattern() -> None:
    p = RefusalPolicy(pattern="sorry")
    assert refusal_reason("content_filter", "no", "sorry", p).startswith("finish_reason")
    assert refusal_reason("stop", "no", "sorry", p).startswith("refusal field")
    assert refusal_reason("stop", None, "so sorry", p) is not None
    assert refusal_reason("stop", None, "fine", p) is None
    with pytest.raises(ValueError, match="not a regular expression"):
        RefusalPolicy(pattern="(")


def test_refusal_options_reach_the_client() -> None:
    from pytest_llmbench.procedures.run import refusal_policy

    def opts(**kw: Any) -> Callable[[str], Any]:
        return lambda name: kw.get(name)

    s = resolve(opts(llm_refusal_pattern="^No", llm_refusal_codes=["a, b", "c"]), lambda name: None, environ={})
    assert refusal_policy(s) == RefusalPolicy(codes=("a", "b", "c"), pattern="^No")
    with pytest.raises(LLMBenchConfigError, match="not a regular expression"):
        resolve(opts(llm_refusal_pattern="("), lambda name: None, environ={})
