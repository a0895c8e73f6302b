"""Helpers shared by the procedures (§5.1–§5.10): request lists, queue trend, capacity errors,
table formatting and declared checks. No I/O here; procedures import this, never each other.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import numpy as np

from ..common.records import RequestRecord, RequestSpec
from ..compliance import Check, decide
from ..measure.stats import CensoredPercentile, censored_percentile, proportion_estimate, queue_growing
from ..measure.summary import STEADY_STATE_FRACTION, steady_state_window
from ..measure.units import Cell, CellValue, format_cell, format_value
from ..workloads import SESSIONS_WORKLOAD, SessionSource, SpecStream, build_workload, cap_spec
from .result import Finding

if TYPE_CHECKING:  # pragma: no cover
    from ..measure.summary import RunMetrics
    from .base import ProcedureContext
    from .result import Table
    from .run import Measured

__all__ = [
    "RAMP_UP_FRACTION",
    "CENSORED_NOTE",
    "AllRequests",
    "all_requests",
    "count_cancelled_as_unsuccessful",
    "censored_cell",
    "fmt_censored",
    "QueueTrend",
    "build_level_specs",
    "cap_output",
    "cancelled_warning",
    "capacity_error",
    "LevelStream",
    "closed_level_stream",
    "criteria_failures",
    "FLUID_RATE_NOTE",
    "fluid_rate",
    "fmt_ms",
    "fmt_short",
    "level_specs",
    "parse_criteria",
    "percentile_row",
    "pvalue",
    "queue_trend",
    "reported",
    "sample_list",
    "session_comparison_params",
    "turns_per_session",
    "steady_window_ns",
]

RAMP_UP_FRACTION = STEADY_STATE_FRACTION  # §5.2.3.2 (metrics.steady_state_window)
#: how a table cell without a value reads (units.format_cell): never a value for a REPORT read-back
NO_VALUE = "n/a"


#: Error text that reveals memory or capacity exhaustion (§5.5.2 "no out-of-memory errors"):
#: CUDA / torch OOM, vLLM/TGI KV-cache messages, the simulator's kv_capacity_exceeded / queue_full.
_CAPACITY_TEXT = re.compile(
    r"out of memory|\boom\b|cuda error|insufficient (gpu )?memory|kv[ _-]?cache|kv_capacity|"
    r"no available (memory|blocks)|queue[ _]full|capacity|resource(s)? exhausted|overloaded",
    re.IGNORECASE,
)


def cap_output(specs: Sequence[RequestSpec] | SpecStream, cap: int | None) -> list[RequestSpec] | SpecStream:
    """Cap every request's ``max_tokens`` (and ``min_tokens``) at ``cap`` (profiles shorten runs); a
    lazy workload's stream stays a stream, capped as each request is drawn."""
    if isinstance(specs, (SpecStream, SessionSource)):  # a session run's source stays one (issue 50)
        return specs if cap is None else specs.capped(cap)  # type: ignore[return-value]
    if cap is None:
        return list(specs)
    return [cap_spec(s, cap) for s in specs]


def level_specs(ctx: ProcedureContext, workload: str, n: int, seed: int, cap: int | None,
                **wl_params: Any) -> tuple[list[RequestSpec], Any]:
    """``n`` requests for one level from its own seed stream (seeds.py), capped at ``cap`` output tokens."""
    wl = build_workload(workload, n=max(n, 1), seed=seed, tokenizer=ctx.tokenizer, **wl_params)
    return cap_output(wl.specs, cap), wl


@dataclass
class QueueTrend:
    """Queue-depth trend over a level's steady window (§5.2.3.1 rule 1, §5.2.3.2)."""

    source: str  # "server /metrics waiting gauge" | "client in-flight count" | "none"
    growing: bool
    slope_per_s: float | None
    rise: float | None  # fitted increase over the window (requests)
    samples: int

    @property
    def label(self) -> str:
        return "growing" if self.growing else ("stable" if self.samples else "n/a")


