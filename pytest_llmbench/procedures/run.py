"""One measured run and what it needs: the client, the warm-up (§4.5), the load run, its recount and summary.

:func:`client_for` makes the client for the SUT; :func:`warm_up` runs §4.5's warm-up; :func:`measure`
runs one measured load level (§4.2, §5.x.3), in process or over load-generator shards
(``--llm-workers``/``--llm-ray-address``), recounts it in the server's tokens (§4.4) and summarises
it once. Every measured run is a directory under the procedure's run root (``records.jsonl``
streamed + ``run.json`` + ``telemetry.json``), so reports can be rebuilt from disk.

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
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..client import ClientConfig, LLMClient
from ..common import draft
from ..common.files import write_text_atomic
from ..common.records import ClockAnchor, RequestRecord, RequestSpec
from ..common.storage import RecordsView, RunMetadata, RunWriter
from ..common.timing import timed
from ..loadgen.load import ClosedLoop, LoadOptions, LoadResult, OpenLoop, run_load
from ..loadgen.selfcheck import option_c_error_of
from ..loadgen.shards import NotShardable, backend_for, run_sharded
from ..loadgen.warmup import WarmupPolicy, WarmupResult, run_warmup, scrape_for
from ..measure import tokencount
from ..measure.chunking import ItlDecision, ItlTally, decide_itl
from ..measure.export_aiperf import write_aiperf_export
from ..measure.frame import FrameBuilder
from ..measure.refusals import RefusalPolicy
from ..measure.summary import RunMetrics, summarize
from ..measure.telemetry import ServerHistogram, TelemetrySampler, TelemetrySeries
from ..sut.adapters import histogram_names, prompt_fit, telemetry_names
from .base import ProcedureContext
from .budget import budget_load, warmup_cap_s
from .prompts import check_server_alive, plan_prompts, prefit
from .rateshape import with_rate_series
from .result import RunSummary
from .stopping import StopWhenDecided
from .tally import FailureMessages, RecordTally

__all__ = [
    "HEARTBEAT_S",
    "RECOUNT_CONCURRENCY",
    "Measured",
    "client_for",
    "error_messages",
    "itl_decision_for",
    "measure",
    "refusal_policy",
    "telemetry_sampler",
    "warm_up",
]


HEARTBEAT_S = 5.0  # progress lines at least this often (the reporter shows one per 10 s in a CI log)
STATUS_EVERY_S = 0.5  # a finished record updates the progress line at most this often (no string per record)


@dataclass
class Measured:
    """One measured load run: the load generator's result, its metrics and the server's telemetry
    (its /metrics series on the run's clock, and every series of the first and last scrape)."""

    load: LoadResult
    summary: RunSummary
    telemetry: TelemetrySeries = field(default_factory=lambda: TelemetrySeries(status="not sampled"))
    server_before: dict[str, float] | None = None
    server_after: dict[str, float] | None = None
    #: what the steps after the run read of its records, tallied as they finished (None: :func:`.tally.tally_of`
    #: tallies ``records`` when first asked)
    tally: RecordTally | None = None
    #: the server's per-request phase histograms over the run, by TTFT component (sut/adapters ``histograms``)
    server_histograms: dict[str, ServerHistogram] = field(default_factory=dict)

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
        if self.server_before is None or self.server_after is None or name not in self.server_after:
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
        output_tokenizer=sut.server_info.get("output_tokenizer"),  # gRPC: decodes the server's output ids
        http_root=sut.http_root,  # gRPC: the server's HTTP side (/metrics), when it has one
        # <think> in the content: the user says so, or the embedded simulator was asked to write it (issue 49)
        think_tags=bool(getattr(s, "think_tags", False)
                        or (sut.embedded and getattr(s, "sim_reasoning", None) == "tags")),
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
        max_duration_s=warmup_cap_s(ctx),
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
    sized: bool | str = False,
    stop: StopWhenDecided | None = None,
) -> Measured:
    """Run one measured load level and summarise it (§4.2, §5.x.3); records stream to disk.

    ``sized``: True, the run was fitted to the time budget by the caller; ``"drain"``, only its drain was (see
    :func:`.budget.budget_load`). ``stop``: the run ends once its SLOs are settled (stopping.py; in
    process only), and its ``run.json`` and summary say how it ended (``stopped``)."""
    specs = await prefit(client, ctx, specs)  # fits the server, or fails before the run
    if stop is not None:
        specs = stop.specs(specs)
    run_dir, total, planned_duration = ctx.run_dir(label), load.max_requests, load.duration_s
    load, drain_timeout_s, cap = budget_load(ctx, load, drain_timeout_s, sized=sized is True,
                                               drain_sized=sized == "drain")
    tally = _RunTally(ctx, label, total, load.duration_s, cap)  # progress, the summary's columns, App. B.2.1
    on_record = tally.on_record if stop is None else _both(tally.on_record, stop.on_record)
    on_record, series = with_rate_series(load, on_record)  # a rate shape: its rate over time (issue 50)

    telemetry = telemetry_sampler(ctx, client)
    server_before = await telemetry.start()
    heartbeat = asyncio.create_task(_heartbeat(tally.status, HEARTBEAT_S))
    anchor = ClockAnchor.now()
    result: LoadResult | None = None
    try:
        # spool_text: with --llm-drop-text the records file holds no text, the view still reads it whole
        with RunWriter(run_dir, keep_text=not ctx.settings.drop_text, spool_text=True) as writer, \
                timed(f"{ctx.run_root.name} {label}: measured run"):
            result = await _run_measured(ctx, client, specs, load, writer, on_record, drain_timeout_s, stop)
            if stop is not None:  # the looks still judged; the run says how it ended (stopped: decided/plan)
                await stop.finish()
                extra = {**(extra or {}), **stop.run_info()}
            writer.write_metadata(RunMetadata(
                parameters={"phase": "measure", "label": label, **(extra or {})}, profile=ctx.settings.profile,
                seed=ctx.settings.seed, tokenizer=ctx.tokenizer.declaration.to_json(), clock_anchor=anchor,
                client=client.describe(), loads=[result.to_json()],
                server_metrics=[server_before] if server_before else [],
            ))
    finally:
        if stop is not None:
            stop.close()
        heartbeat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await heartbeat
        tally.status(done=True)  # the line ends on the final count
        server_after = await telemetry.stop(origin_ns=result.start_ns if result is not None else None)
    decided = stop is not None and stop.stopped  # ended by its SLOs' verdicts, not by the time budget
    if cap is not None and not decided and (result.sent < (total or 0) or planned_duration is not None):
        planned = f"{total} requests" if total and result.sent < total else f"{planned_duration or 0:.0f} s"
        ctx.budget_cuts.append(f"{label}: cut to {cap:.0f} s by the time budget ({result.sent} requests sent, "
                               f"{planned} planned)")
    result.records = writer.view()  # this run's records, read back from disk on each pass
    if tally.records.connection_failures:  # only a connection or stream failure can show a server that died
        await check_server_alive(client, label, result.records)  # a server that died mid-run fails the procedure
    if tally.records.server_count_needed:  # some record's counts may be recounted in the server's tokens (§4.4)
        with timed(f"{ctx.run_root.name} {label}: recount in the server's tokens"):
            if await _recount(ctx, client, writer, result.records, tally):
                result.records = writer.view()
    telemetry.series.set_client_in_flight(result.concurrency_samples)
    with timed(f"{ctx.run_root.name} {label}: summary"):
        extra = extra if series is None else {**(extra or {}), "rate_shape": series.to_json(result.start_ns)}
        summary = _summarise(ctx, label, run_dir, result, tally, slos, anchor, extra, telemetry.series)
    _write_telemetry(run_dir, telemetry.series)
    return Measured(load=result, summary=summary, telemetry=telemetry.series,
                    server_before=server_before, server_after=server_after, tally=tally.records,
                    server_histograms=telemetry.histograms(histogram_names(ctx.sut.adapter)))


