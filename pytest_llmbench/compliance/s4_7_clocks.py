"""§4.7 clock items, Appendix B.3 and the §4.1.x boundary PARAM rows."""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Mapping

from ..common import draft
from .engine import (
    _blank,
    _Ctx,
    _need,
    _short,
    decide,
    declaration_hook,
    evaluator,
    item,
    onoff,
    tool_test,
)
from .verdict import Check

# ---- 4.7 clocks


@evaluator("4.7.1-SHOULD-1", "B.3.3-PARAM-1")
def _single_machine(ctx: _Ctx, rid: str) -> Check:
    sh = ctx.facts.clock.single_host
    if sh is None:
        return _need(rid, "whether load generator and SUT share a host")
    return decide(rid, ok=bool(sh), met="load generator and SUT on one machine (loopback)",
                  unmet="load generator and SUT on different machines")


def _sync(ctx: _Ctx) -> tuple[str | None, float | None, str]:
    c = ctx.facts.clock
    method, acc, src = c.sync_method, c.sync_accuracy_s, "measured"
    d = ctx.decl.get("clock_sync")
    if isinstance(d, Mapping):
        method = method or d.get("method")
        if acc is None and d.get("accuracy_ms") is not None:
            acc, src = float(d["accuracy_ms"]) / 1e3, f"declared ({ctx.decl.source})"
    return method, acc, src


def endpoint_is_local(host: str | None) -> bool | None:
    """Whether ``host`` is this machine: a loopback address, or a name or address that resolves only to
    addresses of a local interface (one this host can bind). None: no host, or it does not resolve."""
    if not host:
        return None
    host = host.strip("[]")
    try:
        addrs = {ipaddress.ip_address(host.split("%", 1)[0])}
    except ValueError:
        try:
            addrs = {ipaddress.ip_address(str(a[4][0]).split("%", 1)[0]) for a in socket.getaddrinfo(host, None)}
        except (OSError, UnicodeError, ValueError):
            return None
    return bool(addrs) and all(a.is_loopback or _bindable(a) for a in addrs)


