"""Warm-up before measurement and its verification (§4.5).

:func:`run_warmup` does, in order (§4.5.1, §4.5.2):

1. probe requests before warm-up (latency of a fixed, short request, sent one at a time);
2. optionally, one request per representative shared prefix to populate the prefix cache;
3. a closed-loop warm-up until at least ``min_requests`` requests have succeeded *and* at least
   ``min_output_tokens`` output tokens were produced (the draft's "whichever is greater" read
   conservatively as both: 100 requests and 10,000 tokens);
4. waiting for the SUT queue to drain: the client has nothing in flight, and when the server
   exposes ``/metrics`` its waiting and running request gauges reach 0;
5. probes after warm-up until consecutive probe latencies vary by less than 10 %.

A procedure may ask for less than the §4.5.1 minimum (the smoke profile does); the result then
says the MUST was not met (:attr:`WarmupResult.minimum_met` false, with the reason) for the
compliance engine. ``cold_start=True`` skips warm-up and labels the run (§4.5.3).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import httpx

from ..client import LLMClient
from ..common import draft
from ..common.records import RequestRecord, RequestSpec
from ..measure.telemetry import read_exposition, read_roles
from ..sut.adapters import metric_names
from .load import ClosedLoop, LoadOptions, LoadProgress, RecordSink, run_load

__all__ = [
    "DRAFT_MIN_OUTPUT_TOKENS",
    "DRAFT_MIN_REQUESTS",
    "ProbeResult",
    "WarmupPolicy",
    "MetricsScraper",
    "WarmupResult",
    "probe",
    "queue_depth",
    "run_warmup",
    "scrape_for",
]

DRAFT_MIN_REQUESTS = draft.value("warmup.min_requests")  # §4.5.1 item 2
DRAFT_MIN_OUTPUT_TOKENS = draft.value("warmup.min_output_tokens")  # §4.5.1 item 2

@dataclass(frozen=True)
class WarmupPolicy:
    """Warm-up parameters. Defaults are the draft's minimums (§4.5.1) and 10 % stability (§4.5.2).

    ``max_requests`` / ``max_duration_s`` bound a warm-up that cannot reach its token target
    (e.g. a server that answers with very short outputs). ``probe_count`` consecutive probes
    must agree within ``probe_tolerance``; up to ``probe_max`` probes are sent after warm-up.
    """

    min_requests: int = DRAFT_MIN_REQUESTS
    min_output_tokens: int = DRAFT_MIN_OUTPUT_TOKENS
    concurrency: int = 8
    max_requests: int | None = None  # default: 20 × min_requests (at least 2000)
    max_duration_s: float = 900.0
    probe_count: int = 3
    probe_max: int = 10
    probe_tolerance: float = draft.value("warmup.probe_max_variation")
    probe_max_tokens: int | None = 16
    drain_timeout_s: float = 120.0
    drain_poll_s: float = 0.2
    metrics_path: str | None = "/metrics"  # the server's metrics page (its adapter's); None: no server gauges
    cold_start: bool = False

    def __post_init__(self) -> None:
        if self.min_requests < 0 or self.min_output_tokens < 0:
            raise ValueError("warm-up minimums must be >= 0")
        if self.concurrency < 1:
            raise ValueError(f"warm-up concurrency must be >= 1, got {self.concurrency}")
        if self.probe_count < 0 or (self.probe_count == 1):
            raise ValueError("probe_count must be 0 (no verification) or >= 2 (consecutive probes)")
        if self.probe_max < self.probe_count:
            raise ValueError(f"probe_max ({self.probe_max}) must be >= probe_count ({self.probe_count})")
        if not 0 < self.probe_tolerance < 1:
            raise ValueError(f"probe_tolerance must be in (0, 1), got {self.probe_tolerance}")

    @property
    def request_cap(self) -> int:
        return self.max_requests if self.max_requests is not None else max(2000, 20 * self.min_requests)


@dataclass(frozen=True)
class ProbeResult:
    """One probe request (§4.5.2). Latencies in seconds; None when the probe failed."""

    when: str  # "before" | "after"
    ok: bool
    e2e_s: float | None
    ttft_s: float | None
    error_type: str | None = None
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens: > 0 shows a prefix cache


@dataclass
class WarmupResult:
    """What the warm-up did, for run.json and the compliance engine (§4.5)."""

    policy: WarmupPolicy
    cold_start: bool = False
    requests: int = 0
    ok: int = 0
    output_tokens: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    duration_s: float = 0.0
    minimum_met: bool = False  # §4.5.1 item 2 (>= 100 requests and >= 10,000 tokens)
    minimum_reason: str | None = None
    drained: bool = False  # §4.5.1 item 3
    drain_method: str = "client"  # "server-metrics" when /metrics gauges were read
    queue_at_end: dict[str, float] | None = None
    telemetry: dict[str, Any] | None = None  # the server's /metrics series during the warm-up (measure/telemetry)
    prefix_requests: int = 0  # §4.5.1 item 4
    probes_before: list[ProbeResult] = field(default_factory=list)
    probes_after: list[ProbeResult] = field(default_factory=list)
    stable: bool | None = None  # §4.5.2; None: not verified
    max_variation: float | None = None  # largest |L_k - L_k-1| / L_k-1 over the last probes
    load: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["policy"] = asdict(self.policy)
        return d


class MetricsScraper:
    """``GET`` the server's metrics page on its root over its own connection (the client's headers and
    TLS setting), so a scrape never waits for, or holds, a slot of the load's connection pool. ``path``:
    default the client's adapter's (``ServerAdapter.metrics_path``). A call returns (status, text), or
    None when the server did not answer (measure/telemetry.Scrape)."""

    def __init__(self, client: LLMClient, path: str | None = None, timeout_s: float = 5.0) -> None:
        self.path = path if path is not None else client.adapter.metrics_path
        self.url = client.server_root + "/" + self.path.lstrip("/")
        self._http = httpx.AsyncClient(headers={k: v for k, v in client.headers.items() if k != "Content-Type"},
                                       verify=client.verify_tls, timeout=timeout_s,
                                       limits=httpx.Limits(max_connections=1, max_keepalive_connections=1))

    async def __call__(self) -> tuple[int, str] | None:
        try:
            r = await self._http.get(self.url)
        except httpx.HTTPError:
            return None
        return r.status_code, r.text

    async def aclose(self) -> None:
        await self._http.aclose()


def scrape_for(client: LLMClient, path: str | None = None) -> MetricsScraper:
    """The telemetry scrape of ``client``'s server (close it with ``aclose``; TelemetrySampler.stop does)."""
    return MetricsScraper(client, path)