def steady_window_ns(m: Measured) -> tuple[int, int]:
    """The level's steady window: its send window minus the first 10% (§5.2.3.2)."""
    lo, hi = steady_state_window(m.load.start_ns, m.load.send_end_ns, RAMP_UP_FRACTION)
    return m.load.start_ns + int(lo - m.load.start_ns), hi


def queue_trend(m: Measured, *, closed: bool = False, arrivals: int = 0) -> QueueTrend:
    """Queue growth over the steady window, from the server gauge or the client in-flight count."""
    send_s = m.load.send_window_s
    t0, t1 = RAMP_UP_FRACTION * send_s, send_s
    if m.queue_samples:
        source = "server /metrics waiting gauge"
        pts = [(t, d) for t, d in m.queue_samples if t0 <= t <= t1]
    else:
        source = "client in-flight count"
        pts = [(t / 1e9, float(d)) for t, d in m.load.concurrency_samples if t0 <= t / 1e9 <= t1]
    if len(pts) < 3:
        return QueueTrend("none" if not pts else source, False, None, None, len(pts))
    t = np.array([p[0] for p in pts])
    d = np.array([p[1] for p in pts])
    slope = float(np.polyfit(t, d, 1)[0]) if np.ptp(t) > 0 else 0.0
    rise = slope * (t1 - t0)
    if closed:
        growing = bool(m.queue_samples) and float(np.median(d)) > 0
    else:
        growing = queue_growing(t, d) and rise >= max(2.0, 0.02 * arrivals)
    return QueueTrend(source, growing, slope, rise, len(pts))


def capacity_error(rec: RequestRecord) -> bool:
    """A failed request whose status or error text shows memory/capacity exhaustion (§5.5.2).

    HTTP 429 alone is rate limiting, not capacity exhaustion: it counts only when its text names
    a capacity bound (a full queue, KV cache, memory); it still lowers the completion rate.
    """
    if not rec.failed:
        return False
    if rec.status in (503, 507):
        return True
    return bool(rec.error_message and _CAPACITY_TEXT.search(rec.error_message))


def build_level_specs(ctx: ProcedureContext, workload: str, n: int, seed: int, output_tokens: int,
                      workload_params: dict[str, Any]) -> tuple[list[RequestSpec], dict[str, Any]]:
    """``n`` requests of ``workload`` with a fixed, forced output length (§5.5.2)."""
    try:
        wl = build_workload(workload, n=n, seed=seed, tokenizer=ctx.tokenizer, output_tokens=output_tokens,
                            force_output=True, **workload_params)
    except TypeError as exc:
        raise ValueError(f"workload {workload!r} cannot fix the output length ({exc}); use synthetic-uniform, "
                         "fixed or long-context") from None
    return list(wl.specs), wl.declaration.to_json()


def closed_level_stream(specs: Sequence[RequestSpec], need: int, min_s: float,
                        stats: dict[str, int]) -> LevelStream | SessionSource:
    """Specs for one closed-loop level: stop once ``need`` were sent *and* ``min_s`` passed.

    The level therefore runs for the longer of the two (§5.5.3 step 3c, §5.8.3 step 3b). Past the
    end of ``specs`` the list is cycled (counted in ``stats["repeats"]``); a prompt then recurs only
    after ``len(specs)`` others, long evicted from any prefix cache a level this size fills. A session
    run's source (issue 50) stays one: the level holds sessions (each turn after the previous answer),
    never cycled; the load's duration or the sessions running out end it.
    """
    if isinstance(specs, SessionSource):
        return specs
    return LevelStream(list(specs), need, min_s, stats)


