"""The system under test: endpoint, model, SUT boundary (§4.1), endpoint check, configuration.

The API key is read from the environment variable the user names (``--llm-api-key-env``) at the
moment a request is built; it is never stored on the SUT object, in records, reports or logs (§7).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .adapters import ServerAdapter, adapter_for, detect, get_adapter, http_fetch, root_url
from .adapters.simulator import SIMULATOR_KIND

__all__ = ["SUT", "EndpointError", "check_endpoint", "probe_rtt", "self_declarations", "identify_server",
           "identify_grpc_server", "BOUNDARY_NAMES",
           "SIMULATOR_DECLARATIONS", "SIMULATOR_GUARDRAIL_SYSTEMS", "SIMULATOR_KIND", "simulator_guardrails"]

#: Report names of the boundaries of §4.1.
BOUNDARY_NAMES = {
    "model-engine": "Model Engine (§4.1.1)",
    "gateway": "Application Gateway (§4.1.2)",
    "compound": "Compound System (§4.1.3)",
}


class EndpointError(RuntimeError):
    """The endpoint cannot be used: unreachable, not OpenAI-compatible, or the model is not listed."""


@dataclass
class SUT:
    """Where requests go and what the SUT is declared to be."""

    base_url: str  # ends in /v1
    model: str
    api: str = "completions"  # completions | chat
    boundary: str = "model-engine"
    api_key_env: str | None = None
    verify_tls: bool = True
    embedded: bool = False
    models_listed: list[str] = field(default_factory=list)
    server_info: dict[str, Any] = field(default_factory=dict)  # e.g. the simulator's effective config
    server_kind: str = ""  # adapters.KINDS, or "llmbench-simulator" (see identify_server)
    server_kind_source: str = ""  # how it was found: detection evidence or --llm-server-kind
    # body fields merged into every request (the adapter's, then configuration switches such as
    # llama.cpp's cache_prompt); the client holds this very mapping, so a switch applies at once
    extra_body: dict[str, Any] = field(default_factory=dict)
    send_extra_fields: bool = True  # min_tokens / ignore_eos (servers that reject them: False)
    reuse_connections: bool = True  # HTTP keep-alive (the adapter's choice for this server kind)
    # requests over gRPC (base_url grpc://host:port): the server's HTTP root when it has one besides
    # (the embedded simulator's /admin/config, /metrics); None: base_url's own root
    http_root: str | None = None

    @property
    def protocol(self) -> str:
        """The streaming protocol the requests use (§4.6.1, reported per §4.6.2): ``grpc`` or ``sse``."""
        return "grpc" if self.base_url.startswith(("grpc://", "grpcs://")) else "sse"

    def headers(self) -> dict[str, str]:
        """Request headers; the Authorization value is read from the environment, never kept."""
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if key:
                return {"Authorization": f"Bearer {key}"}
        return {}

    @property
    def adapter(self) -> ServerAdapter:
        """The server's adapter: its response extensions and token recount (``adapters.adapter_for``)."""
        return adapter_for(self)

    @property
    def root_url(self) -> str:
        """The server root (``adapters.root_url``: base_url without its /v1), where /metrics and /health live;
        over gRPC the server's HTTP root when it has one (``http_root``)."""
        return self.http_root or root_url(self.base_url)

    def to_json(self) -> dict[str, Any]:
        return {
            "base_url": self.base_url,
            "protocol": self.protocol,
            "model": self.model,
            "api": self.api,
            "boundary": self.boundary,
            "boundary_name": BOUNDARY_NAMES.get(self.boundary, self.boundary),
            "api_key_env": self.api_key_env,  # the variable's name only
            "verify_tls": self.verify_tls,
            "embedded_simulator": self.embedded,
            "models_listed": list(self.models_listed),
            "server_info": self.server_info,
            "server_kind": self.server_kind,
            "server_kind_source": self.server_kind_source,
            "extra_body": dict(self.extra_body),
        }


def probe_rtt(base_url: str, *, probes: int = 5, timeout_s: float = 2.0) -> dict[str, Any] | None:
    """The network round-trip time to the SUT, measured apart from any request (§4.7.3-SHOULD-1): the
    median of ``probes`` TCP connects to the endpoint's host and port (one SYN/SYN-ACK each, no HTTP, no
    server work), before the runs. None when no connection could be made."""
    import socket
    import statistics
    import time
    from urllib.parse import urlsplit

    u = urlsplit(base_url)
    host, port = u.hostname or "", u.port or (443 if u.scheme == "https" else 80)
    samples: list[float] = []
    for _ in range(probes):
        t0 = time.perf_counter()
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                samples.append(time.perf_counter() - t0)
        except OSError:
            continue
    if not samples:
        return None
    return {"rtt_s": statistics.median(samples), "samples": len(samples), "min_s": min(samples),
            "method": f"median of {len(samples)} TCP connects to {host}:{port} before the runs"}


