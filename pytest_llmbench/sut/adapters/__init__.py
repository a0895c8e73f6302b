"""Server adapters: every word of a serving engine's protocol beyond the OpenAI API, in one place and
without special cases in the client's hot path (docs/architecture.md, "The adapter's protocol hooks").

An adapter names the server kind, recognises it from ``GET /v1/models`` or the server's own endpoints,
contributes extra request-body fields (through ``SUT.extra_body``, merged by the client into every
body), names the server's Prometheus metrics by role and the page they are on, describes the server
(version, per-slot context window, ...) for the SUT description in reports, and implements the
``pytest_llmbench_configure_sut`` settings it can make (:func:`configure`). For prompts in the
server's own tokens it names its tokenize forms (:class:`TokenizeForm`), its vocabulary size and its
per-request prefix isolation; :func:`prompt_fit` makes the body hook the client is handed
(``fitting.py``). On the response side it reads the server's extensions of a streamed object
(``parse_extensions``, called by the client) and recounts tokens in the server's own tokens after a
run (``recount_tokens``).

This package is the registry: it imports every module of its folder, and a module calls
:func:`register` on its adapters, so a new server kind is one module. Kinds (:data:`KINDS`, the choices
of ``--llm-server-kind``, in detection order): ``llama.cpp`` (tested live in CI), ``sglang``, ``vllm``,
``openai`` (tested against documented response formats only) and ``openai-compatible`` (anything else:
no request extensions, every known response extension read). The embedded simulator has its own
adapter (:data:`SIMULATOR`), found by :func:`adapter_for`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .base import (
    METRIC_ROLES,
    Fetch,
    Post,
    ServerAdapter,
    ServerClient,
    ServerHttp,
    TokenizeForm,
    http_fetch,
    register,
    registered,
    root_url,
    unregister,
)
from .fitting import PromptFit, PromptFitError
from .llamacpp import LLAMACPP
from .others import GENERIC, OPENAI, SGLANG, VLLM
from .simulator import SIMULATOR

if TYPE_CHECKING:
    from ...common.tokenizer import Tokenizer

__all__ = ["ADAPTERS", "GENERIC", "KINDS", "LLAMACPP", "METRIC_ROLES", "OPENAI", "SGLANG", "SIMULATOR", "VLLM",
           "Fetch", "Post", "PromptFit", "PromptFitError", "ServerAdapter", "ServerClient", "ServerHttp",
           "TokenizeForm", "adapter_for", "configure", "detect", "find_tokenize_form", "get_adapter", "histogram_names",
           "http_fetch", "metric_names", "prompt_fit", "register", "register_restart", "root_url", "telemetry_names",
           "tokenize_forms", "tokenize_paths", "unregister", "unregister_restart"]

#: modules of this folder that hold no adapter: the real servers' build-and-run helpers (POSIX ``fcntl``),
#: imported only with those tools
_TOOLS = frozenset({"serving"})


def _discover() -> None:
    """Import every module of this folder (no import list: a new module that registers an adapter is a
    new server kind, as ``measure/registry`` finds metrics)."""
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if not info.name.startswith("_") and info.name not in _TOOLS:
            importlib.import_module(f"{__name__}.{info.name}")


_discover()


def __getattr__(name: str) -> Any:
    """``ADAPTERS`` (the known server kinds in detection order: specific servers first, the generic
    fallback last) and ``KINDS`` (their names, the choices of ``--llm-server-kind``), as registered now."""
    if name == "ADAPTERS":
        return registered()
    if name == "KINDS":
        return tuple(a.kind for a in registered())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def get_adapter(kind: str) -> ServerAdapter:
    """The adapter for ``kind`` or one of its aliases (llamacpp, llama-cpp, generic, ...); ValueError names the kinds."""
    key = kind.strip().lower()
    known = registered()
    for a in known:
        if key == a.kind or key in a.aliases:
            return a
    raise ValueError(f"unknown server kind {kind!r}: use one of {', '.join(a.kind for a in known)}")


def adapter_for(sut: Any) -> ServerAdapter:
    """The adapter a SUT's responses are read with: the embedded simulator's, the identified
    kind's (``sut.server_kind``), else the generic fallback."""
    if getattr(sut, "embedded", False):
        return SIMULATOR
    kind = getattr(sut, "server_kind", "")
    return next((a for a in registered() if a.kind == kind), GENERIC)


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
    known = registered()
    for a in known:
        hit = owners & set(a.owned_by)
        if hit:
            return a, f"/v1/models owned_by={sorted(hit)[0]!r}"
    for a in known:
        evidence = a.probe(fetch)
        if evidence:
            return a, evidence
    return GENERIC, "no server-specific endpoint answered"