def session_comparison_params(workload: str, params: dict[str, Any], who: str) -> dict[str, Any]:
    """``workload_params`` of a procedure that compares configurations over the identical request sequence
    (§5.7.3 step 6, §5.10.3) when its workload is multi-turn sessions (``conversation-sessions``, issue 50):
    the history carries the recorded answers (``recorded_answers=True`` unless given), since the server's own
    answers would make every configuration's later turns differ; an explicit ``recorded_answers=False`` is a
    ValueError naming the parameter (a usage error at collection). Other workloads' params as given."""
    if workload != SESSIONS_WORKLOAD:
        return params
    if params.get("recorded_answers", True) is not True:
        raise ValueError(
            f"{who} on {SESSIONS_WORKLOAD} compares configurations over the identical request sequence, so each "
            "turn's history must carry the dataset's recorded answers: workload_params recorded_answers="
            f"{params['recorded_answers']!r} would send the server's own answers, which differ between "
            "configurations; leave recorded_answers out (it defaults to True here) or set it True")
    return {**params, "recorded_answers": True}


def turns_per_session(specs: Any) -> float:
    """The mean turns per session of a session run's source (issue 50); 1 for independent requests."""
    return len(specs) / len(specs.sessions) if isinstance(specs, SessionSource) and specs.sessions else 1.0


@dataclass
class LevelStream:
    """The iterable :func:`closed_level_stream` returns; ``split`` deals it over load-generator
    shards (each its share of ``need``, the same ``min_s``), ``absorb`` adds their stats back."""

    specs: list[RequestSpec]
    need: int
    min_s: float
    stats: dict[str, int]

    def __iter__(self) -> Iterator[RequestSpec]:
        specs, stats = self.specs, self.stats
        t0: float | None = None
        i = 0
        while True:
            now = time.perf_counter()
            if t0 is None:
                t0 = now
            if i >= self.need and now - t0 >= self.min_s:
                return
            if i >= len(specs):
                stats["repeats"] = stats.get("repeats", 0) + 1
            yield specs[i % len(specs)]
            i += 1

    def split(self, concurrency: Sequence[int]) -> list[LevelStream]:
        n, total = len(concurrency), sum(concurrency)
        return [LevelStream(self.specs[i::n] or self.specs, math.ceil(self.need * c / total), self.min_s, {})
                for i, c in enumerate(concurrency)]

    def absorb(self, stats: Sequence[dict[str, int]]) -> None:
        for st in stats:
            for k, v in st.items():
                self.stats[k] = self.stats.get(k, 0) + v


def fmt_ms(seconds: float | None) -> str:
    """A latency in a note's text as a draft table shows it (units.format_value, cell style): ``127 ms``
    below 10 s, ``12.3 s`` above; ``n/a`` when undefined. Tables hold ``Cell(seconds, "s")`` instead."""
    return format_value(seconds, "s", style="cell")


def censored_cell(cp: CensoredPercentile | None) -> CellValue:
    """A censored percentile for a table: the value, or ``>= lower bound`` when censoring reaches it."""
    if cp is None or cp.n == 0:
        return "n/a"
    return Cell(cp.value, "s") if cp.bounded else [">= ", Cell(cp.lower, "s")]


def fmt_censored(cp: CensoredPercentile | None) -> str:
    """:func:`censored_cell` as text (for a note)."""
    return format_cell(censored_cell(cp))


CENSORED_NOTE = ("cancelled requests (still running when the drain time ran out) count against success and "
                 "enter TTFT and E2E percentiles as right-censored samples: latency at least their elapsed time, "
                 "ranked above every completed request; '>= x' marks a percentile whose rank falls among them "
                 "(x = the percentile with each at its elapsed time, a lower bound); a cancelled request that "
                 "had received its first token has an observed TTFT; failed requests stay out of the "
                 "percentiles; TPOT is over completed requests")