class _RunTally:
    """One measured run as its records finish: the progress line (requests, errors, rate, time left),
    the summary's columns, the run's App. B.2.1 tally and what the steps after the run read of its records
    (:class:`.tally.RecordTally`)."""

    def __init__(self, ctx: ProcedureContext, label: str, total: int | None, duration_s: float | None,
                 cap: float | None) -> None:
        self.ctx, self.label, self.total, self.duration_s, self.cap = ctx, label, total, duration_s, cap
        self.n = self.err = 0
        self.t_start = time.perf_counter()
        self._next_status = 0.0  # perf_counter() time of the next per-record progress line
        self.frame, self.itl = FrameBuilder(), ItlTally()  # what the summary and App. B.2.1 need, fed as records finish
        self.records = RecordTally()  # what the load summary, the facts and the sample's hygiene read

    def status(self, *, done: bool = False) -> None:
        """The run's progress line; ``done``: the final count, once the run has ended (its own phase
        ``<label> done``, so the reporter shows it at once, whenever the last line was shown)."""
        now = time.perf_counter()
        self._next_status = now + STATUS_EVERY_S
        elapsed = now - self.t_start
        total, n = self.total, self.n
        of = f"/{total}" if total else ""
        if total and n:
            eta = (elapsed / n) * (total - n)
        else:
            eta = max((self.duration_s or 0.0) - elapsed, 0.0) if self.duration_s else None
        if self.cap is not None and eta is not None:
            eta = min(eta, max(self.cap - elapsed, 0.0))
        remaining = "" if done or eta is None else f", ~{eta:.0f} s left"
        label = f"{self.label} done" if done else self.label
        self.ctx.progress(f"{label}: {n}{of} requests, {n / max(elapsed, 1e-9):.1f} req/s, "
                          f"{self.err} errors, {elapsed:.0f} s{remaining}")

    def on_record(self, rec: RequestRecord) -> None:
        self.n += 1
        self.err += rec.failed
        self.feed(rec)
        if time.perf_counter() >= self._next_status:
            self.status()

    def feed(self, rec: RequestRecord) -> None:
        """One finished record into the summary's columns and the tallies."""
        _feed(self.frame, self.itl, rec)
        self.records.add(rec)

    def restart(self) -> None:
        """Empty columns and tallies, to be fed the run's records again (recounted, :func:`_recount`)."""
        self.frame.close()
        self.frame, self.itl, self.records = FrameBuilder(), ItlTally(), RecordTally()


