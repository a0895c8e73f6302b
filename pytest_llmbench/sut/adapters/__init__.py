"""Server adapters: what a known serving engine adds to the OpenAI API, without special cases in
the client's hot path (docs/architecture.md, "SUT").

An adapter names the server kind, recognises it from ``GET /v1/models``, ``/props``, ``/version``
or ``/get_model_info``, contributes extra request-body fields (through ``SUT.extra_body``, merged
by the client into every body), names the server's Prometheus metrics by role, describes the
server (version, per-slot context window, ...) for the SUT description in reports, and
implements the ``pytest_llmbench_configure_sut`` settings it can make (:func:`configure`). On the
response side it reads the server's extensions of a streamed object (``parse_extensions``, called
by the client) and recounts tokens in the server's own tokens after a run (``recount_tokens``).

Kinds (:data:`KINDS`, the choices of ``--llm-server-kind``): ``llama.cpp`` (tested live in CI),
``vllm``, ``sglang``, ``openai`` (tested against documented response formats only) and
``openai-compatible`` (anything else: no request extensions, every known response extension read).
The embedded simulator has its own adapter (:data:`SIMULATOR`), found by :func:`adapter_for`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .base import METRIC_ROLES, Fetch, ServerAdapter, ServerClient, http_fetch
from .llamacpp import LLAMACPP
from .others import GENERIC, OPENAI, SGLANG, VLLM
from .simulator import SIMULATOR

__all__ = ["ADAPTERS", "GENERIC", "KINDS", "LLAMACPP", "METRIC_ROLES", "OPENAI", "SGLANG", "SIMULATOR", "VLLM",
           "Fetch", "ServerAdapter", "ServerClient", "adapter_for", "configure", "detect", "get_adapter", "http_fetch",
           "metric_names", "register_restart", "telemetry_names", "unregister_restart"]

#: Detection order: specific servers first, the generic fallback last.
ADAPTERS: tuple[ServerAdapter, ...] = (LLAMACPP, SGLANG, VLLM, OPENAI, GENERIC)
KINDS: tuple[str, ...] = tuple(a.kind for a in ADAPTERS)
_BY_KIND = {a.kind: a for a in ADAPTERS}
_ALIASES = {"llamacpp": "llama.cpp", "llama-cpp": "llama.cpp", "llama-server": "llama.cpp", "generic": GENERIC.kind}


def get_adapter(kind: str) -> ServerAdapter:
    """The adapter for ``kind`` (aliases: llamacpp, llama-cpp, generic); ValueError names the kinds."""
    key = _ALIASES.get(kind.strip().lower(), kind.strip().lower())
    if key not in _BY_KIND:
        raise ValueError(f"unknown server kind {kind!r}: use one of {', '.join(KINDS)}")
    return _BY_KIND[key]


def adapter_for(sut: Any) -> ServerAdapter:
    """The adapter a SUT's responses are read with: the embedded simulator's, the identified
    kind's (``sut.server_kind``), else the generic fallback."""
    if getattr(sut, "embedded", False):
        return SIMULATOR
    return _BY_KIND.get(getattr(sut, "server_kind", ""), GENERIC)


def detect(fetch: Fetch, models: dict[str, Any] | None = None) -> tuple[ServerAdapter, str]:
    """Identify the server: (adapter, evidence). ``fetch(path)`` GETs a path on the server root.

    ``/v1/models``'s ``owned_by`` decides first; then the native endpoints each server documents.
    """
    if models is None:
        models = fetch("/v1/models")[1]
    owners = set()
    if isinstance(models, dict):
        for m in models.get("data") or []:
            if isinstance(m, dict) and isinstance(m.get("owned_by"), str):
                owners.add(m["owned_by"].lower())
    for a in ADAPTERS:
        hit = owners & set(a.owned_by)
        if hit:
            return a, f"/v1/models owned_by={sorted(hit)[0]!r}"
    for a in ADAPTERS:
        evidence = a.probe(fetch)
        if evidence:
            return a, evidence
    return GENERIC, "no server-specific endpoint answered"


def metric_names(role: str) -> tuple[str, ...]:
    """Every known server's Prometheus name for ``role`` (see :data:`METRIC_ROLES`): the simulator's,
    then in adapter order."""
    if role not in METRIC_ROLES:
        raise ValueError(f"unknown metric role {role!r}: use one of {', '.join(METRIC_ROLES)}")
    return tuple(n for a in (SIMULATOR, *ADAPTERS) for n in a.metrics.get(role, ()))


def telemetry_names(adapter: ServerAdapter) -> dict[str, tuple[str, ...]]:
    """Role -> Prometheus names the telemetry sampler reads on a server of ``adapter``'s kind: its own
    names, then every other known server's (a vLLM behind a proxy identified as generic still gives
    its ``vllm:*`` series; namespaced names cannot be mistaken)."""
    return {role: tuple(dict.fromkeys((*adapter.metrics.get(role, ()), *metric_names(role))))
            for role in METRIC_ROLES}


# --- restart: servers this process started (the llama-server fixture, the embedded simulator) -----
_RESTARTS: dict[str, Callable[[], None]] = {}


def register_restart(root_url: str, restart: Callable[[], None]) -> None:
    """Make ``configure(sut, "restart", True)`` work for a server this process started."""
    _RESTARTS[root_url.rstrip("/")] = restart


def unregister_restart(root_url: str) -> None:
    _RESTARTS.pop(root_url.rstrip("/"), None)


def configure(sut: Any, setting: str, value: Any) -> bool | None:
    """The adapters' ``pytest_llmbench_configure_sut``: True when made, None when not possible.

    ``restart`` works for any server this process started (registered with :func:`register_restart`);
    the other settings are the SUT's adapter's (``sut.server_kind``).
    """
    if setting == "restart":
        restart = _RESTARTS.get(sut.root_url.rstrip("/"))
        if restart is None or not value:
            return None
        restart()
        return True
    if getattr(sut, "embedded", False) or not getattr(sut, "server_kind", ""):
        return None
    try:
        adapter = get_adapter(sut.server_kind)
    except ValueError:
        return None
    return adapter.configure(sut, setting, value)