@dataclass(frozen=True)
class AllRequests:
    """Success and latency percentiles over every request sent in a run, cancelled ones included.

    §5.3.3 step 3b-3d records *all* request timings: a request the harness cancelled at the end of
    the drain (overload) is neither a success nor absent. It counts against the success rate
    (``ok / sent``) and, in TTFT and E2E percentiles, as a right-censored sample
    (:func:`~pytest_llmbench.measure.stats.censored_percentile`).
    """

    sent: int
    ok: int
    failed: int
    cancelled: int
    ttft: dict[float, CensoredPercentile]
    e2e: dict[float, CensoredPercentile]

    @property
    def success(self) -> float:
        return self.ok / self.sent if self.sent else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"sent": self.sent, "ok": self.ok, "failed": self.failed, "cancelled": self.cancelled,
                "success_rate": self.success,
                **{f"{name}_p{q:g}": cp.to_json() for name, d in (("ttft", self.ttft), ("e2e", self.e2e))
                   for q, cp in d.items()}}


def all_requests(m: Measured, ps: Sequence[float] = (50.0, 95.0, 99.0)) -> AllRequests:
    """:class:`AllRequests` of one measured run (cancelled records have ``error_type`` cancelled)."""
    pr = m.metrics.per_request
    ok = np.asarray(pr["ok"], dtype=bool)
    ttft_obs = [np.asarray(pr["ttft"], dtype=np.float64)[ok]]
    e2e_obs = np.asarray(pr["e2e"], dtype=np.float64)[ok]
    ttft_cen: list[float] = []
    e2e_cen: list[float] = []
    cancelled = failed = 0
    for r in m.records:
        if r.ok:
            continue
        if r.failed:
            failed += 1
            continue
        cancelled += 1
        start = r.sent_ns or r.end_ns or 0  # never sent: elapsed 0, a trivial lower bound
        elapsed = max(((r.end_ns or start) - start) / 1e9, 0.0)
        e2e_cen.append(elapsed)
        if r.first_token_ns is not None and r.sent_ns:
            ttft_obs.append(np.array([(r.first_token_ns - r.sent_ns) / 1e9]))  # observed before the cut
        else:
            ttft_cen.append(elapsed)
    ttft_all = np.concatenate(ttft_obs)
    return AllRequests(
        sent=int(ok.sum()) + failed + cancelled, ok=int(ok.sum()), failed=failed, cancelled=cancelled,
        ttft={float(q): censored_percentile(ttft_all, ttft_cen, q) for q in ps},
        e2e={float(q): censored_percentile(e2e_obs, e2e_cen, q) for q in ps})


def count_cancelled_as_unsuccessful(m: Measured, everyone: AllRequests) -> None:
    """Set the run's ``success_rate`` to successful / sent, in place (§5.3.3, §5.8.4).

    The metrics layer leaves cancelled requests out of success rates (metrics.py); where a procedure
    drives the SUT past capacity a cancelled request is one that did not complete, so the run's
    figure, and with it the report's summary row, runs table and SLO assertions, counts it.
    """
    est = proportion_estimate(everyone.ok, everyone.sent)
    m.metrics.scalars["success_rate"] = dataclasses.replace(
        est, method=f"{est.method}; successful / sent: {everyone.cancelled} cancelled and {everyone.failed} "
                    "failed requests count against it")


def fluid_rate(metrics: RunMetrics) -> float | None:
    """A run's Etalon fluid token generation rate (tokens/s, §4.2 of Etalon; metrics.summarize), or None."""
    est = metrics.scalars.get("fluid_token_rate")
    return None if est is None or not math.isfinite(est.value) else float(est.value)


FLUID_RATE_NOTE = ("fluid rate: Etalon's fluid token generation rate, 1 / the smallest decode deadline at which "
                   ">= 99% of requests keep fluidity-index >= 0.9 (prefill deadline fitted to the run's TTFTs)")


def percentile_row(metrics: RunMetrics, name: str, ps: Sequence[float] = (50, 95, 99)) -> list[CellValue]:
    """Percentiles of a distribution (seconds) for a draft table ("n/a" when absent)."""
    if name not in metrics.distributions or metrics.distributions[name].n == 0:
        return ["n/a" for _ in ps]
    return [Cell(metrics.percentile(name, p).value, "s") for p in ps]


