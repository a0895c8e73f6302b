"""The general facts of a procedure's runs (§4), evaluated against the general items, and the verdict step.

:func:`run_facts` reads what every run shows (its records as tallied when they finished, ``tally.py``,
and the load facts of ``sendlag.py``): the SUT boundary (§4.1), clocks (§4.7), streaming and the ITL method (§4.6),
the warm-up (§4.5), token counting (§4.4), the workload (§4.3), the record audit (§4.2.6), the
prefix-cache state (§5.1.2). :func:`finish` evaluates compliance (§2) on the procedure's checks and
these facts, under the :func:`declarations` in force.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

from ..common.records import ClockAnchor, RequestRecord
from ..compliance import (
    Check,
    ClockFacts,
    Declarations,
    RecordAudit,
    RunFacts,
    WarmupFacts,
    effective_declarations,
    evaluate_test,
    timestamp_format_of,
)
from ..loadgen.warmup import WarmupResult
from ..sut.system import self_declarations, simulator_guardrails
from .base import ProcedureContext
from .result import ProcedureResult
from .run import Measured
from .sendlag import load_facts
from .tally import EARLY_RECORDS, CachedTokens, CountingTally, RecordScan, tallies

__all__ = [
    "EARLY_RECORDS",
    "CountingTally",
    "declarations",
    "finish",
    "load_hosts",
    "prefix_cache_observed",
    "prefix_cache_state",
    "run_facts",
    "tokenizer_facts",
]


def declarations(ctx: ProcedureContext) -> Declarations:
    """The declarations in force (compliance.effective_declarations) plus the procedure's own ones."""
    decl = effective_declarations(ctx.settings, self_declarations(ctx.sut))
    if not ctx.declarations:
        return decl
    return Declarations({**dict(decl), **ctx.declarations}, source=decl.source)


def finish(ctx: ProcedureContext, result: ProcedureResult, facts: RunFacts, checks: dict[str, Check]) -> None:
    """Evaluate compliance (§2) and attach facts, checks and verdict to the result."""
    result.facts = facts
    result.checks = checks
    result.compliance = evaluate_test(result.procedure, checks, facts, declarations(ctx))
    result.measurements["compliance_verdict"] = result.compliance.verdict.value


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
    counted = list(tallies(measured))  # what each run's records showed as they finished: no pass over them
    scan = RecordScan.merged(t.scan for t in counted)
    audit = RecordAudit.merged(t.audit for t in counted)
    decisions = [{"run": m.summary.label, **m.summary.extra["itl_decision"]} for m in measured
                 if isinstance(m.summary.extra.get("itl_decision"), dict)]
    anchor = first.clock_anchor if first else ClockAnchor.now()
    wf = _warmup_facts(warmup, measured, prefix_cache_under_test)
    info = ctx.sut.server_info
    guard = info.get("guardrails") if ctx.sut.embedded else None
    # §4.1: the boundary is fixed when the session starts the SUT, before any request: from the
    # option/ini that set it, or the embedded simulator (a model engine) when none did
    src = ctx.settings.sources.get("boundary")
    boundary_from = src if src and src != "default" else ("the embedded simulator" if ctx.sut.embedded else None)
    streamed = scan.streamed
    pc, pc_source = prefix_cache_state(ctx, warmup, CachedTokens.merged(t.cached for t in counted), prefix_caching)
    return RunFacts(
        sut_boundary=ctx.sut.boundary,
        boundary_declared_before_start=boundary_from is not None,
        boundary_source=boundary_from,
        load=load,
        clock=_clock_facts(ctx, measured, anchor, scan.first_sent_ns),
        # observed: records whose response arrived as an SSE event stream with timed chunks
        streaming=(streamed > 0) if scan.n else None,
        protocol=ctx.sut.protocol if streamed else None,  # sse, or grpc (§4.6.1, App. B.1.2)
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
        network_rtt_s=(info.get("network_rtt") or {}).get("rtt_s"),  # session.probe_rtt, before the runs
        network_rtt_method=(info.get("network_rtt") or {}).get("method"),
        endpoint_scheme=ctx.sut.base_url.split(":", 1)[0],
        endpoint_host=urlsplit(ctx.sut.base_url).hostname,  # held against a clock_sync declaration (§4.7.2)
        tls_verified=ctx.sut.verify_tls,
        exceeds_capacity=exceeds_capacity,
    )


def _warmup_facts(warmup: WarmupResult | None, measured: Sequence[Measured],
                  prefix_cache_under_test: bool) -> WarmupFacts:
    """§4.5's facts of the procedure's warm-up (none when it had none)."""
    if warmup is None:
        return WarmupFacts()
    return WarmupFacts(
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


def _clock_facts(ctx: ProcedureContext, measured: Sequence[Measured], anchor: ClockAnchor,
                 first_sent_ns: int | None) -> ClockFacts:
    """§4.7's facts of the runs' clocks: one host or several, and the timestamp format as written."""
    hosts = load_hosts(measured)
    ts_sample = anchor.iso(first_sent_ns) if first_sent_ns is not None else None
    return ClockFacts.local(single_host=_is_loopback(ctx.sut.base_url),
                            sync_method="single-host" if _is_loopback(ctx.sut.base_url) else None,
                            # per-record intervals use one clock each (tool_tests.one_clock_per_interval);
                            # a run window spans hosts when shards ran on more than one
                            cross_host_intervals=len(hosts) > 1,
                            load_hosts=tuple(sorted(hosts)),
                            # the format the run's first send time is written in, read off that text
                            timestamp_format=timestamp_format_of(ts_sample),
                            timestamp_sample=ts_sample)



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


def prefix_cache_state(ctx: ProcedureContext, warmup: WarmupResult | None,
                       records: Iterable[RequestRecord] | CachedTokens,
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
    return prefix_cache_observed(warmup, records)


def prefix_cache_observed(warmup: WarmupResult | None,
                           records: Iterable[RequestRecord] | CachedTokens) -> tuple[str | None, str | None]:
    """§5.1.2: prefix caching is enabled when the server reported cached prompt tokens for any
    request of this run (the warm-up probes repeat one prompt); no cached token proves nothing
    (measured prompts are disjoint), so the state is then left to the ``prefix_caching`` declaration.
    ``records``: the run's records, or their :class:`.tally.CachedTokens` tallied as they finished."""
    probes = [p for p in ((warmup.probes_before + warmup.probes_after) if warmup else ()) if p.cached_tokens]
    cached = records if isinstance(records, CachedTokens) else CachedTokens.of(records)
    n, hits, most = cached.n, cached.hits, cached.most
    if not probes and not hits:
        return None, None
    where = []
    if probes:
        where.append(f"{len(probes)} repeated warm-up probes (max {max(p.cached_tokens or 0 for p in probes)})")
    if hits:
        where.append(f"{hits} of {n} measured requests (max {most})")
    return "enabled", "measured: the server reported cached prompt tokens for " + " and ".join(where)


def load_hosts(measured: Sequence[Measured]) -> set[str]:
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


def _is_loopback(url: str) -> bool:
    host = url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")


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
