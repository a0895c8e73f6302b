"""vLLM, SGLang, OpenAI and the generic OpenAI-compatible fallback.

Not tested live here (none runs on this CI's CPU): tests/test_adapters.py checks them against
response bodies written from each server's documented formats, versions named in ``documented``.
vLLM, SGLang and OpenAI send no response extensions the client reads.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ...common.records import RequestRecord
from .base import Fetch, ServerAdapter, TokenizeForm, models_tokenizer, register, sut_post
from .llamacpp import LLAMACPP, LLAMACPP_FORM
from .simulator import SIMULATOR
from .vllm.switch import configure as vllm_configure
from .vllm.switch import fresh_salt

#: vLLM's tokenize/detokenize (SGLang's tokenize too): ``{"model", "prompt", "add_special_tokens"}`` ->
#: ``{"tokens"}``; ``{"model", "tokens"}`` -> ``{"prompt"}``
VLLM_FORM = TokenizeForm("vllm")


def _models_window(fetch: Fetch) -> dict[str, Any]:
    """The context window ``/v1/models`` lists (``max_model_len``) with its source; {} without one."""
    status, body = fetch("/v1/models")
    if status == 200 and isinstance(body, dict):
        for m in body.get("data") or []:
            if isinstance(m, dict) and isinstance(m.get("max_model_len"), int):
                window = int(m["max_model_len"])
                return {"context_window": window, "context_window_source": "/v1/models max_model_len"} if window else {}
    return {}


def _post_flush(sut: Any, path: str, what: str) -> bool | None:
    r = sut_post(sut, path)
    if r.status_code >= 400:
        sut.server_info["flush_prefix_cache"] = f"not possible: POST {path} answered {r.status_code} ({what})"
        return None
    sut.server_info["flush_prefix_cache"] = f"POST {path}"
    return True


class VLLMAdapter(ServerAdapter):
    def probe(self, fetch: Fetch) -> str | None:
        status, body = fetch("/version")
        if status == 200 and isinstance(body, dict) and isinstance(body.get("version"), str) and len(body) == 1:
            return "/version answers {\"version\": ...} only"
        return None

    def describe(self, fetch: Fetch) -> dict[str, Any]:
        info: dict[str, Any] = {}
        status, body = fetch("/version")
        if status == 200 and isinstance(body, dict):
            info["version"] = body.get("version")
        info.update(_models_window(fetch))
        info.update(models_tokenizer(fetch))
        return {k: v for k, v in info.items() if v is not None}

    def configure(self, sut: Any, setting: str, value: Any) -> bool | None:
        return vllm_configure(sut, setting, value)  # prefix_cache (per-request cache_salt), flush (dev mode)


class SGLangAdapter(ServerAdapter):
    def probe(self, fetch: Fetch) -> str | None:
        status, body = fetch("/get_model_info")
        if status == 200 and isinstance(body, dict) and "model_path" in body and "is_generation" in body:
            return "/get_model_info has model_path and is_generation"
        return None

    def describe(self, fetch: Fetch) -> dict[str, Any]:
        info: dict[str, Any] = {}
        status, body = fetch("/get_model_info")
        if status == 200 and isinstance(body, dict) and body.get("model_path"):
            info["model_path"] = os.path.basename(str(body["model_path"]).rstrip("/")) or body["model_path"]
        status, body = fetch("/get_server_info")
        if status == 200 and isinstance(body, dict):
            info["version"] = body.get("version")
            if isinstance(body.get("context_length"), int):
                info["context_window"] = body["context_length"]
                info["context_window_source"] = "/get_server_info context_length"
        if "context_window" not in info:
            info.update(_models_window(fetch))
        info.update(models_tokenizer(fetch))
        return {k: v for k, v in info.items() if v is not None}

    def configure(self, sut: Any, setting: str, value: Any) -> bool | None:
        if setting == "flush_prefix_cache" and value:
            return _post_flush(sut, "/flush_cache", "SGLang refuses while requests are running")
        return None  # the radix cache is a start-up flag (--disable-radix-cache)


VLLM = register(VLLMAdapter(
    kind="vllm", title="vLLM", owned_by=("vllm",),
    reasoning=("delta.reasoning_content on chat (newer versions: delta.reasoning) when started with "
               "--reasoning-parser <name> (e.g. deepseek_r1, qwen3); without a parser the thinking stays in the "
               "content as <think>...</think> (--llm-think-tags); usage carries no reasoning_tokens"),
    # the running output count on every chunk: exact per-chunk counts (measure/tokencount.py, §4.4)
    request_fields={"stream_options": {"continuous_usage_stats": True}},
    metrics={
        "waiting": ("vllm:num_requests_waiting",),
        "running": ("vllm:num_requests_running",),
        "preemptions": ("vllm:num_preemptions_total",),
        # v1 engine (0.10+) name first, then the pre-0.10 name
        "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "prefix_hits": ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits"),
        "prefix_queries": ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries"),
        "requests_finished": ("vllm:request_success_total",),
    },
    # V1 engine phase times per finished request (WAITING, PREFILL), vLLM 0.8+ (vllm/v1/metrics/loggers.py)
    histograms={"queue_wait": ("vllm:request_queue_time_seconds",),
                "prefill": ("vllm:request_prefill_time_seconds",)},
    honours=("ignore_eos", "min_tokens", "usage.prompt_tokens_details.cached_tokens (--enable-prompt-tokens-details)",
             "token-id prompts"),
    documented="vLLM 0.6.x (gpu_cache_usage_perc) and 0.10/0.11 (kv_cache_usage_perc) OpenAI server and /metrics",
    tokenize_forms=(VLLM_FORM,),
    isolate_prefix=fresh_salt,  # 5.7's switch (vllm/switch.py): a new cache_salt per request
    detect_order=30,
))

SGLANG = register(SGLangAdapter(
    kind="sglang", title="SGLang", owned_by=("sglang",),
    reasoning=("delta.reasoning_content on chat when started with --reasoning-parser <name> (and the request's "
               "separate_reasoning, on by default); else <think>...</think> in the content (--llm-think-tags)"),
    metrics={
        "waiting": ("sglang:num_queue_reqs",),
        "running": ("sglang:num_running_reqs",),
        "kv_usage": ("sglang:token_usage",),
    },
    honours=("ignore_eos", "min_tokens", "usage.prompt_tokens_details.cached_tokens", "token-id prompts"),
    documented="SGLang 0.4.x / 0.5.x native API (/get_model_info, /get_server_info, /flush_cache) and /metrics",
    detect_order=20,
))

OPENAI = register(ServerAdapter(
    kind="openai", title="OpenAI API", owned_by=("openai", "system", "openai-internal"),
    reasoning=("hidden: reasoning models (o-series, gpt-5) stream no thinking on chat completions; "
               "usage.completion_tokens_details.reasoning_tokens counts it (a hidden-reasoning finding)"),
    honours=("usage.prompt_tokens_details.cached_tokens",),
    documented="OpenAI API reference (2024-10 onwards: prompt_tokens_details.cached_tokens, stream_options)",
    detect_order=40,
))

@dataclass(frozen=True)
class GenericAdapter(ServerAdapter):
    """An unrecognised server: no request fields and no token recount, but every known server's
    response extensions (``reads``) are read where they appear, as namespaced keys cannot be
    mistaken: a llama.cpp behind a proxy still gives its ``timings``, a simulator started by hand
    its ``llmbench_timing``. Also the adapter of a client given none. Its ``tokenize_forms`` are the
    forms the prompt plan probes on any server, in this order (the server's own follow,
    ``adapters.tokenize_forms``)."""

    reads: tuple[ServerAdapter, ...] = ()

    def describe(self, fetch: Fetch) -> dict[str, Any]:
        """The tokenizer ``/v1/models`` names (§4.4.1); nothing else is known of an unrecognised server."""
        return models_tokenizer(fetch)

    @property
    def extension_keys(self) -> frozenset[str]:
        return frozenset().union(*(a.extension_keys for a in self.reads))

    def parse_extensions(self, obj: dict[str, Any], rec: RequestRecord) -> None:
        for a in self.reads:
            a.parse_extensions(obj, rec)


GENERIC = register(GenericAdapter(
    kind="openai-compatible", title="OpenAI-compatible server (unrecognised)",
    honours=("ignore_eos", "min_tokens"),  # sent as before; a server may ignore them
    documented="OpenAI-compatible API only",
    tokenize_forms=(VLLM_FORM, LLAMACPP_FORM),
    aliases=("generic",),
    detect_order=1000,  # the fallback: last
    reads=(SIMULATOR, LLAMACPP),
))