def pvalue(metrics: RunMetrics, name: str, p: float) -> float | None:
    """A percentile's value in seconds, or None when the distribution is empty."""
    if name not in metrics.distributions or metrics.distributions[name].n == 0:
        return None
    v = metrics.percentile(name, p).value
    return None if v is None or math.isnan(v) else float(v)


def parse_criteria(criteria: Sequence[str]) -> list[Any]:
    """Capacity criteria as SLO expressions (slo.py), e.g. Etalon's ``fluidity.p1 >= 0.9`` or
    ``fluid_token_rate >= 20 tok/s``; a ValueError names a bad one (§5.2.2.3, §5.5.2)."""
    from ..measure.slo import SLOError, parse_slo

    if isinstance(criteria, str):
        raise ValueError(f"criteria must be a list of SLO expressions, got the string {criteria!r}")
    out = []
    for text in criteria:
        try:
            out.append(parse_slo(text))
        except SLOError as exc:
            raise ValueError(f"criteria: {exc}") from None
    return out


def criteria_failures(criteria: Sequence[str], metrics: RunMetrics) -> list[str]:
    """One reason per capacity criterion (SLO expression) a level's run does not meet; a criterion
    whose metric is undefined in the run fails (Etalon: capacity is the load the SLO still holds at).

    A criterion is judged on its value, two-way (``evaluate(..., point=True)``): a search compares each
    level's estimate with the criterion as §5.2.2.3 / §5.5.2 define it, not a bound that a short level
    could never get past (an SLO's three-way verdict is for the user's SLOs, issue 47)."""
    from ..measure.slo import evaluate

    return [f"criterion {r.slo}: {r.message}" for r in (evaluate(c, metrics, point=True)
                                                        for c in parse_criteria(criteria))
            if not r.passed]


def sample_list(values: Any, limit: int = 20_000) -> list[float]:
    """Finite samples as a plain list for plots (evenly thinned above ``limit``)."""
    import numpy as np

    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr)]
    if arr.size > limit:
        arr = np.sort(arr)[np.linspace(0, arr.size - 1, limit).astype(int)]
    return [float(x) for x in arr]


#: A declared check: ``(met, reason)`` or ``(met, reason_if_met, reason_if_unmet)``, optionally
#: followed by an evidence dict. ``met`` may be a bool or a zero-argument predicate.
def _holds(tables: Sequence[Table], table: Table) -> bool:
    """``table`` is one of ``tables`` by identity (a look-alike with the same title does not count)."""
    return any(t is table for t in tables)


def _values(table: Table, name: str) -> list[str] | None:
    """The cells of column ``name``, or of the row whose first cell is ``name``, as the report shows
    them (a :class:`Cell` without a value reads ``n/a``); None when neither exists."""
    if name in table.columns:
        i = table.columns.index(name)
        return [format_cell(row[i]) for row in table.rows]
    row = next((r for r in table.rows if r and r[0] == name), None)
    return None if row is None else [format_cell(x) for x in row[1:]]