async def queue_depth(client: LLMClient, path: str | None = None,
                      scrape: MetricsScraper | None = None) -> dict[str, float] | None:
    """{"waiting": n, "running": n} from the server gauges (and ``gauges``: their Prometheus names
    joined), or None when not available."""
    own = scrape is None
    scrape = scrape or MetricsScraper(client, path)
    try:
        got = await scrape()
    finally:
        if own:
            await scrape.aclose()
    if got is None or got[0] != 200:
        return None
    try:
        # every known server's queue gauges (adapters.metric_names: the simulator's first), first match wins
        roles = read_roles(read_exposition(got[1]), {"waiting": metric_names("waiting"),
                                                     "running": metric_names("running")})
    except ValueError:
        return None
    if len(roles) != 2:
        return None
    return {"waiting": roles["waiting"][2], "running": roles["running"][2]}


async def probe(client: LLMClient, spec: RequestSpec, when: str, *, sink: RecordSink | None = None) -> ProbeResult:
    """Send one probe request (phase ``probe``) and summarise it."""
    rec = await client.send(spec, phase="probe")
    if sink is not None:
        sink.write(rec)
    if rec.ok and rec.end_ns is not None:
        ttft = (rec.first_token_ns - rec.sent_ns) / 1e9 if rec.first_token_ns is not None else None
        return ProbeResult(when, True, (rec.end_ns - rec.sent_ns) / 1e9, ttft, cached_tokens=rec.cached_tokens)
    return ProbeResult(when, False, None, None, rec.error_type.value if rec.error_type else None,
                       cached_tokens=rec.cached_tokens)


def _max_variation(lat: Sequence[float]) -> float:
    return max(abs(b - a) / a if a > 0 else math.inf for a, b in itertools.pairwise(lat))


