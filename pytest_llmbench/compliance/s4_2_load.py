"""§4.1 boundary and §4.2 load generator items."""

from __future__ import annotations

import re

from ..settings import BOUNDARIES
from .engine import _Ctx, _need, evaluator, item, threshold, tool_test
from .facts import RunFacts, RunLoad
from .registry import PROTOCOLS, registry
from .verdict import Check

# ============================================================================================
# General evaluators (§4, §7): one per general MUST/SHOULD a client can evaluate from RunFacts
# ============================================================================================


@evaluator("4.1-MUST-1", "5.1.2-MUST-10")
def _boundary(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.sut_boundary is None:
        return Check.unmet(rid, "SUT boundary not declared (--llm-boundary: model-engine, gateway or compound)")
    if f.boundary is None:
        return Check.unmet(rid, f"SUT boundary {f.sut_boundary!r} is not one of {', '.join(BOUNDARIES)}")
    if item(rid).get("before_start") and f.boundary_declared_before_start is not True:
        why = "after" if f.boundary_declared_before_start is False else "not known to be before"
        return Check.unmet(rid, f"SUT boundary {f.boundary} declared {why} the first request", boundary=f.boundary)
    src = f" (set by {f.boundary_source} before the first request)" if f.boundary_source else ""
    return Check.met(rid, f"SUT boundary: {f.boundary}{src}", boundary=f.boundary, source=f.boundary_source)


@evaluator("4.2-MUST-1")
def _load_generator_umbrella(ctx: _Ctx, rid: str) -> Check:
    parts = [r.id for r in registry() if r.level == "MUST" and re.match(r"^4\.2\.[1-6]-", r.id)]
    failing = [p for p in parts if ctx.check(p).fails]
    if failing:
        return Check.unmet(rid, f"load generator requirements unmet: {', '.join(failing)}", unmet=failing)
    return Check.met(rid, f"all {len(parts)} MUSTs of 4.2.1-4.2.6 met", items=parts)


_RESOLUTION = {"4.2.1-MUST-1": ("resolution_must_max_ns", "1 ms"), "4.2.1-SHOULD-1": ("resolution_should_max_ns", "1 µs")}


@evaluator(*_RESOLUTION)
def _resolution(ctx: _Ctx, rid: str) -> Check:
    res = ctx.facts.clock.resolution_ns
    if res is None:
        return _need(rid, "timer resolution")
    name, label = _RESOLUTION[rid]
    limit = threshold(name)
    ok = res <= limit
    c = (Check.met if ok else Check.unmet)(rid, f"interval clock perf_counter resolution {res:g} ns "
                                                f"{'<=' if ok else '>'} {label} (time.get_clock_info on this run)",
                                           resolution_ns=res)
    c.figure, c.source = res, "runtime-check"
    return c


@evaluator("4.2.2-MUST-1")
def _streaming(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.streaming is False:
        return Check.unmet(rid, "responses were not streamed")
    if f.protocol is None or f.streaming is None:
        return _need(rid, "streaming protocol")
    if f.protocol.lower() not in PROTOCOLS:
        return Check.unmet(rid, f"protocol {f.protocol!r} is not one of {', '.join(PROTOCOLS)}")
    n = f.streamed_records
    c = Check.met(rid, f"streaming over {f.protocol.lower()}" + (f": {n} responses arrived as timed event streams"
                                                                  if n else ""), protocol=f.protocol.lower())
    c.figure = n
    return c


_AUDIT_FIELDS = {
    "4.2.2-MUST-2": ("missing_chunk_times", "set of per-chunk arrival times"),
    "4.2.6-MUST-1": ("missing_submit", "submission timestamp"),
    "4.2.6-MUST-2": ("missing_first_token", "first-token timestamp"),
    "4.2.6-MUST-3": ("missing_chunk_times", "arrival time of every later token/chunk"),
    "4.2.6-MUST-4": ("missing_final", "final-token timestamp"),
    "4.2.6-MUST-5": ("missing_input_tokens", "input token count"),
    "4.2.6-MUST-6": ("missing_output_tokens", "output token count"),
    "4.2.6-MUST-7": ("missing_status", "success/failure status"),
}


@evaluator(*_AUDIT_FIELDS)
def _record_field(ctx: _Ctx, rid: str) -> Check:
    audit = ctx.facts.records
    attr, what = _AUDIT_FIELDS[rid]
    if audit is None:
        return _need(rid, "per-request record audit (RecordAudit.from_records)")
    if audit.n == 0:
        return Check.unmet(rid, "no measured requests were recorded")
    missing = getattr(audit, attr)
    if missing:
        c = Check.unmet(rid, f"{missing} of {audit.n} measured records lack a consistent {what}",
                        missing=missing, n=audit.n)
    else:
        c = Check.met(rid, f"all {audit.n} measured records hold a consistent {what}", n=audit.n)
    c.figure = missing
    return c


def _has_cap(f: RunFacts, cap: str) -> bool:
    return cap in f.load.capabilities


def _capability(rid: str, f: RunFacts, caps: tuple[str, ...], what: str, seen: str,
                contradiction: str | None = None) -> Check:
    """Met by this run's records when it exercised ``caps``, unmet when those records contradict the
    capability (``contradiction``), else met by the plugin test that exercises it in CI."""
    used = [c for c in caps if _has_cap(f, c)]
    if used and contradiction:
        return Check.unmet(rid, f"{what}: {contradiction}", exercised=used)
    if len(used) == len(caps):
        c = Check.met(rid, f"{what}: exercised by this run ({seen})", exercised=list(caps))
        c.source = "runtime-check"
        return c
    rest = [c for c in caps if c not in used]
    tests = sorted({tool_test(c) for c in rest})
    lead = f"{', '.join(used)} exercised by this run ({seen}); " if used else ""
    c = Check.met(rid, f"{what}: {lead}{', '.join(rest)} not exercised by this run, verified by the plugin's "
                       f"test {', '.join(tests)}", tests=tests)
    c.source = "tool-verified"
    return c


def _named(run: RunLoad) -> str:
    """``run 'level-3' (40 req/s)``; empty for the unnamed run of top-level facts."""
    if not run.label:
        return ""
    at = f" ({run.rate:.4g} req/s)" if run.model == "open" and run.rate else \
        f" (concurrency {run.concurrency})" if run.concurrency else ""
    return f"run {run.label!r}{at}"


def _of(run: RunLoad) -> str:
    name = _named(run)
    return f" of {name}" if name else ""


def _fit(f: RunFacts, kinds: tuple[str, ...]) -> str | None:
    """A failed goodness-of-fit of a run's real send gaps to its arrival process (one of ``kinds``) at
    its own rate (the worst run, named); None when every fitted run passed or none was tested."""
    limit = threshold("arrival_fit_min_p")
    fitted = [r for r in f.load.per_run() if r.arrival_fit_p is not None and r.arrival in kinds]
    if not fitted:
        return None
    worst = min(fitted, key=lambda r: r.arrival_fit_p or 0.0)
    p = worst.arrival_fit_p or 0.0
    if p < limit:
        return (f"real send gaps{_of(worst)} do not follow {worst.arrival} arrivals at {worst.rate:.4g} req/s "
                f"(KS p = {p:.2g} < {limit:g}; {len(fitted)} run(s) fitted, each against its own rate)")
    return None


@evaluator("4.2.3-MUST-1")
def _open_loop(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    blind = [r for r in f.load.per_run() if r.model == "open" and r.send_lag_n == 0]
    if blind:
        return Check.unmet(rid, f"open-loop {_named(blind[0]) or 'run'} did not record planned vs actual send times")
    return _capability(rid, f, ("open_loop", "absolute_schedule"), "open-loop sends on an absolute schedule",
                       f"{f.load.send_lag_n} sends with planned and actual times")


@evaluator("4.2.3-MUST-2", "4.2.3-SHOULD-1")
def _arrivals(ctx: _Ctx, rid: str) -> Check:
    want = tuple(item(rid)["arrivals"])
    fitted = [r for r in ctx.facts.load.per_run() if r.arrival_fit_p is not None and r.arrival in want]
    if fitted:
        worst = min(fitted, key=lambda r: r.arrival_fit_p or 0.0)
        seen = (f"{len(fitted)} run(s) each fitted against its own rate; lowest KS p = {worst.arrival_fit_p:.2g}"
                f"{_of(worst) or f' at {worst.rate:.4g} req/s'}")
    else:
        ld = ctx.facts.load
        seen = f"{ld.arrival} arrivals at {ld.rate} req/s"
    c = _capability(rid, ctx.facts, want, f"{' and '.join(want)} arrivals", seen, _fit(ctx.facts, want))
    if fitted:
        c.figure = min(r.arrival_fit_p or 0.0 for r in fitted)
    return c


@evaluator("4.2.4-MUST-1")
def _closed_loop(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    limit = threshold("resubmit_gap_p99_max_s")
    closed = [r for r in f.load.per_run() if r.model == "closed"]
    judged = [r for r in closed if r.resubmit_gap_p99_s is not None]
    if closed and not judged and not f.load.runs:
        return Check.unmet(rid, "closed-loop run did not record slot-free vs resubmit times")
    if judged:
        worst = max(judged, key=lambda r: r.resubmit_gap_p99_s or 0.0)
        gap = worst.resubmit_gap_p99_s or 0.0
        ok = gap <= limit
        runs = f"; worst of {len(judged)} closed-loop runs" if len(judged) > 1 else ""
        c = (Check.met if ok else Check.unmet)(
            rid, f"closed loop: completion-to-resubmit gap P99 {gap * 1e3:.3f} ms {'<=' if ok else '>'} "
                 f"{limit * 1e3:g} ms over {worst.resubmit_n} resubmissions{_of(worst)}{runs}",
            resubmit_gap_p99_s=gap, run=worst.label or None)
        c.figure, c.source = gap, "measured"
        return c
    return _capability(rid, f, ("closed_loop",), "closed-loop load", "")


def _isolation_figures(run: RunLoad) -> tuple[list[str], list[str], dict[str, float]]:
    """(failed conditions, met conditions, figures) of §4.2.5-MUST-1 for one open-loop run."""
    rho_max, frac = threshold("send_lag_max_abs_spearman"), threshold("send_lag_p99_max_fraction_of_mean_gap")
    bad: list[str] = []
    good: list[str] = []
    figs: dict[str, float] = {}
    for name, rho in (("in-flight count", run.lag_inflight_rho), ("age of the oldest outstanding response",
                                                                  run.lag_oldest_rho)):
        if rho is None:
            bad.append(f"no Spearman rho of send lag vs {name} (records lack the load state at send)")
            continue
        figs[f"rho_{name}"] = rho
        (good if abs(rho) <= rho_max else bad).append(f"|rho(lag, {name})| = {abs(rho):.3f} "
                                                      f"{'<=' if abs(rho) <= rho_max else '>'} {rho_max:g}")
    p99, gap = run.send_lag_p99_s, run.mean_gap_s
    if p99 is None or not gap:
        bad.append("no send-lag P99 / mean inter-arrival gap")
    else:
        figs["p99_lag_s"], figs["mean_gap_s"] = p99, gap
        ok = p99 <= frac * gap
        (good if ok else bad).append(f"P99 send lag {p99 * 1e3:.3f} ms {'<=' if ok else '>'} {frac:.0%} of the "
                                     f"mean gap {gap * 1e3:.2f} ms")
    return bad, good, figs


@evaluator("4.2.5-MUST-1")
def _isolation(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    open_runs = [r for r in f.load.per_run() if r.model == "open"]
    if not open_runs:
        return _capability(rid, f, ("open_loop", "absolute_schedule"),
                           "open-loop sends independent of responses", "")
    minimum = threshold("send_lag_min_samples")
    judged = [r for r in open_runs if r.send_lag_n >= minimum]
    if not judged:
        n = sum(r.send_lag_n for r in open_runs)
        return Check.unmet(rid, f"{n} open-loop sends recorded (largest run {max(r.send_lag_n for r in open_runs)}):"
                                f" too few to test isolation")
    verdicts = [(r, *_isolation_figures(r)) for r in judged]

    def badness(v: tuple[RunLoad, list[str], list[str], dict[str, float]]) -> tuple[int, float]:
        figs = v[3]
        return len(v[1]), figs.get("p99_lag_s", 0.0) / (figs.get("mean_gap_s") or 1.0)

    run, bad, good, figs = max(verdicts, key=badness)
    failing = sum(1 for v in verdicts if v[1])
    where = (f" ({run.send_lag_n} sends{_of(run)}; {failing} of {len(judged)} open-loop runs fail"
             if len(judged) > 1 else f" ({run.send_lag_n} sends{_of(run)}") + ")"
    text = "; ".join(bad + good) + where
    c = Check.unmet(rid, text, **figs) if bad else Check.met(rid, text, **figs)
    c.figure = figs.get("p99_lag_s")
    return c


@evaluator("4.2.5-MUST-2")
def _async(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    peak, target = f.load.max_inflight, f.load.concurrency if f.load.model == "closed" else None
    serial = (f"closed loop at concurrency {target} but requests never overlapped (max in flight at a send: {peak})"
              if target and target > 1 and peak == 0 else None)
    if serial:
        return Check.unmet(rid, f"asynchronous load generator: {serial}", max_inflight=peak)
    return _capability(rid, f, ("async",), "asynchronous load generator (asyncio)",
                       f"up to {peak} requests outstanding at a send")