def check_endpoint(base_url: str, model: str | None, *, headers: dict[str, str] | None = None,
                   verify: bool = True, timeout: float = 10.0) -> tuple[str, list[str]]:
    """Check once that the endpoint answers ``GET /models`` and lists the model (§4.1).

    Returns (model to use, models listed). Raises :class:`EndpointError` with one clear message.
    """
    url = base_url.rstrip("/") + "/models"
    try:
        resp = httpx.get(url, headers=headers or {}, verify=verify, timeout=timeout)
    except httpx.HTTPError as exc:
        raise EndpointError(f"endpoint {base_url} is not reachable ({type(exc).__name__}: {exc})") from None
    if resp.status_code in (401, 403):
        raise EndpointError(f"endpoint {base_url} refused the credentials (HTTP {resp.status_code} on /models); "
                            "set --llm-api-key-env to the variable holding the key")
    if resp.status_code != 200:
        raise EndpointError(f"endpoint {base_url} answered HTTP {resp.status_code} on GET /models")
    try:
        listed = [str(m["id"]) for m in resp.json().get("data", [])]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise EndpointError(f"endpoint {base_url}: GET /models did not return an OpenAI model list") from None
    if model is None:
        if not listed:
            raise EndpointError(f"endpoint {base_url} lists no models; pass --llm-model")
        return listed[0], listed
    if listed and model not in listed:
        raise EndpointError(f"model {model!r} is not served by {base_url}; it offers: {', '.join(listed)}")
    return model, listed


def identify_server(sut: SUT, override: str | None = None) -> None:
    """Set ``sut.server_kind`` and its adapter's contributions: detected from ``/v1/models`` and each
    known server's own endpoints (:func:`adapters.detect`) unless ``override``
    (``--llm-server-kind``) names it; server facts (version, context window) go to ``server_info``.
    """
    if sut.embedded:
        sut.server_kind, sut.server_kind_source = SIMULATOR_KIND, "embedded simulator"
        return
    fetch = http_fetch(sut.root_url, sut.headers(), verify=sut.verify_tls)
    if override:
        try:
            adapter = get_adapter(override)
        except ValueError as exc:
            raise EndpointError(f"--llm-server-kind: {exc}") from None
        evidence = "declared (--llm-server-kind)"
    else:
        adapter, evidence = detect(fetch)
    sut.server_kind, sut.server_kind_source = adapter.kind, evidence
    sut.server_info.update(adapter.describe(fetch))
    sut.server_info["adapter"] = adapter.summary()
    sut.extra_body.update(adapter.request_fields)
    sut.send_extra_fields = bool({"ignore_eos", "min_tokens"} & set(adapter.honours))
    sut.reuse_connections = adapter.reuse_connections


#: ``GetServerInfo.server_type`` prefixes -> server kind (adapters.KINDS): vLLM's gRPC server says ``vllm-grpc``
GRPC_SERVER_TYPES = {"vllm": "vllm", "sglang": "sglang", "llmbench-sim": "openai-compatible"}


def output_tokenizer(tokenizer_path: str, reference: str = "cl100k_base") -> tuple[str | None, str]:
    """The tokenizer that decodes a gRPC server's output ids (``get_tokenizer`` name), from the path its
    ``GetModelInfo`` names, and where it came from: a tiktoken encoding's name as such (the simulator
    says ``cl100k_base``), a local folder or file with a ``tokenizer.json`` (a server on this host:
    vLLM names its model folder) as ``hf:``; (None, why) otherwise (records then carry no text)."""
    if not tokenizer_path:
        return None, "GetModelInfo names no tokenizer"
    if tokenizer_path in (reference, f"tiktoken:{reference}"):
        return reference, f"GetModelInfo tokenizer_path {tokenizer_path!r} (the reference tokenizer's ids)"
    path = Path(tokenizer_path)
    file = path / "tokenizer.json" if path.is_dir() else path
    if file.name == "tokenizer.json" and file.is_file():
        return f"hf:{file}", f"GetModelInfo tokenizer_path {tokenizer_path!r}: {file} on this host"
    return None, (f"GetModelInfo tokenizer_path {tokenizer_path!r} is not a tokenizer.json on this host: output ids "
                  "are counted exactly but not decoded")