def reported(rid: str, what: str, needs: Sequence[tuple[Table, str]], tables: Sequence[Table]) -> Check:
    """A REPORT item read back from what the result holds (§5.x.4/§5.x.5), not asserted.

    Met when every ``(table, name)`` is one of the result's ``tables`` (identity, not title), and
    ``name`` (a column, or a row label) has a value in every row of it: a column the procedure forgot,
    a table it dropped, a blank cell or one that reads ``n/a`` (no value) makes the item unmet.
    """
    gaps: list[str] = []
    for table, name in needs:
        if not _holds(tables, table):
            gaps.append(f"{table.title} not in the result")
        elif (cells := _values(table, name)) is None:
            gaps.append(f"{table.title}: no {name!r}")
        elif not cells or any(not c.strip() for c in cells):
            gaps.append(f"{table.title}: {name!r} blank")
        elif blanks := sum(c.strip().lower() == NO_VALUE for c in cells):  # "n/a" is not a value
            gaps.append(f"{table.title}: {name!r} reads {NO_VALUE!r} in {blanks} of {len(cells)} rows")
    if gaps:
        return decide(rid, ok=False, unmet=f"{what}: " + "; ".join(gaps))
    titles = list(dict.fromkeys(t.title.split(":")[0] for t, _ in needs))
    names = list(dict.fromkeys(n for _, n in needs))
    return decide(rid, ok=True, met=f"{what}: {', '.join(names)} in {' and '.join(titles)}")


def reported_line(rid: str, table: Table, prefix: str, tables: Sequence[Table]) -> Check:
    """A REPORT item met by a written line of ``table``'s notes starting with ``prefix`` (e.g. the knee point)."""
    line = next((n for n in table.notes if n.startswith(prefix)), None) if _holds(tables, table) else None
    return decide(rid, ok=bool(line), met=line, unmet=f"no '{prefix}' line under {table.title}")


# --------------------------------------------------------------------------------------------
# what a procedure declares for the document's headline (sweep sentences, warnings)
# --------------------------------------------------------------------------------------------


def fmt_short(v: float, digits: int = 3) -> str:
    """``digits`` significant digits with thousands separators, whole numbers from 10**digits up:
    the headline's sweep sentences and levels (``12.3``, ``1,234``)."""
    return f"{v:,.{digits}g}" if abs(v) < 10 ** digits else f"{v:,.0f}"


def cancelled_warning(cancelled: int, runs: Sequence[Measured]) -> list[Finding]:
    """The headline warning for requests cancelled at a level's drain (§5.3, §5.8: they did not
    complete), over every request the reported runs sent; none when nothing was cancelled."""
    if not cancelled:
        return []
    sent = 0
    for m in runs:
        load = m.summary.load or {}
        if isinstance(load.get("sent"), int) and isinstance(load.get("ok"), int):
            sent += load["sent"]
    return [Finding("cancelled", f"{cancelled} of {sent} requests")]


# --------------------------------------------------------------------------------------------
# a procedure that cannot run against this SUT still reports its compliance (README, issue 48)
# --------------------------------------------------------------------------------------------


def skip_with_compliance(run: Any, why: str, unmet: dict[str, str], declarations: Any,
                         workload: dict[str, Any] | None = None) -> NoReturn:
    """Raise :class:`~.base.SkipProcedure` carrying a result without runs: its compliance holds each
    item of ``unmet`` (id -> what could not be done) as unmet with ``why``, and the other items as the
    run left them (nothing measured: "not recorded"), judged with ``declarations`` (``facts.declarations``).
    The session reports it; the test is skipped."""
    from ..compliance import RunFacts, evaluate_test
    from ..compliance.engine import finalize, row
    from .base import SkipProcedure
    from .result import ProcedureResult

    ctx = run.ctx
    # the item's own decider needs the runs that never happened: the decision is this row (why it is unmet)
    checks = {rid: finalize(row(rid, False, unmet=f"{what}: {why}", skipped=True)) for rid, what in unmet.items()}
    facts = RunFacts(sut_boundary=ctx.sut.boundary, workload=dict(workload or {}), seed=ctx.settings.seed)
    result = ProcedureResult(procedure=run.id, title=run.title, params={}, profile=ctx.settings.profile, metrics=None,
                             runs=[], measurements={}, notes=[f"SKIPPED: {why}; nothing was measured"],
                             started=run.started, finished=run.started, complete=False)
    result.facts, result.checks = facts, checks
    result.compliance = evaluate_test(run.id, checks, facts, declarations)
    raise SkipProcedure(why, result=result)
