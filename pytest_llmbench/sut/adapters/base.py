"""The adapter interface and the small HTTP helper adapters use (no pytest, no load generator)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from ...common.records import RequestRecord

#: Roles of server metrics the procedures read and measure/telemetry.py samples during every run; each
#: adapter names its Prometheus series per role: gauges ``waiting``, ``running`` (requests), ``kv_usage``
#: (fraction of the KV cache in use); counters ``preemptions`` (events), ``prefix_hits``/``prefix_queries``
#: (prefix-cache lookups, in the server's unit), ``requests_preempted`` (requests preempted at least once),
#: ``requests_finished``.
METRIC_ROLES = ("waiting", "running", "preemptions", "kv_usage", "prefix_hits", "prefix_queries",
                "requests_preempted", "requests_finished")

#: ``fetch(path)`` GETs ``path`` on the server root -> (HTTP status, parsed JSON or text; None on failure).
Fetch = Callable[[str], tuple[int, Any]]


def models_tokenizer(fetch: Fetch) -> dict[str, Any]:
    """The tokenizer the server counts in, as ``/v1/models`` names it (§4.4.1): the first model's
    ``root`` (vLLM, SGLang: the Hugging Face id or path it was loaded from) else its ``id``, and
    llama.cpp's ``meta.n_vocab``; {} when the endpoint lists no model. Keys ``tokenizer_*``."""
    status, body = fetch("/v1/models")
    models = [m for m in (body.get("data") or []) if isinstance(m, dict)] if status == 200 and isinstance(body, dict) else []
    if not models:
        return {}
    m, info = models[0], {}
    for key in ("root", "id"):
        if isinstance(m.get(key), str) and m[key]:
            info["tokenizer_name"] = m[key]
            info["tokenizer_source"] = f"/v1/models {key} (the model's own tokenizer)"
            break
    meta = m.get("meta")
    if isinstance(meta, dict) and isinstance(meta.get("n_vocab"), int) and meta["n_vocab"] > 0:
        info["tokenizer_vocab_size"] = meta["n_vocab"]
        info["tokenizer_vocab_size_source"] = "/v1/models meta.n_vocab"
    return info


def http_fetch(root_url: str, headers: Mapping[str, str] | None = None, *, verify: bool = True,
               timeout: float = 10.0) -> Fetch:
    """A :data:`Fetch` over httpx; a network failure is status 0 (detection moves on)."""
    root = root_url.rstrip("/")

    def fetch(path: str) -> tuple[int, Any]:
        try:
            r = httpx.get(root + path, headers=dict(headers or {}), verify=verify, timeout=timeout)
        except httpx.HTTPError:
            return 0, None
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, r.text

    return fetch


def sut_post(sut: Any, path: str, json: Any = None, timeout: float = 30.0) -> httpx.Response:
    """POST on the SUT's server root with its headers (the API key is read from the environment)."""
    return httpx.post(sut.root_url + path, json=json, headers=sut.headers(), verify=sut.verify_tls, timeout=timeout)


class ServerClient(Protocol):
    """What :meth:`ServerAdapter.recount_tokens` uses of the load generator's client (duck-typed:
    the sut layer imports no client)."""

    @property
    def server_root(self) -> str: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def verify_tls(self) -> bool: ...


@dataclass(frozen=True)
class ServerAdapter:
    """One serving engine's extensions. Subclasses override :meth:`probe`, :meth:`describe`,
    :meth:`configure`, and on the response side :attr:`extension_keys`, :meth:`parse_extensions`
    and :meth:`recount_tokens`; the data fields say the rest.

    ``request_fields``: body fields sent with every request (through ``SUT.extra_body``).
    ``metrics``: role (:data:`METRIC_ROLES`) -> Prometheus names, first present wins.
    ``documented``: the server versions whose documented formats the offline tests use.
    """

    kind: str
    title: str
    owned_by: tuple[str, ...] = ()
    request_fields: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    honours: tuple[str, ...] = ()  # OpenAI extensions the server honours (ignore_eos, min_tokens, ...)
    reuse_connections: bool = True  # False: the server closes kept-alive connections under load
    tested_live: bool = False
    documented: str = ""

    def probe(self, fetch: Fetch) -> str | None:
        """Evidence that the server at ``fetch`` is this kind (None: not recognised this way)."""
        return None

    def describe(self, fetch: Fetch) -> dict[str, Any]:
        """Facts for the SUT description (version, context window, ...); never secrets."""
        return {}

    def configure(self, sut: Any, setting: str, value: Any) -> bool | None:
        """Make a ``pytest_llmbench_configure_sut`` setting; None when this server cannot."""
        return None

    @property
    def extension_keys(self) -> frozenset[str]:
        """Top-level keys of a streamed response object that carry this server's extensions: the
        client calls :meth:`parse_extensions` on an object holding one (and on every metadata object)."""
        return frozenset()

    def parse_extensions(self, obj: dict[str, Any], rec: RequestRecord) -> None:
        """Record this server's extensions of one streamed response object (App. B.1.1) in ``rec``
        (``server_timing``, ``server_token_ns``). Runs on the client's read path: keep it short."""
        return None

    async def recount_tokens(self, records: Sequence[RequestRecord], client: ServerClient) -> int:
        """After a run, recount per-chunk output tokens in the server's own tokens (§4.4,
        measure/tokencount.py). Returns the number of records recounted; 0 keeps the reference counts."""
        return 0

    def summary(self) -> dict[str, Any]:
        return {"kind": self.kind, "title": self.title, "honours": list(self.honours),
                "tested_live": self.tested_live,
                "reuse_connections": self.reuse_connections, "documented_formats": self.documented}