def identify_grpc_server(sut: SUT, info: dict[str, Any], override: str | None = None) -> None:
    """A gRPC SUT described by its own service (``info``: the client's ``describe_server``): its kind from
    ``server_type`` unless ``override`` (``--llm-server-kind``), its model, vocabulary, context window and
    the tokenizer of its output ids into ``server_info`` (§4.1, §4.4)."""
    sut.server_info["grpc"] = dict(info)
    if not sut.embedded:
        server_type = str(info.get("server_type") or "")
        if override:
            try:
                adapter = get_adapter(override)
            except ValueError as exc:
                raise EndpointError(f"--llm-server-kind: {exc}") from None
            sut.server_kind, sut.server_kind_source = adapter.kind, "declared (--llm-server-kind)"
        elif server_type:
            kind = next((k for prefix, k in GRPC_SERVER_TYPES.items() if server_type.startswith(prefix)),
                        "openai-compatible")
            sut.server_kind = get_adapter(kind).kind
            sut.server_kind_source = f"gRPC GetServerInfo server_type={server_type!r}"
        else:  # vLLM 0.32's servicer (smg-grpc-servicer 0.14.1) leaves server_type empty: the service says it
            sut.server_kind = get_adapter("vllm").kind
            sut.server_kind_source = "answers vllm.grpc.engine.VllmEngine (GetServerInfo server_type empty)"
        sut.server_info["adapter"] = get_adapter(sut.server_kind).summary()
    if info.get("vocab_size"):
        sut.server_info["vocab_size"] = info["vocab_size"]
    if info.get("context_window"):
        sut.server_info["context_window"] = info["context_window"]
        sut.server_info["context_window_source"] = "gRPC GetModelInfo max_context_length"
    name, source = output_tokenizer(str(info.get("tokenizer_path") or ""))
    sut.server_info["output_tokenizer"] = name
    sut.server_info["output_tokenizer_source"] = source


#: What the embedded simulator is, declared by the plugin itself because it knows (§5.1.2 model and
#: hardware, §4.7 single host, §4.4.3 special tokens of its usage counts; docs/simulator.md "Token
#: counts"). A user's declarations override these.
SIMULATOR_DECLARATIONS: dict[str, Any] = {
    "model": {"name": "llmbench-sim", "version": "pytest-llmbench embedded simulator", "quantization": "none"},
    "hardware": {"accelerator": "none (embedded simulator: a modelled engine on this host's CPU)", "count": 0,
                 "memory": "simulated KV cache, kv_capacity_tokens in server_info"},
    "engine": {"name": "pytest-llmbench embedded simulator", "version": "the plugin's version"},
    "model_loaded": {"met": True, "note": "the simulator has no weights to load; it serves from its first request"},
    "clock_sync": {"method": "single-host", "accuracy_ms": 0},
    "special_tokens": {
        "bos_eos": "excluded: no BOS token is added to a prompt and the EOS token is not counted in "
                   "usage.completion_tokens",
        "system_prompt": "included: a system message's content tokens count in usage.prompt_tokens, with no "
                         "chat-template tokens around any message",
        "tool_call_format": "not applicable: the simulator offers no tools and formats no tool calls",
    },
}

#: The simulator's guardrail models by filter (§4.8.1: the safety systems, named).
SIMULATOR_GUARDRAIL_SYSTEMS = {"input": "llmbench-sim input filter", "output": "llmbench-sim output filter"}


def simulator_guardrails(*modes: str) -> dict[str, Any]:
    """The embedded simulator's guardrail state over the configurations ``modes`` (``none``, ``input``,
    ``output``, ``full``) a run used (§4.8.1): a filter is on when any mode ran it, and the systems that
    ran are named ('none' when none did)."""
    on = {f: any(m in (f, "full") for m in modes) for f in ("input", "output")}
    systems = [SIMULATOR_GUARDRAIL_SYSTEMS[f] for f in ("input", "output") if on[f]]
    return {"input_filter": "on" if on["input"] else "off", "output_filter": "on" if on["output"] else "off",
            "systems": systems or "none"}


def _guardrails_default(info: dict[str, Any]) -> dict[str, Any] | None:
    """§4.8.2-SHOULD-1 for the simulator: its guardrail settings against the defaults it reports
    (a boolean declaration, ``{met, note}``)."""
    defaults = info.get("guardrail_defaults")
    if not isinstance(defaults, dict):
        return None
    changed = {k: info.get(k) for k, v in defaults.items() if info.get(k) != v}
    if changed:
        return {"met": False, "note": "the simulator's guardrail settings differ from their defaults (" + ", ".join(
            f"{k} = {v!r}, default {defaults[k]!r}" for k, v in changed.items()) + ")"}
    return {"met": True, "note": "the simulator's guardrail models ran at their default settings (" + ", ".join(
        f"{k} = {v}" for k, v in defaults.items()) + ")"}


def self_declarations(sut: SUT | None) -> dict[str, Any]:
    """What the SUT declares about itself because the plugin knows it: the embedded simulator's
    model, hardware, engine, loading, clock, special-token handling and guardrail state and defaults
    (§4.1, §5.1.2, §4.7, §4.4.3, §4.8); empty for any other server. ``compliance.effective_declarations``
    lays the user's file over these."""
    if sut is None or not sut.embedded:
        return {}
    data: dict[str, Any] = dict(SIMULATOR_DECLARATIONS)
    data["model"] = {**SIMULATOR_DECLARATIONS["model"], "name": sut.model or "llmbench-sim"}
    data["guardrails"] = simulator_guardrails(str(sut.server_info.get("guardrails", "none")))
    default = _guardrails_default(sut.server_info)
    if default is not None:
        data["guardrails_default"] = default
    return data