def metric_names(role: str) -> tuple[str, ...]:
    """Every known server's Prometheus name for ``role`` (see :data:`METRIC_ROLES`): the simulator's,
    then in adapter order."""
    if role not in METRIC_ROLES:
        raise ValueError(f"unknown metric role {role!r}: use one of {', '.join(METRIC_ROLES)}")
    return tuple(n for a in (SIMULATOR, *registered()) for n in a.metrics.get(role, ()))


def telemetry_names(adapter: ServerAdapter) -> dict[str, tuple[str, ...]]:
    """Role -> Prometheus names the telemetry sampler reads on a server of ``adapter``'s kind: its own
    names, then every other known server's (a vLLM behind a proxy identified as generic still gives
    its ``vllm:*`` series; namespaced names cannot be mistaken)."""
    return {role: tuple(dict.fromkeys((*adapter.metrics.get(role, ()), *metric_names(role))))
            for role in METRIC_ROLES}


def histogram_names(adapter: ServerAdapter) -> dict[str, tuple[str, ...]]:
    """TTFT component -> Prometheus histogram names read on a server of ``adapter``'s kind: its own, then
    every other known server's (namespaced names cannot be mistaken)."""
    roles = dict.fromkeys(r for a in (adapter, *registered()) for r in a.histograms)
    return {role: tuple(dict.fromkeys((*adapter.histograms.get(role, ()),
                                       *(n for a in registered() for n in a.histograms.get(role, ())))))
            for role in roles}


# --- the server's own tokens: the prompt plan's probe and the fitting hook (procedures/prompts.py) ---
def tokenize_forms(adapter: ServerAdapter) -> tuple[TokenizeForm, ...]:
    """The tokenize forms the prompt plan probes on a server of ``adapter``'s kind, in order: the forms
    any server is probed with (the generic adapter's), then the adapter's own that are not among them."""
    return tuple(dict.fromkeys((*GENERIC.tokenize_forms, *adapter.tokenize_forms)))


def tokenize_paths(adapter: ServerAdapter = GENERIC) -> str:
    """The tokenize endpoints :func:`tokenize_forms` probes, for messages (``/tokenize``)."""
    return " or ".join(dict.fromkeys(f.tokenize_path for f in tokenize_forms(adapter)))


def find_tokenize_form(adapter: ServerAdapter, post: Post, model: str) -> TokenizeForm | None:
    """The first of :func:`tokenize_forms` the server answers with tokens (one short text each);
    None when none does, or the server fails or answers something else."""
    for form in tokenize_forms(adapter):
        status, body = post(form.tokenize_path, form.tokenize_body("a b", model))
        verdict = form.answers(status, body)
        if verdict is None:
            return None
        if verdict:
            return form
    return None


def prompt_fit(sut: Any, style: str, tokenizer: Tokenizer | None) -> PromptFit:
    """The body hook that sends ``sut``'s prompts as its own tokens in the tokenize form named ``style``
    (the prompt plan's ``tokenize_style``), with its adapter's prefix isolation."""
    adapter = adapter_for(sut)
    form = next((f for f in tokenize_forms(adapter) if f.name == style), None)
    if form is None:
        raise ValueError(f"no tokenize form {style!r} for a {adapter.title}")
    return PromptFit(form, root_url=sut.root_url, model=sut.model, api=sut.api, tokenizer=tokenizer,
                     headers=sut.headers(), verify=sut.verify_tls, isolate=adapter.isolate_prefix)


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
