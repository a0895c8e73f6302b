#!/usr/bin/env python3
"""Write the reasoning-model SSE streams of this folder (issue 49): ``python tests/data/sse-captures/make_reasoning_captures.py``.

Not captured from live servers: produced from the embedded simulator's output plan (its thinking and its
answer, ``SimConfig(reasoning=...)``, seed 7, one token per chunk) laid out in each server's documented
stream shape, field for field as the server writes it:

* ``vllm-0.11_chat_reasoning_parser.sse``: vLLM 0.11 with ``--reasoning-parser deepseek_r1`` and the
  adapter's ``continuous_usage_stats``: ``delta.reasoning_content`` chunks, the chunk that crosses
  ``</think>`` carrying both its reasoning and its first content (DeepSeekR1ReasoningParser), a
  ``usage`` on every chunk, ``stop_reason`` on the finish chunk, no ``reasoning_tokens`` in usage;
* ``vllm-0.11_chat_no_parser.sse``: the same model without a reasoning parser: ``<think>...</think>`` in
  the content (the user then says ``--llm-think-tags``);
* ``llama-server_chat_reasoning_format_deepseek.sse``: llama.cpp ``llama-server --jinja
  --reasoning-format deepseek``: the role chunk with ``content: null``, ``delta.reasoning_content``
  chunks, ``timings`` and a separate ``choices: []`` usage chunk;
* ``llama-server_chat_reasoning_format_none.sse``: ``--reasoning-format none``: ``<think>`` in the content;
* ``openai_chat_hidden_reasoning.sse``: an OpenAI reasoning model on chat completions: no thinking streams,
  ``usage.completion_tokens_details.reasoning_tokens`` counts it (hidden reasoning).

The test that reads them is tests/test_reasoning_captures.py; each file's expected phases are in
``reasoning-captures.json`` (thinking text, answer text, reasoning tokens) written beside them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_llmbench.simulator import SimConfig
from pytest_llmbench.simulator.generation import plan_output

HERE = Path(__file__).parent
CREATED = 1795400000


def _plan() -> tuple[list[str], list[str]]:
    """The simulator's thinking and answer words of one request (seed 7, max_tokens 40)."""
    plan = plan_output(SimConfig(reasoning="streamed", reasoning_mean_tokens=12.0, eos_mean_tokens=10.0, seed=7),
                       7, 40)
    words = [json.loads(p) for p in plan.pieces]
    return words[:plan.reasoning_tokens], words[plan.reasoning_tokens:]


def _sse(objs: list[dict[str, Any]]) -> str:
    return "".join(f"data: {json.dumps(o, separators=(',', ':'))}\n\n" for o in objs) + "data: [DONE]\n\n"


def vllm(think: list[str], answer: list[str], parser: bool) -> str:
    head = {"id": "chatcmpl-5c1f0e1a9b7d4c2e8f3a6b5d4c3e2f1a", "object": "chat.completion.chunk", "created": CREATED,
            "model": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B"}
    prompt = 14
    out: list[dict[str, Any]] = []

    def chunk(delta: dict[str, Any], done: int, finish: str | None = None, **extra: Any) -> None:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, **extra}
        out.append({**head, "choices": [choice],
                    "usage": {"prompt_tokens": prompt, "total_tokens": prompt + done, "completion_tokens": done}})

    chunk({"role": "assistant", "content": ""}, 0)
    if parser:  # <think> is a token of its own: the parser drops it; </think> ends the reasoning inside a delta
        for i, w in enumerate(think[:-1]):
            chunk({"reasoning_content": w}, i + 2)
        # the last thought, </think> and the first answer token decoded in one step: one delta holds both
        chunk({"reasoning_content": think[-1], "content": answer[0]}, len(think) + 3)
    else:
        for i, w in enumerate(["<think>", *think, "</think>"]):
            chunk({"content": w}, i + 1)
        chunk({"content": answer[0]}, len(think) + 3)
    for i, w in enumerate(answer[1:]):
        chunk({"content": w}, len(think) + 4 + i)
    total = len(think) + 2 + len(answer)
    chunk({"content": ""}, total, "stop", stop_reason=None)
    out.append({**head, "choices": [], "usage": {"prompt_tokens": prompt, "total_tokens": prompt + total,
                                                 "completion_tokens": total}})
    return _sse(out)


def llamacpp(think: list[str], answer: list[str], deepseek: bool) -> str:
    head = {"created": CREATED, "id": "chatcmpl-qV3b9XkPz0c2mR7sT1uW4yA6dF8hJ5nL", "model": "Qwen3-0.6B-Q8_0.gguf",
            "system_fingerprint": "b6490-0d8e8f1f", "object": "chat.completion.chunk"}
    out: list[dict[str, Any]] = [{"choices": [{"finish_reason": None, "index": 0,
                                               "delta": {"role": "assistant", "content": None}}], **head}]
    parts = ([("reasoning_content", w) for w in think] if deepseek
             else [("content", w) for w in ["<think>", *think, "</think>"]]) + [("content", w) for w in answer]
    for key, w in parts:
        out.append({"choices": [{"finish_reason": None, "index": 0, "delta": {key: w}}], **head})
    n = len(think) + 2 + len(answer)
    out.append({"choices": [{"finish_reason": "stop", "index": 0, "delta": {}}], **head})
    out.append({"choices": [], **head, "usage": {"completion_tokens": n, "prompt_tokens": 18, "total_tokens": 18 + n,
                                                 "prompt_tokens_details": {"cached_tokens": 0}},
                "timings": {"cache_n": 0, "prompt_n": 18, "prompt_ms": 41.2, "prompt_per_token_ms": 2.29,
                            "prompt_per_second": 436.9, "predicted_n": n, "predicted_ms": 612.5,
                            "predicted_per_token_ms": 612.5 / n, "predicted_per_second": n / 0.6125}})
    return _sse(out)


def openai_hidden(think: list[str], answer: list[str]) -> str:
    head = {"id": "chatcmpl-BxH7pQ2rS9tU4vW6yZ8aB1cD3eF", "object": "chat.completion.chunk", "created": CREATED,
            "model": "o4-mini-2025-04-16", "service_tier": "default", "system_fingerprint": None}
    out: list[dict[str, Any]] = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "",
                                                                                "refusal": None},
                                                       "finish_reason": None}], "usage": None}]
    out += [{**head, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}], "usage": None}
            for w in answer]
    out.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": None})
    n = len(think) + len(answer)
    out.append({**head, "choices": [], "usage": {
        "prompt_tokens": 15, "completion_tokens": n, "total_tokens": 15 + n,
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": len(think), "audio_tokens": 0,
                                      "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}})
    return _sse(out)


def main() -> None:
    think, answer = _plan()
    files = {
        "vllm-0.11_chat_reasoning_parser.sse": (vllm(think, answer, True), "field"),
        "vllm-0.11_chat_no_parser.sse": (vllm(think, answer, False), "tags"),
        "llama-server_chat_reasoning_format_deepseek.sse": (llamacpp(think, answer, True), "field"),
        "llama-server_chat_reasoning_format_none.sse": (llamacpp(think, answer, False), "tags"),
        "openai_chat_hidden_reasoning.sse": (openai_hidden(think, answer), "hidden"),
    }
    expected: dict[str, Any] = {}
    for name, (text, how) in files.items():
        (HERE / name).write_text(text, encoding="utf-8")
        expected[name] = {"reasoning": how, "thinking": "".join(think), "answer": "".join(answer),
                          "reasoning_tokens": len(think)}
    (HERE / "reasoning-captures.json").write_text(json.dumps(expected, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