def _bindable(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """An address of a local interface: a socket can be bound to it."""
    fam = socket.AF_INET6 if addr.version == 6 else socket.AF_INET
    try:
        with socket.socket(fam, socket.SOCK_DGRAM) as s:
            s.bind((str(addr), 0))
        return True
    except OSError:
        return False


def _single_host_declared(ctx: _Ctx) -> bool:
    d = ctx.decl.get("clock_sync")
    m = str(d.get("method") or "") if isinstance(d, Mapping) else ""
    return m.strip().lower().replace("_", "-").replace(" ", "-") in ("single-host", "single-machine")


def _clock_contradiction(ctx: _Ctx, rid: str) -> Check | None:
    """``clock_sync`` declared single-host held against the endpoint (issue 32): unmet when the endpoint
    resolves to no address of this host; a declaration the endpoint confirms (a local interface) is met."""
    f = ctx.facts
    if f.clock.single_host or not _single_host_declared(ctx):
        return None
    local = endpoint_is_local(f.endpoint_host)
    if local is None:
        return None
    ev = {"declared": dict(ctx.decl["clock_sync"]), "endpoint_host": f.endpoint_host}
    if local:
        return decide(rid, ok=True, met=f"clock sync single-host: the endpoint {f.endpoint_host} is an address of "
                      f"this host (declared single-host, {ctx.decl.source})", source="measured", **ev)
    return decide(rid, ok=False, unmet=f"declared clock_sync single-host ({ctx.decl.source}), but the endpoint "
                  f"{f.endpoint_host} resolves to no address of this host (not loopback, not a local interface): "
                  "declare the sync method and accuracy between the two hosts", source="measured", **ev)


@evaluator("4.7.2-MUST-1")
def _ntp(ctx: _Ctx, rid: str) -> Check:
    if ctx.facts.clock.single_host:
        return decide(rid, ok=None, na="single machine: no clock synchronisation needed")
    if (c := _clock_contradiction(ctx, rid)) is not None:
        return c
    method, acc, src = _sync(ctx)
    if acc is None:
        return decide(rid, ok=None, needs="clock sync accuracy unknown: declare 'clock_sync' {method, accuracy_ms} in "
                      "[tool.llmbench.declarations]")
    limit = draft.value("clock.ntp_max_s")  # §4.7.2
    return decide(rid, ok=acc <= limit,
                  met=f"clock sync {method or '?'} accuracy {acc * 1e3:g} ms <= {limit * 1e3:g} ms ({src})",
                  unmet=f"clock sync accuracy {acc * 1e3:g} ms > {limit * 1e3:g} ms ({src})", accuracy_s=acc)


declaration_hook("4.7.2-MUST-1", "clock_sync")


@evaluator("4.7.2-SHOULD-1")
def _ptp(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    method, _, _ = _sync(ctx)
    if f.clock.single_host:
        return decide(rid, ok=None, na="single machine")
    if f.clock.cross_host_intervals is None:
        return _need(rid, "whether any interval combines timestamps of two hosts")
    hosts = ", ".join(f.clock.load_hosts) or "?"
    if not f.clock.cross_host_intervals:
        test = tool_test("one_clock_per_interval")
        return decide(rid, ok=True, met=f"the records were timed on one host's clock ({hosts}), and each interval "
                      f"takes both ends from one clock ({test}): sub-ms sync not needed", source="runtime-check",
                      test=test, load_hosts=list(f.clock.load_hosts))
    return decide(rid, ok=(method or "").lower() == "ptp",
                  met=f"PTP used for run windows spanning the load hosts ({hosts})",
                  unmet=f"run windows span the clocks of {len(f.clock.load_hosts)} load hosts ({hosts}) "
                        f"synchronised by {method or 'an undeclared method'}; PTP recommended")


@evaluator("4.7.2-MUST-2")
def _sync_statement(ctx: _Ctx, rid: str) -> Check:
    if ctx.facts.clock.single_host:
        return decide(rid, ok=True, met="clock sync: single machine (one clock)")
    if (c := _clock_contradiction(ctx, rid)) is not None:
        return c
    method, acc, src = _sync(ctx)
    if method and acc is not None:
        return decide(rid, ok=True, met=f"clock sync {method}, accuracy {acc * 1e3:g} ms ({src})")
    if ctx.facts.clock.single_host is None and not method:
        return decide(rid, ok=False, unmet="neither single machine nor a clock synchronisation method recorded")
    return decide(rid, ok=None, needs="clock sync method/accuracy unknown: declare 'clock_sync' {method, accuracy_ms} "
                  "in [tool.llmbench.declarations]")


declaration_hook("4.7.2-MUST-2", "clock_sync")


@evaluator("4.7.3-SHOULD-1")
def _rtt(ctx: _Ctx, rid: str) -> Check:
    rtt = ctx.facts.network_rtt_s
    if rtt is None:
        return decide(rid, ok=False, unmet="network RTT not measured separately")
    how = ctx.facts.network_rtt_method or "measured separately"
    return decide(rid, ok=rtt >= 0, met=f"network RTT {rtt * 1e3:.3f} ms ({how})", unmet=f"network RTT {rtt!r}",
                  network_rtt_s=rtt, method=ctx.facts.network_rtt_method, figure=rtt)


@evaluator("4.7.3-MAY-1")
def _adjust_permission(ctx: _Ctx, rid: str) -> Check:
    return decide(rid, ok=True if ctx.facts.latency_adjustment else None,
                  met="permission used: network latency subtracted (raw TTFT kept)",
                  na="permission not used: no latency adjustment")


@evaluator("4.7.3-MUST-1")
def _adjust_documented(ctx: _Ctx, rid: str) -> Check:
    adj = ctx.facts.latency_adjustment
    if not adj:  # the item is conditional ("any adjustment"): without one there is nothing to document
        return decide(rid, ok=None, na="no latency adjustment applied: TTFT/E2E are raw client intervals from "
                      "T_submit (App. B.1.1)")
    missing = [k for k in ("method", "value") if _blank(adj.get(k))]
    return decide(rid, ok=not missing, met=f"latency adjustment documented: {_short(adj)}",
                  unmet=f"latency adjustment lacks {', '.join(missing)}")


_TS_PATTERNS = {
    "iso8601_ms": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$",
    "iso8601_us": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$",
    "unix_ms": r"^\d{13}$",
    "unix_us": r"^\d{16}$",
    "unix_ns": r"^\d{19}$",
}
_TS_RECOMMENDED = ("iso8601_ms", "unix_ms")


def timestamp_format_of(sample: str | None) -> str | None:
    """The §4.7.4 format a written timestamp is in (None: no sample, or no known format)."""
    if sample is None:
        return None
    return next((name for name, pat in _TS_PATTERNS.items() if re.match(pat, str(sample))), None)


@evaluator("4.7.4-MUST-1", "4.7.4-SHOULD-1")
def _timestamps(ctx: _Ctx, rid: str) -> Check:
    c = ctx.facts.clock
    fmt = c.timestamp_format
    if fmt is None and c.timestamp_sample is not None:
        return decide(rid, ok=False,
                      unmet=f"timestamp {c.timestamp_sample!r} is in none of the formats {', '.join(_TS_PATTERNS)}")
    if fmt is None:
        return _need(rid, "timestamp format")
    if fmt not in _TS_PATTERNS:
        return decide(rid, ok=False, unmet=f"timestamp format {fmt!r} not one of {', '.join(_TS_PATTERNS)}")
    if c.timestamp_sample is not None and not re.match(_TS_PATTERNS[fmt], str(c.timestamp_sample)):
        return decide(rid, ok=False, unmet=f"timestamp {c.timestamp_sample!r} does not match format {fmt}")
    return decide(rid, ok=not (item(rid).get("recommended_format") and fmt not in _TS_RECOMMENDED),
                  met=f"timestamps as {fmt}" + (f", e.g. {c.timestamp_sample}" if c.timestamp_sample else ""),
                  unmet=f"timestamps as {fmt}; ISO 8601 with ms or Unix ms recommended")


@evaluator("B.1.1-PARAM-1", "B.1.2-PARAM-1")
def _client_timing_points(ctx: _Ctx, rid: str) -> Check:
    audit = ctx.facts.records
    if audit is None or audit.n == 0:
        return _need(rid, "per-request records")
    return decide(rid, ok=True, met="T_submit at send, T_first at the first content-bearing event parsed "
                  "(records.TTFT_RULE)")


@evaluator("B.3.1-PARAM-1", "B.3.2-PARAM-1")
def _sync_params(ctx: _Ctx, rid: str) -> Check:
    method, acc, src = _sync(ctx)
    limit = draft.value(item(rid)["draft"])  # B.3.1 NTP < 10 ms, B.3.2 PTP < 1 µs
    if acc is None:
        return decide(rid, ok=None, needs="offset unknown: declare 'clock_sync' {method, accuracy_ms}")
    return decide(rid, ok=acc < limit, met=f"{method} offset {acc * 1e3:g} ms ({src})",
                  unmet=f"{method} offset {acc * 1e3:g} ms >= {limit * 1e3:g} ms ({src})")


# ---- 4.1.x boundary definitions (informational PARAM rows)


@evaluator("4.1.1-PARAM-1")
def _model_engine_boundary(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    on = bool(f.guardrails) and any(onoff(f.guardrails.get(k)) == "on" for k in ("input_filter", "output_filter"))
    return decide(rid, ok=not on, met=f"boundary {f.boundary}",
                  unmet="Model Engine boundary but guardrails are on (outside that boundary)")


@evaluator("4.1.2-PARAM-1")
def _gateway_boundary(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    return decide(rid, ok=f.endpoint_scheme is None or f.endpoint_scheme == "https", met=f"boundary {f.boundary}",
                  unmet=f"Application Gateway reached over {f.endpoint_scheme}, not its external HTTPS API")


@evaluator("4.1.3-PARAM-1")
def _compound_boundary(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.boundary == "compound":
        # the plugin has no task driver, retrieval or tool components: only the tester can say what the
        # compound system's boundary holds
        return ctx.needs(rid, None, "the plugin drives a Compound System only through its external API")
    return decide(rid, ok=True, met=f"boundary {f.boundary}")


