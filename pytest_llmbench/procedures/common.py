"""Steps every procedure shares: the client, warm-up (§4.5), a measured load run, facts, verdict.

A procedure module composes these; it never talks to the transport, the storage or the
compliance registry directly. Every measured run is a directory under the procedure's run root
(``records.jsonl`` streamed + ``run.json``), so reports can be rebuilt from disk.

Memory does not grow with a run's records: each finished record goes to disk and to the run's
``FrameBuilder`` (what the summariser reads) and its App. B.2.1 tally; afterwards a run's records
(``Measured.records``) are a view that reads them back from disk on each pass, and the facts are
computed over such passes (docs/load-generator.md, "Memory").
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import socket
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from ..client import ClientConfig, LLMClient
from ..common import draft
from ..common.files import write_text_atomic
from ..common.records import ClockAnchor, ErrorType, RequestRecord, RequestSpec
from ..common.storage import RecordsView, RunMetadata, RunWriter
from ..compliance import (
    LOAD_CAPABILITIES,
    Check,
    ClockFacts,
    Declarations,
    LoadFacts,
    RecordAudit,
    RunFacts,
    RunLoad,
    WarmupFacts,
    effective_declarations,
    evaluate_test,
    timestamp_format_of,
)
from ..loadgen.load import ClosedLoop, LoadOptions, LoadResult, OpenLoop, run_load
from ..loadgen.selfcheck import option_c_error
from ..loadgen.shards import NotShardable, backend_for, run_sharded
from ..loadgen.warmup import WarmupPolicy, WarmupResult, run_warmup, scrape_for
from ..measure import tokencount
from ..measure.chunking import ItlDecision, ItlTally, decide_itl
from ..measure.export_aiperf import write_aiperf_export
from ..measure.frame import FrameBuilder
from ..measure.refusals import RefusalPolicy
from ..measure.summary import RunMetrics, summarize
from ..measure.telemetry import TelemetrySampler, TelemetrySeries
from ..sut.adapters import prompt_fit, telemetry_names
from ..sut.system import self_declarations, simulator_guardrails
from .base import ProcedureContext, ProcedureResult, RunSummary
from .prompts import check_server_alive, plan_prompts, prefit

__all__ = [
    "CountingTally",
    "Measured",
    "RunRecords",
    "client_for",
    "declarations",
    "finish",
    "itl_decision_for",
    "itl_option_for",
    "level_duration",
    "level_requests",
    "measure",
    "request_floor_s",
    "run_facts",
    "tokenizer_facts",
    "warm_up",
]

HEARTBEAT_S = 10.0  # progress lines at least this often (the reporter shows one per 15 s in a CI log)


@dataclass
class Measured:
    """One measured load run: the load generator's result, its metrics and the server's telemetry
    (its /metrics series on the run's clock, and every series of the first and last scrape)."""

    load: LoadResult
    summary: RunSummary
    telemetry: TelemetrySeries = field(default_factory=lambda: TelemetrySeries(status="not sampled"))
    server_before: dict[str, float] | None = None
    server_after: dict[str, float] | None = None

    @property
    def queue_samples(self) -> list[tuple[float, float]]:
        """(s since the load's start, the server's waiting gauge): empty when the server exposes none."""
        return self.telemetry.points("waiting")

    def server_increase(self, role: str) -> float | None:
        """A server counter's increase over the run by its role (sut/adapters METRIC_ROLES), from the
        sampled series (reset-aware); None when the server does not expose it."""
        return self.telemetry.increase(role)

    @property
    def metrics(self) -> RunMetrics:
        return self.summary.metrics

    @property
    def records(self) -> Sequence[RequestRecord]:
        """The run's records: for a run :func:`measure` made, a :class:`~..common.storage.RecordsView`
        (re-iterable, read from disk on each pass, ``len()`` known), never a list held in memory."""
        return self.load.records

    def server_delta(self, name: str) -> float | None:
        """Increase of a server counter over the run (None when the server has no /metrics)."""
        if self.server_before is None or self.server_after is None:
            return None
        if name not in self.server_after:
            return None
        return self.server_after[name] - self.server_before.get(name, 0.0)


def refusal_policy(settings: Any) -> RefusalPolicy:
    """What counts as a refusal besides the built-in rules: the declared codes and text pattern (§4.8.1)."""
    codes = tuple(c.strip() for item in (settings.refusal_codes or ()) for c in str(item).split(",") if c.strip())
    return RefusalPolicy(codes=codes, pattern=settings.refusal_pattern)


def client_for(ctx: ProcedureContext, *, max_connections: int | None = None) -> LLMClient:
    """A client for the SUT with the session's settings (§4.2, §4.6)."""
    sut, s = ctx.sut, ctx.settings
    config = ClientConfig(
        base_url=sut.base_url,
        model=sut.model,
        api=sut.api,
        api_key_env=sut.api_key_env,
        verify_tls=sut.verify_tls,
        total_timeout_s=s.timeout,
        read_timeout_s=s.timeout,  # a saturated server may stay silent until prefill: --llm-timeout bounds it
        token_id_prompts=sut.api == "completions",
        request_server_timing=sut.embedded,
        tokenizer=None,
        http_trace=s.http_trace,
        extra_body=sut.extra_body,  # the SUT's live mapping: adapter fields and configuration switches
        send_extra_fields=sut.send_extra_fields,
        reuse_connections=sut.reuse_connections,
        refusals=refusal_policy(s),
    )
    plan = plan_prompts(sut)  # the prompt mode that fits the server (prompts.py)
    # reference ids only where the server's vocabulary holds them (a shard rebuilding a client from this
    # config sends text otherwise); in server-ids mode the adapter's prompt-fitting hook sends its fitted ids
    config = dataclasses.replace(config, token_id_prompts=config.token_id_prompts and plan.mode == "reference-ids")
    hook = (prompt_fit(sut, plan.tokenize_style, ctx.tokenizer)
            if plan.mode == "server-ids" and plan.tokenize_style else None)
    return LLMClient(config, max_connections=max_connections, tokenizer=ctx.tokenizer, adapter=sut.adapter,
                     body_hook=hook)


async def warm_up(
    ctx: ProcedureContext,
    client: LLMClient,
    specs: Sequence[RequestSpec],
    *,
    min_requests: int = draft.value("warmup.min_requests"),
    min_output_tokens: int = draft.value("warmup.min_output_tokens"),
    concurrency: int = 8,
    prefix_specs: Sequence[RequestSpec] = (),
    cold_start: bool = False,
    probes: int = 3,
    label: str = "warmup",
) -> WarmupResult:
    """§4.5: at least ``min_requests`` and ``min_output_tokens``, drain, probes before and after.

    A profile may ask for less than the draft's minimum; the result then says so, and
    :func:`run_facts` turns that into an unmet 4.5.1 item (never silently).
    """
    ctx.progress(f"warm-up: >= {min_requests} requests, >= {min_output_tokens} output tokens")
    specs = await prefit(client, ctx, specs)  # type: ignore[assignment]
    policy = WarmupPolicy(
        min_requests=min_requests,
        min_output_tokens=min_output_tokens,
        concurrency=concurrency,
        cold_start=cold_start,
        probe_count=probes,
        probe_max=max(10, probes),
        probe_max_tokens=64,  # long enough that timer jitter stays well below the 10 % band (§4.5.2)
        max_duration_s=_warmup_duration(ctx),
        metrics_path=ctx.sut.adapter.metrics_path,
    )
    telemetry = telemetry_sampler(ctx, client)
    await telemetry.start()
    try:
        with RunWriter(ctx.run_dir(label), keep_text=not ctx.settings.drop_text) as writer:
            result = await run_warmup(client, specs, policy, prefix_specs=prefix_specs, sink=writer)
            await telemetry.stop()  # the series covers the warm-up, its drain and its probes
            result.telemetry = telemetry.series.to_json()
            writer.write_metadata(RunMetadata(parameters={"phase": "warmup"}, profile=ctx.settings.profile,
                                              seed=ctx.settings.seed, warmup=result.to_json(),
                                              tokenizer=ctx.tokenizer.declaration.to_json(),
                                              client=client.describe(), cold_start=cold_start))
    finally:
        await telemetry.stop()  # idempotent after the first stop: no scrape once closed
    return result


WARMUP_BUDGET_SHARE = 1 / 3  # of the remaining time budget, at most, for the warm-up


def _warmup_duration(ctx: ProcedureContext) -> float:
    """The warm-up's time cap: the usual bound, cut to a third of the remaining time budget."""
    cap = max(60.0, ctx.settings.timeout)
    left = ctx.remaining_s()
    if left is not None and left * WARMUP_BUDGET_SHARE < cap:
        cap = max(left * WARMUP_BUDGET_SHARE, 1.0)
        ctx.budget_cuts.append(f"warm-up capped at {cap:.0f} s by the time budget")
    return cap


DRAIN_BUDGET_SHARE = 0.2  # of the remaining time budget, at most, for a run's drain


def _budget_load(ctx: ProcedureContext, load: OpenLoop | ClosedLoop, drain_timeout_s: float | None,
                 *, sized: bool = False) -> tuple[OpenLoop | ClosedLoop, float | None, float | None]:
    """The load and drain cut to the remaining time budget: (load, drain, the cap applied or None).

    ``sized``: the caller already fitted the run to the budget (:func:`level_duration`,
    :func:`level_requests`, or a search level, which the level count bounds), so only the drain
    is limited; a run too short to measure anything is worse than a procedure over its budget.
    """
    left = ctx.remaining_s()
    if left is None:
        return load, drain_timeout_s, None
    default_drain = drain_timeout_s if drain_timeout_s is not None else 60.0
    if sized:
        return load, min(default_drain, max(left * DRAIN_BUDGET_SHARE, 10.0)), None
    drain = min(default_drain, max(left * DRAIN_BUDGET_SHARE, 2.0))
    cap = max(left - drain, 1.0)  # a run past the budget still measures for 1 s
    if load.duration_s is not None and load.duration_s <= cap:
        return load, drain, None
    return dataclasses.replace(load, duration_s=cap), drain, cap


def _level_share_s(ctx: ProcedureContext, levels_left: int) -> float | None:
    """The measuring time each of the ``levels_left`` load levels gets of the remaining budget."""
    left = ctx.remaining_s()
    if left is None:
        return None
    return max(left, 0.0) * (1.0 - DRAIN_BUDGET_SHARE) / max(levels_left, 1)


def request_floor_s(rate: float, duration_s: float, min_requests: int) -> float:
    """``duration_s``, or longer on a slow SUT: long enough to expect ``min_requests`` arrivals at
    ``rate`` (a level of one or two requests measures nothing)."""
    return max(duration_s, min_requests / rate) if rate > 0 else duration_s


PROBE_MIN_COMPLETIONS = 10  # a closed-loop capacity probe runs long enough to complete about this many
PROBE_MAX_S = 120.0  # ... but no longer than this


def probe_window_s(duration_s: float, warmup: WarmupResult | None) -> float:
    """A closed-loop capacity probe's length: ``duration_s``, longer when the warm-up's completion
    rate (at a lower concurrency, so a lower bound on the probe's) says fewer than
    ``PROBE_MIN_COMPLETIONS`` requests would complete; at most ``PROBE_MAX_S`` (or ``duration_s``)."""
    if warmup is None or not warmup.ok or not warmup.duration_s > 0:
        return duration_s
    rate = warmup.ok / warmup.duration_s
    return min(max(duration_s, PROBE_MIN_COMPLETIONS / rate), max(PROBE_MAX_S, duration_s))


def level_duration(ctx: ProcedureContext, label: str, rate: float, duration_s: float, *,
                   min_requests: int, levels_left: int = 1) -> float:
    """An open-loop level's length (§4.2.3): ``duration_s``, longer when a slow SUT would get fewer
    than ``min_requests`` arrivals at ``rate``; within a time budget the remaining time is shared
    by the ``levels_left`` levels, never below the ``min_requests`` floor (the cut is noted)."""
    d = request_floor_s(rate, duration_s, min_requests)
    floor = min_requests / rate if rate > 0 else duration_s  # what a budget cut keeps
    share = _level_share_s(ctx, levels_left)
    if share is not None and share < d:
        fitted = max(share, floor)
        if fitted < d:
            ctx.budget_cuts.append(f"{label}: level cut to {fitted:.0f} s by the time budget "
                                   f"(>= {min_requests} arrivals kept)")
        d = fitted
    return d


def level_requests(ctx: ProcedureContext, label: str, rate: float, requests: int, *,
                   min_requests: int, levels_left: int = 1) -> int:
    """A request-count level's size: ``requests``, capped within a time budget to what the
    level's share of the remaining time holds at ``rate`` (capacity-relative, known up front),
    never below ``min_requests`` (the cut is noted)."""
    share = _level_share_s(ctx, levels_left)
    if share is None or rate <= 0 or requests <= min_requests:
        return requests
    fits = max(int(share * rate), min_requests)
    if fits < requests:
        ctx.budget_cuts.append(f"{label}: {fits} of {requests} requests, capped from the capacity by the "
                               f"time budget")
        return fits
    return requests


async def _heartbeat(report: Callable[[], None], period: float) -> None:
    """A progress line at least every ``period`` s, also while no request completes."""
    while True:
        await asyncio.sleep(period)
        report()


def telemetry_sampler(ctx: ProcedureContext, client: LLMClient) -> TelemetrySampler:
    """The server's /metrics sampler for one run: the SUT adapter's series names, the session's interval."""
    return TelemetrySampler(scrape_for(client), telemetry_names(ctx.sut.adapter),
                            interval_s=ctx.settings.telemetry_interval)


async def measure(
    ctx: ProcedureContext,
    client: LLMClient,
    label: str,
    specs: Iterable[RequestSpec],
    load: OpenLoop | ClosedLoop,
    *,
    slos: Sequence[Any] = (),
    drain_timeout_s: float | None = 60.0,
    extra: dict[str, Any] | None = None,
    sized: bool = False,
) -> Measured:
    """Run one measured load level and summarise it (§4.2, §5.x.3); records stream to disk.

    ``sized``: the run was fitted to the time budget by the caller (see :func:`_budget_load`)."""
    specs = await prefit(client, ctx, specs)  # fits the server, or fails before the run
    run_dir = ctx.run_dir(label)
    done = {"n": 0, "err": 0}
    t_start = time.perf_counter()
    total = load.max_requests

    planned_duration = load.duration_s
    load, drain_timeout_s, cap = _budget_load(ctx, load, drain_timeout_s, sized=sized)

    def status() -> None:
        elapsed = time.perf_counter() - t_start
        of = f"/{total}" if total else ""
        if total and done["n"]:
            eta = (elapsed / done["n"]) * (total - done["n"])
        else:
            eta = max((load.duration_s or 0.0) - elapsed, 0.0) if load.duration_s else None
        if cap is not None and eta is not None:
            eta = min(eta, max(cap - elapsed, 0.0))
        remaining = f", ~{eta:.0f} s left" if eta is not None else ""
        ctx.progress(f"{label}: {done['n']}{of} requests, {done['n'] / max(elapsed, 1e-9):.1f} req/s, "
                     f"{done['err']} errors, {elapsed:.0f} s{remaining}")

    frame, itl = FrameBuilder(), ItlTally()  # what the summary and App. B.2.1 need, fed as records finish

    def on_record(rec: RequestRecord) -> None:
        done["n"] += 1
        done["err"] += rec.failed
        _feed(frame, itl, rec)
        status()

    telemetry = telemetry_sampler(ctx, client)
    server_before = await telemetry.start()
    heartbeat = asyncio.create_task(_heartbeat(status, HEARTBEAT_S))
    anchor = ClockAnchor.now()
    result: LoadResult | None = None
    try:
        # spool_text: with --llm-drop-text the records file holds no text, the view still reads it whole
        with RunWriter(run_dir, keep_text=not ctx.settings.drop_text, spool_text=True) as writer:
            result = await _run_measured(ctx, client, specs, load, writer, on_record, drain_timeout_s)
            writer.write_metadata(RunMetadata(
                parameters={"phase": "measure", "label": label, **(extra or {})}, profile=ctx.settings.profile,
                seed=ctx.settings.seed, tokenizer=ctx.tokenizer.declaration.to_json(), clock_anchor=anchor,
                client=client.describe(), loads=[result.to_json()],
                server_metrics=[server_before] if server_before else [],
            ))
    finally:
        heartbeat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await heartbeat
        server_after = await telemetry.stop(origin_ns=result.start_ns if result is not None else None)
    if cap is not None and (result.sent < (total or 0) or planned_duration is not None):
        planned = f"{total} requests" if total and result.sent < total else f"{planned_duration or 0:.0f} s"
        ctx.budget_cuts.append(f"{label}: cut to {cap:.0f} s by the time budget ({result.sent} requests sent, "
                               f"{planned} planned)")
    result.records = writer.view()  # this run's records, read back from disk on each pass
    if any(kind != ErrorType.CANCELLED.value for kind in result.errors):  # only a failed request can show it
        await check_server_alive(client, label, result.records)  # a server that died mid-run fails the procedure
    if await _recount(ctx, client, writer, result.records):  # in the server's tokens (§4.4)
        result.records = writer.view()
        frame, itl = FrameBuilder(), ItlTally()
        for rec in result.records:
            _feed(frame, itl, rec)
    telemetry.series.set_client_in_flight(result.concurrency_samples)
    decision = itl.decision()  # App. B.2.1: the ITL option of this run and its evidence
    # summarised once, from the columns collected as the records finished; throughput over the load's send
    # window (its start to its last send, §5.2.3.2)
    last_send = frame.last_sent_ns  # a closed loop of a fixed count stops sending at its last send, not
    # when its last worker found no work left (after that worker's last response)
    send_end = result.send_end_ns if last_send is None else min(result.send_end_ns, last_send)
    metrics = summarize(frame, slos=slos, itl_option=decision.option, send_window_ns=(result.start_ns, send_end))
    if "aiperf" in ctx.settings.export:  # --llm-export aiperf: AIPerf's files next to the records, from this summary
        write_aiperf_export(run_dir / "aiperf", result.records, metrics, anchor=anchor, tokenizer=ctx.tokenizer)
    summary = RunSummary(
        label=label,
        run_dir=str(run_dir),
        load=_load_summary(result),  # the full LoadResult is in the run's run.json
        metrics=metrics,
        valid=result.valid,
        invalid_reason=result.invalid_reason,
        extra={"clock_anchor_iso": anchor.iso(anchor.perf_ns), "itl_decision": decision.to_json(), **(extra or {})},
        telemetry=telemetry.series.to_json(),
    )
    _write_telemetry(run_dir, telemetry.series)
    return Measured(load=result, summary=summary, telemetry=telemetry.series,
                    server_before=server_before, server_after=server_after)


def _write_telemetry(run_dir: Path, series: TelemetrySeries) -> None:
    """The series beside the run's records (``telemetry.json``), so a run on disk carries it too."""
    write_text_atomic(run_dir / "telemetry.json", json.dumps(series.to_json(), allow_nan=False) + "\n")


def itl_option_for(records: Sequence[RequestRecord]) -> str:
    """The §4.6.3 option App. B.2.1 decides for one run's records (:func:`itl_decision_for`)."""
    return itl_decision_for(records).option


def itl_decision_for(records: Iterable[RequestRecord]) -> ItlDecision:
    """App. B.2.1 per run (measure/chunking.py): C with server per-token times, else direct (B) when
    more than 90 % of the content chunks carry one server token, else A (Time Between Chunks).

    Only successful records count: a level whose requests were all cancelled (overload, 5.3/5.8)
    may hold partial server times on cancelled records, and option C over no successful one fails.
    """
    return decide_itl(r for r in records if r.phase == "measure")


def _feed(frame: FrameBuilder, itl: ItlTally, rec: RequestRecord) -> None:
    """One finished record into the run's summary columns and its App. B.2.1 tally (measured phase)."""
    frame.add(rec)
    if rec.phase == "measure":
        itl.add(rec)


RECOUNT_CONCURRENCY = 4  # /tokenize calls in flight at once while recounting (the adapters' own bound)


async def _recount(ctx: ProcedureContext, client: LLMClient, writer: RunWriter, records: RecordsView) -> bool:
    """Per-chunk output counts in the server's tokens, after the run (§4.4, measure/tokencount.py),
    one record at a time so that no run is held in memory: the adapter is offered the first record
    that needs a server count; when it recounts none (no such endpoint), the reference counts stay
    and the records file is untouched. Otherwise every later record that needs one is offered too
    (a failure leaves that record's counts) and the records file is rewritten, atomically."""
    adapter = ctx.sut.adapter
    first = next(((i, r) for i, r in enumerate(records) if tokencount.needs_server_count(r)), None)
    if first is None or not await adapter.recount_tokens([first[1]], client):
        return False
    at, head = first

    async def each(window: list[RequestRecord]) -> None:
        await asyncio.gather(*(adapter.recount_tokens([r], client) for r in window
                               if tokencount.needs_server_count(r)))

    with writer.rewriting() as out:
        window: list[RequestRecord] = []
        for i, rec in enumerate(records):
            if i <= at:
                out.write(head if i == at else rec)
                continue
            window.append(rec)
            if len(window) == RECOUNT_CONCURRENCY:
                await each(window)
                for r in window:
                    out.write(r)
                window.clear()
        await each(window)
        for r in window:
            out.write(r)
    return True


async def _run_measured(ctx: ProcedureContext, client: LLMClient, specs: Iterable[RequestSpec],
                        load: OpenLoop | ClosedLoop, writer: RunWriter, on_record: Any,
                        drain_timeout_s: float | None) -> LoadResult:
    """The load generator in process, or over shards when ``--llm-workers``/``--llm-ray-address`` ask."""
    s = ctx.settings
    options = LoadOptions(phase="measure", drain_timeout_s=drain_timeout_s, achieved_from_sends=True)
    backend = backend_for(s)
    if backend is not None:
        try:
            return await run_sharded(backend, client, specs, load, options, tokenizer=s.tokenizer, sink=writer,
                                     on_record=on_record, keep_records=False)
        except NotShardable as exc:
            ctx.progress(f"not sharded ({exc}): running in process")
    # no record kept in memory: each goes to the writer (disk) and on_record (the summary's columns)
    return await run_load(client, specs, load, options, sink=writer, on_record=on_record, keep_records=False)


def error_messages(records: Iterable[RequestRecord], top: int = 3) -> list[dict[str, Any]]:
    """The most frequent reasons failed requests gave (cancelled ones are not failures): one example
    message each (``HTTP 400: …`` when the server answered), its error type and count; messages that
    differ only in their numbers count as one."""
    import re
    from collections import Counter

    counts: Counter[str] = Counter()
    example: dict[str, tuple[str, str]] = {}
    for r in records:
        if not r.failed:
            continue
        msg = " ".join(str(r.error_message or "").split())[:200] or "(no message)"
        if r.status is not None and r.status >= 400 and not msg.startswith(f"HTTP {r.status}"):
            msg = f"HTTP {r.status}: {msg}"
        key = re.sub(r"\d+", "#", msg)
        counts[key] += 1
        example.setdefault(key, (msg, r.error_type.value if r.error_type is not None else "error"))
    return [{"message": example[k][0], "type": example[k][1], "count": n} for k, n in counts.most_common(top)]


def _load_summary(result: LoadResult) -> dict[str, Any]:
    """The few load figures a report table shows for one run (§4.2.3–§4.2.5)."""
    arrival = result.parameters.get("arrival") or {}
    d: dict[str, Any] = {"model": result.load_model}
    if result.load_model == "open":
        d.update(arrival=arrival.get("kind"), rate=round(result.requested_rate or 0.0, 3),
                 achieved_rate=round(result.achieved_rate or 0.0, 3))
    else:
        d.update(concurrency=result.concurrency_target, held=round(result.concurrency_mean, 2))
    d.update(sent=result.sent, ok=result.ok, duration_s=round(result.duration_s, 2),
             send_lag_p99_ms=round(result.send_lag.p99_ms, 3) if result.send_lag.p99_ms is not None else None)
    if result.client_delay is not None:  # the client's own delay while receiving (selfcheck.py)
        d["client_delay"] = result.client_delay.to_json()
    errors = error_messages(result.records)
    if errors:  # why requests failed, most frequent first (the headline names the first)
        d["error_messages"] = errors
    option_c = option_c_error(result.records)  # client vs server first-token time (§4.6.3 option C)
    if option_c is not None:
        d["option_c_error"] = option_c
    sharding = result.parameters.get("sharding")
    if sharding:  # per-shard figures for the results document (shards/)
        d["sharding"] = sharding
    return d


def declarations(ctx: ProcedureContext) -> Declarations:
    """The declarations in force for this procedure (public name of :func:`_declarations`)."""
    return _declarations(ctx)


def _declarations(ctx: ProcedureContext) -> Declarations:
    """The declarations in force (compliance.effective_declarations) plus the procedure's own ones."""
    decl = effective_declarations(ctx.settings, self_declarations(ctx.sut))
    if not ctx.declarations:
        return decl
    return Declarations({**dict(decl), **ctx.declarations}, source=decl.source)


def run_facts(
    ctx: ProcedureContext,
    *,
    workload: dict[str, Any],
    warmup: WarmupResult | None,
    measured: Sequence[Measured],
    itl_reported: bool = False,
    prefix_caching: str | None = None,
    prefix_cache_under_test: bool = False,
    exceeds_capacity: bool = False,
) -> RunFacts:
    """The general facts of a procedure's runs (evaluated against the general items)."""
    ctx.session_workloads.add(str(workload.get("name")))

    first = measured[0].load if measured else None
    load = load_facts(measured)
    records = RunRecords(measured)
    scan = _RecordScan()
    audit = RecordAudit.from_records(scan.through(records))  # one pass: the audit and the scan's tallies
    decisions = [{"run": m.summary.label, **m.summary.extra["itl_decision"]} for m in measured
                 if isinstance(m.summary.extra.get("itl_decision"), dict)]
    anchor = first.clock_anchor if first else ClockAnchor.now()
    if warmup is None:
        wf = WarmupFacts()
    else:
        wf = WarmupFacts(
            requests=warmup.ok,
            output_tokens=warmup.output_tokens,
            drained=warmup.drained,
            **_server_queue(warmup, measured),
            probes_before=tuple(p.e2e_s for p in warmup.probes_before if p.e2e_s is not None),
            probes_after=tuple(p.e2e_s for p in warmup.probes_after if p.e2e_s is not None),
            reduced=not warmup.minimum_met and not warmup.cold_start,
            cold_start=warmup.cold_start,
            prefix_populated=(warmup.prefix_requests > 0) if prefix_cache_under_test else None,
        )
    info = ctx.sut.server_info
    guard = info.get("guardrails") if ctx.sut.embedded else None
    # §4.1: the boundary is fixed when the session starts the SUT, before any request: from the
    # option/ini that set it, or the embedded simulator (a model engine) when none did
    src = ctx.settings.sources.get("boundary")
    boundary_from = src if src and src != "default" else ("the embedded simulator" if ctx.sut.embedded else None)
    streamed = scan.streamed
    hosts = _load_hosts(measured)
    ts_sample = anchor.iso(scan.first_sent_ns) if scan.first_sent_ns is not None else None
    pc, pc_source = prefix_cache_state(ctx, warmup, records, prefix_caching)
    return RunFacts(
        sut_boundary=ctx.sut.boundary,
        boundary_declared_before_start=boundary_from is not None,
        boundary_source=boundary_from,
        load=load,
        clock=ClockFacts.local(single_host=_is_loopback(ctx.sut.base_url),
                               sync_method="single-host" if _is_loopback(ctx.sut.base_url) else None,
                               # per-record intervals use one clock each (tool_tests.one_clock_per_interval);
                               # a run window spans hosts when shards ran on more than one
                               cross_host_intervals=len(hosts) > 1,
                               load_hosts=tuple(sorted(hosts)),
                               # the format the run's first send time is written in, read off that text
                               timestamp_format=timestamp_format_of(ts_sample),
                               timestamp_sample=ts_sample),
        # observed: records whose response arrived as an SSE event stream with timed chunks
        streaming=(streamed > 0) if scan.n else None,
        protocol="sse" if streamed else None,
        streamed_records=streamed,
        single_token_chunk_fraction=scan.one_token_chunks / scan.content_chunks if scan.content_chunks else None,
        itl_method=_itl_method(decisions) or ("server" if scan.early_server_stamps else "distributed"),
        itl_decisions=tuple(decisions) or None,
        itl_reported=itl_reported,
        server_token_timestamps=scan.early_server_stamps,
        warmup=wf,
        tokenizer=tokenizer_facts(ctx, scan.counting.used()),
        special_tokens=None,  # client counting: the tokenizer declaration; server counting: declared
        counting_used=scan.counting.used(),
        workload=workload,
        session_workloads=tuple(sorted(ctx.session_workloads | {str(workload.get("name"))})),
        seed=ctx.settings.seed,
        sequence_hash=workload.get("request_sequence_sha256"),
        generator=str((workload.get("generator") or {}).get("name", "pytest_llmbench.workloads"))
        if isinstance(workload.get("generator"), dict) else workload.get("generator"),
        records=audit,
        guardrails=simulator_guardrails(str(guard)) if guard else None,
        prefix_caching=pc,
        prefix_caching_source=pc_source,
        prefix_cache_under_test=prefix_cache_under_test,
        endpoint_scheme=ctx.sut.base_url.split(":", 1)[0],
        endpoint_host=urlsplit(ctx.sut.base_url).hostname,  # held against a clock_sync declaration (§4.7.2)
        tls_verified=ctx.sut.verify_tls,
        exceeds_capacity=exceeds_capacity,
    )


@dataclass
class CountingTally:
    """Per record, the counting option its output count came from (§4.4.2), one record at a time:
    successful records counted by the server's usage (A) or by the client (B)."""

    a: int = 0
    b: int = 0

    def add(self, r: RequestRecord) -> None:
        if r.ok:
            if r.output_tokens_server is not None:
                self.a += 1
            elif r.output_tokens_client is not None:
                self.b += 1

    def used(self) -> dict[str, int]:
        return {k: v for k, v in (("A", self.a), ("B", self.b)) if v}


class RunRecords:
    """Every record of some measured runs (``phase``: of that phase only), run after run,
    re-iterable: each pass reads the runs' records again (from disk for a run :func:`measure` made)."""

    def __init__(self, measured: Sequence[Measured], phase: str | None = None) -> None:
        self._runs = [m.records for m in measured]
        self._phase = phase

    def __iter__(self) -> Iterator[RequestRecord]:
        phase = self._phase
        for records in self._runs:
            for r in records:
                if phase is None or r.phase == phase:
                    yield r


EARLY_RECORDS = 50  # server per-token timestamps are looked for in this many first records


@dataclass
class _RecordScan:
    """What the run facts read of every record, tallied in one pass (:meth:`through`)."""

    n: int = 0
    streamed: int = 0  # records with timed chunks
    content_chunks: int = 0  # chunks that carried tokens
    one_token_chunks: int = 0
    first_sent_ns: int | None = None
    early_server_stamps: bool = False  # server per-token timestamps in the first EARLY_RECORDS records
    counting: CountingTally = field(default_factory=CountingTally)

    def through(self, records: Iterable[RequestRecord]) -> Iterator[RequestRecord]:
        """``records`` passed on unchanged, each tallied on the way."""
        for r in records:
            if self.n < EARLY_RECORDS and r.server_token_ns:
                self.early_server_stamps = True
            self.n += 1
            self.streamed += len(r.chunk_ns) > 0
            for t in r.chunk_tokens:
                if t:
                    self.content_chunks += 1
                    self.one_token_chunks += t == 1
            if r.sent_ns and (self.first_sent_ns is None or r.sent_ns < self.first_sent_ns):
                self.first_sent_ns = r.sent_ns
            self.counting.add(r)
            yield r


def _itl_method(decisions: Sequence[dict[str, Any]]) -> str | None:
    """The §4.6.3 method of the runs (compliance.registry.ITL_METHODS): chunk timing when any run
    took option A (its figures are not ITL), else server when every run took C, else distributed."""
    methods = {d.get("method") for d in decisions}
    if not methods:
        return None
    return "chunk" if "chunk" in methods else ("server" if methods == {"server"} else "distributed")


def _server_queue(warmup: WarmupResult, measured: Sequence[Measured]) -> dict[str, Any]:
    """§4.5.1 item 3 from the server's own gauges: the warm-up's drain read waiting and running at 0,
    and the first measured run's first scrape (before its first request) read 0 waiting. Nothing
    (None: declared or unobservable) when the server exposes no queue gauge."""
    first = measured[0].telemetry if measured else None
    at_start = first.points("waiting") if first is not None else []
    at_start = [(t, v) for t, v in at_start[:1] if t <= 0]  # the scrape before the run's first request
    if warmup.drain_method != "server-metrics" and not at_start:
        return {}
    parts, ok = [], True
    if warmup.drain_method == "server-metrics":
        q = warmup.queue_at_end or {}
        parts.append(f"after warm-up: {q.get('waiting', 0):g} waiting, {q.get('running', 0):g} running")
        ok = bool(warmup.drained)
    if at_start:
        name = first.names.get("waiting", "waiting gauge")  # type: ignore[union-attr]
        parts.append(f"{name} = {at_start[0][1]:g} before the first measured request")
        ok = ok and at_start[0][1] == 0
    return {"server_queue_drained": ok, "server_queue_evidence": "server /metrics " + "; ".join(parts)}


def prefix_cache_state(ctx: ProcedureContext, warmup: WarmupResult | None, records: Iterable[RequestRecord],
                       set_by_procedure: str | None = None) -> tuple[str | None, str | None]:
    """The SUT's prefix-caching state and where it comes from (§5.1.2), or ``(None, None)`` when the
    run does not show it: the procedure's own setting through its SUT hook, what the SUT reports
    (the simulator's /admin/config; an adapter that observed it, e.g. llama.cpp's /props or hook,
    never its documented default), or cached prompt tokens served during this run."""
    info = ctx.sut.server_info
    if set_by_procedure:
        return set_by_procedure, "set by the procedure through its SUT hook"
    if ctx.sut.embedded and "prefix_cache" in info:
        return ("enabled" if info.get("prefix_cache") else "disabled"), "reported by the simulator's /admin/config"
    if isinstance(info.get("prefix_cache"), bool) and info.get("prefix_cache_source"):
        state = "enabled" if info["prefix_cache"] else "disabled"
        return state, f"reported by the server ({info['prefix_cache_source']})"
    return _prefix_cache_observed(warmup, records)


def _prefix_cache_observed(warmup: WarmupResult | None,
                           records: Iterable[RequestRecord]) -> tuple[str | None, str | None]:
    """§5.1.2: prefix caching is enabled when the server reported cached prompt tokens for any
    request of this run (the warm-up probes repeat one prompt); no cached token proves nothing
    (measured prompts are disjoint), so the state is then left to the ``prefix_caching`` declaration."""
    probes = [p for p in ((warmup.probes_before + warmup.probes_after) if warmup else ()) if p.cached_tokens]
    n = hits = most = 0
    for r in records:
        n += 1
        if r.cached_tokens:
            hits, most = hits + 1, max(most, r.cached_tokens)
    if not probes and not hits:
        return None, None
    where = []
    if probes:
        where.append(f"{len(probes)} repeated warm-up probes (max {max(p.cached_tokens or 0 for p in probes)})")
    if hits:
        where.append(f"{hits} of {n} measured requests (max {most})")
    return "enabled", "measured: the server reported cached prompt tokens for " + " and ".join(where)


def _load_hosts(measured: Sequence[Measured]) -> set[str]:
    """Hosts whose clocks timed the records (§4.7.2): this one for an in-process run, every shard's
    host and the parent's for a sharded run (its window runs from the parent's start to the
    last response, moved onto the parent's clock by wall-clock anchors)."""
    hosts: set[str] = set()
    for m in measured:
        sh = m.load.parameters.get("sharding") if isinstance(m.load.parameters, dict) else None
        if sh:
            hosts.update(str(h) for h in sh.get("hosts") or ())
            if sh.get("parent_host"):
                hosts.add(str(sh["parent_host"]))
        else:
            hosts.add(socket.gethostname())
    return hosts


def tokenizer_facts(ctx: ProcedureContext, used: dict[str, int]) -> dict[str, Any]:
    """The tokenizer behind a run's output counts and the counting option (§4.4.1, §4.4.2), from how
    many successful records each option counted (``used``: :meth:`CountingTally.used`).

    Counts from the server's usage (option A) are in the server's tokens: name, version, vocabulary
    size and source come from what the adapter read (``/v1/models`` root/id, llama.cpp ``/props``
    model path and ``meta.n_vocab``, ``tokenizer_*`` in ``server_info``), a field it could not read
    is None (4.4.1 then asks for the ``tokenizer`` declaration). The embedded simulator streams
    reference-tokenizer tokens, so its usage is in the reference tokenizer. Option B: the reference
    tokenizer's declaration.
    """
    option = "+".join(sorted(used)) or "B"
    ref = ctx.tokenizer.declaration.to_json()
    info = ctx.sut.server_info or {}
    if "A" not in used or ctx.sut.embedded or info.get("tokenizer_name") == ref["name"]:
        return {**ref, "counting_option": option, "server": False}
    return {
        "name": info.get("tokenizer_name"), "version": info.get("tokenizer_version"),
        "vocab_size": info.get("tokenizer_vocab_size"), "source": info.get("tokenizer_source"),
        "vocab_size_source": info.get("tokenizer_vocab_size_source"),
        "counting_option": option, "counting_method": "server-usage", "server": True,
        "reference": ref["name"],
    }


def _spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    from scipy.stats import spearmanr

    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return 0.0 if len(x) >= 3 else None  # a constant series carries no association
    rho = float(spearmanr(x, y).statistic)
    return rho if math.isfinite(rho) else None


def _arrival_fit(recs: Iterable[RequestRecord], kind: str | None, rate: float | None) -> float | None:
    """KS p-value of one run's real send gaps against the exponential gaps of a Poisson process at
    that run's rate (§4.2.3); None below 30 sends or for another arrival process."""
    sent = array("q", (r.handoff_ns for r in recs if r.intended_ns is not None and r.sent_ns))  # the client's
    # schedule (connection set-up excluded), of requests that were sent
    return _arrival_fit_of(np.frombuffer(sent, dtype=np.int64), kind, rate)


def _arrival_fit_of(handoff_ns: np.ndarray, kind: str | None, rate: float | None) -> float | None:
    """:func:`_arrival_fit` of the runs' hand-over times (ns, any order)."""
    if kind != "poisson" or not rate or handoff_ns.size < 30:
        return None
    from scipy.stats import kstest

    gaps = np.diff(np.sort(handoff_ns)) / 1e9
    return float(kstest(gaps, "expon", args=(0, 1 / rate)).pvalue)


@dataclass
class _SendTimes:
    """One run's sent records (``intended_ns`` known, ``sent_ns`` set) as columns, 8 bytes per value:
    intended and hand-over times, and the load state at the hand-over (§4.2.5 evidence)."""

    intended: array[int] = field(default_factory=lambda: array("q"))
    handoff: array[int] = field(default_factory=lambda: array("q"))
    has_state: array[int] = field(default_factory=lambda: array("b"))  # 1: inflight_at_send recorded
    inflight: array[int] = field(default_factory=lambda: array("q"))  # inflight_at_send or 0
    oldest: array[int] = field(default_factory=lambda: array("q"))  # oldest_outstanding_ns or 0
    max_inflight: int | None = None  # over every record of the run, sent or not

    @classmethod
    def of(cls, records: Iterable[RequestRecord]) -> _SendTimes:
        t = cls()
        for r in records:
            if r.inflight_at_send is not None and (t.max_inflight is None or r.inflight_at_send > t.max_inflight):
                t.max_inflight = r.inflight_at_send
            if r.intended_ns is None or not r.sent_ns:
                continue
            t.intended.append(r.intended_ns)
            t.handoff.append(r.handoff_ns)
            t.has_state.append(r.inflight_at_send is not None)
            t.inflight.append(r.inflight_at_send or 0)
            t.oldest.append(r.oldest_outstanding_ns or 0)
        return t

    def column(self, name: str) -> np.ndarray:
        return np.frombuffer(getattr(self, name), dtype=np.int8 if name == "has_state" else np.int64)


def _run_load(label: str, m: Measured) -> tuple[RunLoad, int | None]:
    """§4.2.3–§4.2.5 figures of one measured run, against its own rate and schedule (one pass over its
    records), and the most requests it had outstanding at a send."""
    ld = m.load
    sends = _SendTimes.of(m.records)
    intended, handoff = sends.column("intended"), sends.column("handoff")
    if ld.load_model != "open":
        # the first request of each slot goes out at the start: a fill, not a completion-to-resubmit gap
        fill = intended == intended.min() if intended.size else np.zeros(0, dtype=bool)
        gaps = (handoff - intended)[~fill] / 1e9
        return RunLoad(label, ld.load_model, concurrency=ld.concurrency_target,
                       resubmit_gap_p99_s=float(np.percentile(gaps, 99)) if gaps.size else None,
                       resubmit_n=int(gaps.size)), sends.max_inflight
    arrival = ld.parameters.get("arrival") or {}
    rate = arrival.get("rate") or ld.requested_rate
    lags = (handoff - intended) / 1e9
    run = RunLoad(label, "open", arrival.get("kind"), rate,
                  send_lag_p99_s=float(np.percentile(lags, 99)) if lags.size else None, send_lag_n=int(lags.size),
                  arrival_fit_p=_arrival_fit_of(handoff, arrival.get("kind"), rate))
    if intended.size > 1:
        run.mean_gap_s = (int(intended.max()) - int(intended.min())) / (intended.size - 1) / 1e9
    state = sends.column("has_state").astype(bool)
    if state.any():
        ls = lags[state].tolist()
        run.lag_inflight_rho = _spearman(ls, sends.column("inflight")[state].astype(np.float64).tolist())
        run.lag_oldest_rho = _spearman(ls, sends.column("oldest")[state].astype(np.float64).tolist())
    return run, sends.max_inflight


def _worst(values: Sequence[float | None], key: Callable[[float], float] = lambda v: v) -> float | None:
    known = [v for v in values if v is not None]
    return max(known, key=key) if known else None


def load_facts(measured: Sequence[Measured]) -> LoadFacts:
    """§4.2.3–§4.2.5 facts observed on the measured records, per run (send lag, the load state at
    send, the fit of the send gaps to the run's own rate); the top-level figures are the worst run's.

    Capabilities are the ones this run exercised; the others are answered by the plugin's tests.
    """
    first = measured[0].load if measured else None
    if first is None:
        return LoadFacts()
    per_run = [_run_load(getattr(getattr(m, "summary", None), "label", None) or f"run {i + 1}", m)
               for i, m in enumerate(measured)]
    runs = tuple(run for run, _ in per_run)
    open_runs = [r for r in runs if r.model == "open"]
    closed_runs = [r for r in runs if r.model != "open"]
    states = [most for _, most in per_run if most is not None]
    facts = LoadFacts(model=first.load_model, concurrency=first.concurrency_target if first.load_model != "open"
                      else None, max_inflight=max(states) if states else None, runs=runs)
    caps: set[str] = set()
    if states and max(states) > 0:
        caps.add("async")  # observed: a request was sent while others were outstanding
    if open_runs:
        o = open_runs[0]
        facts.arrival, facts.rate = o.arrival, o.rate
        facts.send_lag_n = sum(r.send_lag_n for r in open_runs)
        facts.send_lag_p99_s = _worst([r.send_lag_p99_s for r in open_runs])
        facts.mean_gap_s = min((r.mean_gap_s for r in open_runs if r.mean_gap_s), default=None)
        facts.lag_inflight_rho = _worst([r.lag_inflight_rho for r in open_runs], key=abs)
        facts.lag_oldest_rho = _worst([r.lag_oldest_rho for r in open_runs], key=abs)
        facts.arrival_fit_p = _worst([r.arrival_fit_p for r in open_runs], key=lambda p: -p)
        if any(r.send_lag_n for r in open_runs):
            caps.update({"open_loop", "absolute_schedule"})
            caps.update(str(r.arrival) for r in open_runs if r.arrival and r.send_lag_n)
    if closed_runs:
        facts.resubmit_n = sum(r.resubmit_n for r in closed_runs)
        facts.resubmit_gap_p99_s = _worst([r.resubmit_gap_p99_s for r in closed_runs])
        if any(m.load.load_model != "open" and m.records for m in measured):
            caps.add("closed_loop")
    facts.capabilities = tuple(sorted(caps & set(LOAD_CAPABILITIES)))
    return facts


def _is_loopback(url: str) -> bool:
    host = url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


def finish(ctx: ProcedureContext, result: ProcedureResult, facts: RunFacts, checks: dict[str, Check]) -> None:
    """Evaluate compliance (§2) and attach facts, checks and verdict to the result."""
    result.facts = facts
    result.checks = checks
    result.compliance = evaluate_test(result.procedure, checks, facts, _declarations(ctx))
    result.measurements["compliance_verdict"] = result.compliance.verdict.value


async def resolve_load(
    ctx: ProcedureContext,
    spec: Any,
    *,
    max_requests: int | None = None,
    duration_s: float | None = None,
    seed: int,
) -> tuple[OpenLoop | ClosedLoop, dict[str, Any]]:
    """A LoadSpec -> the load generator's OpenLoop/ClosedLoop, resolving capacity fractions.

    ``seed`` drives the arrival gaps (one stream from ``ctx.seeds(...)``). Returns the load and a
    JSON description (with the capacity source when one was used).
    """
    from ..loadgen.load import ArrivalProcess

    desc: dict[str, Any] = spec.to_json()
    if spec.model == "closed":
        return ClosedLoop(spec.concurrency, max_requests=max_requests, duration_s=duration_s), desc
    rate = spec.rate
    if rate is None:
        cap = await ctx.get_capacity("rate")
        if not cap.rate:
            raise RuntimeError("no request-rate capacity available to scale the load by")
        rate = spec.capacity_fraction * cap.rate
        desc.update(resolved_rate=rate, capacity_rate=cap.rate, capacity_source=cap.source)
    arrival = ArrivalProcess(spec.arrival, rate, seed=seed, cv=spec.cv)
    return OpenLoop(arrival, max_requests=max_requests, duration_s=duration_s), desc