def _summarise(ctx: ProcedureContext, label: str, run_dir: Path, result: LoadResult, tally: _RunTally,
               slos: Sequence[Any], anchor: ClockAnchor, extra: dict[str, Any] | None,
               series: TelemetrySeries) -> RunSummary:
    """The run's summary, computed once from the columns collected as the records finished (and the
    AIPerf export from it, when asked)."""
    frame = tally.frame
    decision = tally.itl.decision()  # App. B.2.1: the ITL option of this run and its evidence
    # summarised once, from the columns collected as the records finished; throughput over the load's send
    # window (its start to its last send, §5.2.3.2)
    last_send = frame.last_sent_ns  # a closed loop of a fixed count stops sending at its last send, not
    # when its last worker found no work left (after that worker's last response)
    send_end = result.send_end_ns if last_send is None else min(result.send_end_ns, last_send)
    metrics = summarize(frame, slos=slos, itl_option=decision.option, send_window_ns=(result.start_ns, send_end))
    if "aiperf" in ctx.settings.export:  # --llm-export aiperf: AIPerf's files next to the records, from this summary
        write_aiperf_export(run_dir / "aiperf", result.records, metrics, anchor=anchor, tokenizer=ctx.tokenizer)
    return RunSummary(
        label=label,
        run_dir=str(run_dir),
        load=_load_summary(result, tally.records),  # the full LoadResult is in the run's run.json
        metrics=metrics,
        valid=result.valid,
        invalid_reason=result.invalid_reason,
        extra={"clock_anchor_iso": anchor.iso(anchor.perf_ns), "itl_decision": decision.to_json(), **(extra or {})},
        telemetry=series.to_json(),
    )