async def run_warmup(
    client: LLMClient,
    specs: Sequence[RequestSpec],
    policy: WarmupPolicy | None = None,
    *,
    probe_spec: RequestSpec | None = None,
    prefix_specs: Sequence[RequestSpec] = (),
    sink: RecordSink | None = None,
    on_record: Callable[[RequestRecord], None] | None = None,
) -> WarmupResult:
    """Warm the SUT up as §4.5 asks and report what was done.

    ``specs`` are cycled for the warm-up load; ``probe_spec`` (default: the first spec with
    ``max_tokens`` capped at ``policy.probe_max_tokens``) is the fixed probe; ``prefix_specs``
    (one per representative shared prefix) populate the prefix cache first (§4.5.1 item 4).
    Warm-up records (phase ``warmup``/``probe``) go to ``sink`` if given, never into a
    measurement.
    """
    policy = policy or WarmupPolicy()
    result = WarmupResult(policy=policy)
    if policy.cold_start:
        result.cold_start = True
        result.minimum_reason = "cold-start measurement: warm-up skipped (§4.5.3)"
        return result
    if not specs:
        raise ValueError("run_warmup needs at least one RequestSpec")
    probe_spec = probe_spec if probe_spec is not None else _probe_spec(specs[0], policy)
    t0 = time.perf_counter_ns()

    for _ in range(policy.probe_count):
        result.probes_before.append(await probe(client, probe_spec, "before", sink=sink))
    options = LoadOptions(phase="warmup", drain_timeout_s=policy.drain_timeout_s)
    if prefix_specs:
        pre = await run_load(client, list(prefix_specs), ClosedLoop(policy.concurrency), options,
                             sink=sink, on_record=on_record)
        result.prefix_requests = pre.sent

    def enough(p: LoadProgress) -> bool:
        return p.ok >= policy.min_requests and p.output_tokens >= policy.min_output_tokens

    load = await run_load(
        client,
        itertools.cycle(specs),
        ClosedLoop(policy.concurrency, max_requests=policy.request_cap, duration_s=policy.max_duration_s),
        replace(options, stop=enough),
        sink=sink,
        on_record=on_record,
        keep_records=False,
    )
    result.load = load.to_json()
    result.requests = load.sent
    result.ok = load.ok
    result.output_tokens = load.output_tokens
    result.errors = load.errors
    result.minimum_reason = _short_of_minimum(policy, load.ok, load.output_tokens)
    result.minimum_met = result.minimum_reason is None
    # drain (§4.5.1 item 3): nothing in flight client-side (run_load returned); then server gauges
    result.drained = load.cancelled == 0
    await _drain_server(client, policy, result)
    await _verify(client, probe_spec, policy, result, sink)
    result.duration_s = (time.perf_counter_ns() - t0) / 1e9
    return result


def _probe_spec(first: RequestSpec, policy: WarmupPolicy) -> RequestSpec:
    """The fixed probe: the first spec with ``max_tokens`` capped at ``policy.probe_max_tokens``."""
    if policy.probe_max_tokens is None or first.max_tokens <= policy.probe_max_tokens:
        return first
    cap = policy.probe_max_tokens
    return replace(first, max_tokens=cap, min_tokens=None if first.min_tokens is None else min(first.min_tokens, cap))


def _short_of_minimum(policy: WarmupPolicy, ok: int, output_tokens: int) -> str | None:
    """Why the warm-up falls short of §4.5.1 item 2 (the policy asked for less, or the SUT gave less); None: met."""
    reasons = []
    if policy.min_requests < DRAFT_MIN_REQUESTS or policy.min_output_tokens < DRAFT_MIN_OUTPUT_TOKENS:
        reasons.append(
            f"warm-up policy asks for {policy.min_requests} requests / {policy.min_output_tokens} output "
            f"tokens, below the §4.5.1 minimum of {DRAFT_MIN_REQUESTS} / {DRAFT_MIN_OUTPUT_TOKENS}"
        )
    if ok < DRAFT_MIN_REQUESTS or output_tokens < DRAFT_MIN_OUTPUT_TOKENS:
        reasons.append(
            f"warm-up processed {ok} successful requests and {output_tokens} output tokens "
            f"(§4.5.1 needs >= {DRAFT_MIN_REQUESTS} and >= {DRAFT_MIN_OUTPUT_TOKENS})"
        )
    return "; ".join(reasons) or None


async def _drain_server(client: LLMClient, policy: WarmupPolicy, result: WarmupResult) -> None:
    """§4.5.1 item 3 on the server's side: wait until its waiting and running gauges read 0 (where
    ``/metrics`` has them), for at most ``policy.drain_timeout_s``; a timeout marks it not drained."""
    if not policy.metrics_path:
        return
    deadline = time.monotonic() + policy.drain_timeout_s
    scrape = MetricsScraper(client, policy.metrics_path)
    try:
        while True:
            q = await queue_depth(client, policy.metrics_path, scrape)
            if q is None:
                break
            result.drain_method = "server-metrics"
            result.queue_at_end = q
            if q["waiting"] == 0 and q["running"] == 0:
                break
            if time.monotonic() >= deadline:
                result.drained = False
                break
            await asyncio.sleep(policy.drain_poll_s)
    finally:
        await scrape.aclose()


async def _verify(client: LLMClient, probe_spec: RequestSpec, policy: WarmupPolicy, result: WarmupResult,
                  sink: RecordSink | None) -> None:
    """§4.5.2: probes until ``probe_count`` consecutive ones succeed and vary by less than the
    tolerance, at most ``probe_max``."""
    if not policy.probe_count:
        return
    while len(result.probes_after) < policy.probe_max:
        result.probes_after.append(await probe(client, probe_spec, "after", sink=sink))
        last = result.probes_after[-policy.probe_count :]
        if len(last) < policy.probe_count:
            continue
        if not all(p.ok for p in last):
            result.stable = False
            continue
        result.max_variation = _max_variation([p.e2e_s for p in last])  # type: ignore[misc]
        result.stable = result.max_variation < policy.probe_tolerance
        if result.stable:
            break