def _write_telemetry(run_dir: Path, series: TelemetrySeries) -> None:
    """The series beside the run's records (``telemetry.json``), so a run on disk carries it too."""
    write_text_atomic(run_dir / "telemetry.json", json.dumps(series.to_json(), allow_nan=False) + "\n")


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


async def _recount(ctx: ProcedureContext, client: LLMClient, writer: RunWriter, records: RecordsView,
                   tally: _RunTally | None = None) -> bool:
    """Per-chunk output counts in the server's tokens, after the run (§4.4, measure/tokencount.py),
    one record at a time so that no run is held in memory: the adapter is offered the first record
    that needs a server count; when it recounts none (no such endpoint), the reference counts stay
    and the records file is untouched. Otherwise every later record that needs one is offered too
    (a failure leaves that record's counts), the records file is rewritten, atomically, and each record
    written is fed to ``tally`` anew (the summary's columns and tallies of the recounted records)."""
    adapter = ctx.sut.adapter
    first = next(((i, r) for i, r in enumerate(records) if tokencount.needs_server_count(r)), None)
    if first is None or not await adapter.recount_tokens([first[1]], client):
        return False
    at, head = first

    async def each(window: list[RequestRecord]) -> None:
        await asyncio.gather(*(adapter.recount_tokens([r], client) for r in window
                               if tokencount.needs_server_count(r)))

    if tally is not None:
        tally.restart()
    with writer.rewriting() as out:

        def write(r: RequestRecord) -> None:
            out.write(r)
            if tally is not None:
                tally.feed(r)

        window: list[RequestRecord] = []
        for i, rec in enumerate(records):
            if i <= at:
                write(head if i == at else rec)
                continue
            window.append(rec)
            if len(window) == RECOUNT_CONCURRENCY:
                await each(window)
                for r in window:
                    write(r)
                window.clear()
        await each(window)
        for r in window:
            write(r)
    return True


def _both(first: Callable[[RequestRecord], None], second: Callable[[RequestRecord], None]
          ) -> Callable[[RequestRecord], None]:
    """One ``on_record`` that hands each record to ``first``, then ``second``."""
    def both(rec: RequestRecord) -> None:
        first(rec)
        second(rec)

    return both


async def _run_measured(ctx: ProcedureContext, client: LLMClient, specs: Iterable[RequestSpec],
                        load: OpenLoop | ClosedLoop, writer: RunWriter, on_record: Any,
                        drain_timeout_s: float | None, stop: StopWhenDecided | None = None) -> LoadResult:
    """The load generator in process, or over shards when ``--llm-workers``/``--llm-ray-address`` ask (a run
    that stops when decided runs in process: no shard sees the whole run)."""
    s = ctx.settings
    options = LoadOptions(phase="measure", drain_timeout_s=drain_timeout_s, achieved_from_sends=True, stop=stop)
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
    differ only in their numbers count as one (:class:`.tally.FailureMessages`)."""
    messages = FailureMessages()
    for r in records:
        messages.add(r)
    return messages.top(top)


def _load_summary(result: LoadResult, records: RecordTally) -> dict[str, Any]:
    """The few load figures a report table shows for one run (§4.2.3–§4.2.5), with what its records
    showed as they finished (``records``)."""
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
    errors = records.failures.top()
    if errors:  # why requests failed, most frequent first (the headline names the first)
        d["error_messages"] = errors
    option_c = option_c_error_of(records.option_c_ns())  # client vs server first-token time (§4.6.3 option C)
    if option_c is not None:
        d["option_c_error"] = option_c
    sharding = result.parameters.get("sharding")
    if sharding:  # per-shard figures for the results document (shards/)
        d["sharding"] = sharding
    return d
