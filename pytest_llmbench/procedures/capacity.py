"""Capacity on a procedure's own workload: §5.5.3's closed-loop search and a closed-loop saturation probe.

:func:`search_capacity` (5.8 runs it; 5.5 runs its own loop on :func:`judge_search_level` and
:func:`next_search_level`) doubles the concurrency while levels meet §5.5.2's criteria, halves it
while they fail, then bisects to the resolution (:class:`SearchOptions`). :func:`probe_saturation`
(5.2, 5.6, 5.10) measures the completions of a full closed loop per second. Each level is a measured
run through the procedure's ``measure`` step, kept in its runs.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..common.records import RequestSpec
from ..loadgen.load import ClosedLoop
from ..loadgen.warmup import WarmupResult
from .base import ProcedureContext
from .budget import PROBE_FIT, Lengthened, probe_window_s, retry_label, run_lengthening
from .helpers import capacity_error, closed_level_stream, fmt_ms, pvalue, steady_window_ns
from .run import Measured

__all__ = [
    "DEFAULT_TTFT_P99_S",
    "FORCED_OUTPUT",
    "FREE_OUTPUT",
    "SEARCH_LEVEL_TIMEOUT_S",
    "CapacitySearch",
    "MeasureRun",
    "SaturationProbe",
    "SaturationSearch",
    "SearchLevel",
    "SearchOptions",
    "capacity_ttft_threshold",
    "judge_search_level",
    "next_search_level",
    "probe_saturation",
    "search_capacity",
    "search_saturation",
]

#: the request shapes a capacity is measured on (``result.Capacity.request_shape``): a fraction of a
#: capacity measured on another shape refers to another load (§5.4.2 forces its outputs)
FREE_OUTPUT = "outputs up to each request's max_tokens (EOS allowed)"
FORCED_OUTPUT = "forced outputs (min_tokens = max_tokens, ignore_eos)"

#: one measured run on the procedure's client, kept in its runs: ``(label, specs, load, **options)``
#: as :meth:`.pipeline.ProcedureRun.measure` takes them after the client
MeasureRun = Callable[..., Awaitable[Measured]]


#: §5.5.2's TTFT P99 criterion when the tester gives none, at time_scale 1; × time_scale on the simulator
DEFAULT_TTFT_P99_S = 2.0


#: a search level's safety cap on its submission window (a level ends by its completions and min_level_s)
SEARCH_LEVEL_TIMEOUT_S = 3600.0


def capacity_ttft_threshold(ctx: ProcedureContext, declared: float | None) -> tuple[float, str]:
    """§5.5.2's TTFT P99 criterion in seconds and where it came from: ``declared``, else 2 s (× the
    embedded simulator's time_scale, so the capacity found does not depend on the time scale)."""
    if declared is not None:
        return float(declared), "declared (ttft_p99_threshold_s)"
    if ctx.sut.embedded:
        scale = float(ctx.sut.server_info.get("time_scale", 1.0) or 1.0)
        return DEFAULT_TTFT_P99_S * scale, f"default {DEFAULT_TTFT_P99_S:g} s x simulator time_scale {scale:g}"
    return DEFAULT_TTFT_P99_S, f"default {DEFAULT_TTFT_P99_S:g} s"


def next_search_level(lo: int, hi: int | None, maximum: int, resolution: int) -> int | None:
    """§5.5.3's next concurrency, or None once converged: double from the largest pass ``lo`` while
    levels pass (up to ``maximum``), halve while they fail (``lo`` 0), then bisect [lo, hi]."""
    if hi is None:
        return None if lo >= maximum else min(2 * lo, maximum)
    if lo == 0:
        return None if hi <= 1 else hi // 2
    return None if hi - lo <= resolution else (lo + hi) // 2


@dataclass
class SearchLevel:
    """One closed-loop level of a §5.5.3 search and its verdict against §5.5.2's criteria."""

    concurrency: int
    measured: Measured
    completion: float | None  # successful / (successful + failed)
    ttft_p99_s: float | None
    capacity_errors: int  # out-of-memory / capacity errors (helpers.capacity_error)
    reasons: list[str]  # the criteria it failed; empty: it passed

    @property
    def passed(self) -> bool:
        return not self.reasons

    def to_json(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "label": self.measured.summary.label, "completion": self.completion,
                "ttft_p99_s": self.ttft_p99_s, "capacity_errors": self.capacity_errors, "passed": self.passed,
                "reasons": list(self.reasons)}


@dataclass
class CapacitySearch:
    """A §5.5.3 search run by a procedure on its own workload: its levels in run order, the largest
    passing concurrency ``lo`` (0: none) and the smallest failing one ``hi``."""

    levels: list[SearchLevel]
    lo: int
    hi: int | None
    threshold_s: float
    threshold_source: str
    resolution: int
    maximum: int

    @property
    def capacity(self) -> int | None:
        return self.lo or None

    @property
    def converged(self) -> bool:
        lo, hi = self.lo, self.hi
        return (hi is not None and lo > 0 and hi - lo <= self.resolution) or (hi is None and lo >= self.maximum) \
            or (lo == 0 and hi == 1)

    def describe(self) -> str:
        """``levels 8 pass, 16 pass, 32 fail (TTFT P99 ...), 24 pass: capacity 24 (bracket [24, 32])``."""
        steps = ", ".join(f"{lv.concurrency} " + ("pass" if lv.passed else f"fail ({'; '.join(lv.reasons)})")
                          for lv in self.levels)
        found = f"capacity {self.lo}" if self.lo else "no level passed"
        return (f"levels {steps}: {found} (bracket [{self.lo}, {self.hi if self.hi is not None else '-'}], resolution "
                f"{self.resolution}{'' if self.converged else ', NOT converged'})")

    def to_json(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "bracket": [self.lo, self.hi], "converged": self.converged,
                "ttft_p99_threshold_s": self.threshold_s, "ttft_p99_threshold_source": self.threshold_source,
                "levels": [lv.to_json() for lv in self.levels]}


def judge_search_level(c: int, m: Measured, threshold_s: float, min_completion: float) -> SearchLevel:
    """§5.5.2's success criteria on one level: completion >= ``min_completion``, TTFT P99 <=
    ``threshold_s``, no out-of-memory / capacity error."""
    met = m.metrics
    n_ok, n_failed = int(met.scalar("completed_count").value), int(met.scalar("error_count").value)
    completion = n_ok / (n_ok + n_failed) if n_ok + n_failed else None
    ttft99 = pvalue(met, "ttft", 99)
    cap_err = sum(1 for r in m.records if capacity_error(r))
    reasons = []
    if completion is None or completion < min_completion:
        reasons.append("completion " + ("n/a" if completion is None else f"{completion:.1%}")
                       + f" < {min_completion:.0%}")
    if ttft99 is None or ttft99 > threshold_s:
        reasons.append(f"TTFT P99 {fmt_ms(ttft99)} > {fmt_ms(threshold_s)}")
    if cap_err:
        reasons.append(f"{cap_err} out-of-memory/capacity errors")
    return SearchLevel(c, m, completion, ttft99, cap_err, reasons)


@dataclass
class SaturationProbe:
    """A closed-loop saturation probe on a procedure's own requests: completions inside the steady part
    of its send window (first 10 % excluded, no drain tail) / that window's length, in requests/s."""

    measured: Measured
    concurrency: int
    duration_s: float
    completions: int  # successful completions inside the window
    window_s: float
    repeats: int  # requests past the end of the probe's list (a prompt sent again)
    lengthened: Lengthened | None = None  # how budget.run_lengthening ended (None: not through it)

    @property
    def rate(self) -> float:
        return self.completions / self.window_s if self.window_s > 0 else 0.0

    def describe(self, on: str) -> str:
        """``closed-loop probe on <on> (concurrency 64, 20 s, 812 requests completed)``."""
        return (f"closed-loop probe on {on} (concurrency {self.concurrency}, {self.duration_s:g} s, "
                f"{self.measured.load.ok} requests completed)")


@dataclass(frozen=True)
class SearchOptions:
    """§5.5.3's search settings: levels of at least ``min_level_s`` and ``min_completions_per_slot``
    completions per slot, from ``initial`` up to ``maximum``, to ``resolution``; a level passes §5.5.2
    with completion >= ``min_completion`` and TTFT P99 <= ``threshold_s`` (from ``threshold_source``).
    ``extra``: added to each level's run parameters."""

    initial: int
    maximum: int
    resolution: int
    min_level_s: float
    min_completions_per_slot: int
    threshold_s: float
    threshold_source: str
    min_completion: float
    extra: Mapping[str, Any] = field(default_factory=dict)


async def search_capacity(measure_run: MeasureRun, ctx: ProcedureContext, who: str, label: str,
                          specs_for: Callable[[int, int], Sequence[RequestSpec]],
                          options: SearchOptions) -> CapacitySearch:
    """§5.5.3's search on procedure ``who``'s own requests: closed-loop levels of at least ``min_level_s``
    and ``min_completions_per_slot`` completions per slot, doubled from ``initial`` while they meet
    §5.5.2's criteria, halved while they fail, then bisected to ``resolution``.

    ``specs_for(concurrency, n)``: ``n`` requests for the level (its own seed stream). Each level is a
    run ``{label}-c0008`` with ``extra["phase_role"] = "capacity search"``."""
    o = options
    levels: list[SearchLevel] = []
    lo, hi = 0, None
    c: int | None = o.initial
    per_slot: float | None = None  # completions/s per slot at the last level: sizes the next list
    while c is not None and all(lv.concurrency != c for lv in levels):
        need = o.min_completions_per_slot * c
        n = need if per_slot is None else max(need, math.ceil(1.25 * per_slot * c * o.min_level_s))
        stats: dict[str, int] = {}
        ctx.progress(f"{who} capacity search (§5.5.3) level {c}: closed loop, >= {o.min_level_s:g} s "
                     f"and >= {need} completions")
        m = await measure_run(f"{label}-c{c:04d}", closed_level_stream(specs_for(c, n), need, o.min_level_s, stats),
                              ClosedLoop(c, duration_s=max(SEARCH_LEVEL_TIMEOUT_S, o.min_level_s)),
                              drain_timeout_s=ctx.settings.timeout, sized=True,
                              extra={**o.extra, "phase_role": "capacity search", "concurrency": c})
        lv = judge_search_level(c, m, o.threshold_s, o.min_completion)
        levels.append(lv)
        ok = lv.completion is not None and m.load.duration_s > 0
        per_slot = int(m.metrics.scalar("completed_count").value) / m.load.duration_s / c if ok else per_slot
        if lv.passed:
            lo = max(lo, c)
        else:
            hi = c if hi is None else min(hi, c)
        c = next_search_level(lo, hi, o.maximum, o.resolution)
    return CapacitySearch(levels, lo, hi, o.threshold_s, o.threshold_source, o.resolution, o.maximum)


async def probe_saturation(measure_run: MeasureRun, ctx: ProcedureContext, who: str, warmup: WarmupResult | None,
                           label: str, specs_for: Callable[[float, int], Sequence[RequestSpec]], concurrency: int,
                           duration_s: float, extra: Mapping[str, Any] | None = None) -> SaturationProbe:
    """The saturation throughput of procedure ``who``'s own requests (how 5.2 estimates its range): a
    closed loop at ``concurrency`` for ``duration_s`` (longer on a slow SUT, ``budget.probe_window_s``
    from the ``warmup``); its completions inside the steady window / the window, in requests/s. Run
    label ``label``. ``specs_for(window_s, attempt)``: the requests of the probe's run ``attempt``
    (0: the first; a probe whose requests outlast its window is run again longer on requests of its
    own, ``budget.run_lengthening``). Its ``lengthened`` says how it ended."""
    stats: dict[str, int] = {}

    async def run(d: float, attempt: int) -> Measured:
        stats.clear()
        ctx.progress(f"{who} capacity probe: closed loop, concurrency {concurrency}, {d:g} s")
        return await measure_run(retry_label(label, attempt), closed_level_stream(specs_for(d, attempt), 0, d, stats),
                                 ClosedLoop(concurrency, duration_s=d), drain_timeout_s=max(30.0, d), sized=True,
                                 extra={**(extra or {}), "phase_role": "capacity probe", "concurrency": concurrency})

    m, tried = await run_lengthening(ctx, f"{who} capacity probe", label, probe_window_s(duration_s, warmup), run,
                                     lambda m: _steady_completions(m)[0] > 0, PROBE_FIT)
    done, window_s = _steady_completions(m)
    return SaturationProbe(m, concurrency, tried.window_s, done, window_s, stats.get("repeats", 0), tried)


def _steady_completions(m: Measured) -> tuple[int, float]:
    """Successful completions while the loop was full (the steady window: no drain tail) and that window in s."""
    lo, hi = steady_window_ns(m)
    done = sum(1 for r in m.records if r.ok and r.end_ns is not None and lo <= r.end_ns <= hi)
    return done, max(hi - lo, 0) / 1e9


@dataclass
class SaturationSearch:
    """A short search for the saturation throughput (§5.6.2 "saturation", issue 48): closed-loop probes
    from a starting concurrency, doubling while the completion rate still rises by ``gain`` or more.
    ``saturated``: a doubling gained less (a plateau: the best probe is the saturation throughput);
    otherwise the best probe's rate is a lower bound of it."""

    probes: list[SaturationProbe]
    saturated: bool
    gain: float

    @property
    def best(self) -> SaturationProbe:
        return max(self.probes, key=lambda pr: pr.rate)

    @property
    def standing(self) -> str:
        return "measured" if self.saturated else "lower-bound"

    def describe(self, on: str) -> str:
        steps = ", ".join(f"c{pr.concurrency} {pr.rate:.3g} req/s" for pr in self.probes)
        end = (f"plateau: the last doubling gained < {self.gain:.0%}" if self.saturated else
               f"still rising by >= {self.gain:.0%} at the last doubling: a lower bound")
        return f"saturation search on {on} ({steps}; {end})"


SATURATION_DOUBLINGS = 2  # a short search: the probe's concurrency and up to two doublings
SATURATION_GAIN = 0.10  # a doubling that gains less is a plateau (the saturation throughput)


async def search_saturation(measure_run: MeasureRun, ctx: ProcedureContext, who: str, warmup: WarmupResult | None,
                            label: str, specs_for: Callable[[float, int, int], Sequence[RequestSpec]],
                            concurrency: int, duration_s: float, extra: Mapping[str, Any] | None = None
                            ) -> SaturationSearch:
    """:func:`probe_saturation` at ``concurrency``, then at twice it, up to :data:`SATURATION_DOUBLINGS`
    times, while the completion rate rises by :data:`SATURATION_GAIN` or more. ``specs_for(window_s, stream, concurrency)``: the requests
    of one probe run, ``stream`` unique over the search's runs (their own seed stream each)."""
    probes: list[SaturationProbe] = []
    c = concurrency
    doublings, gain = SATURATION_DOUBLINGS, SATURATION_GAIN
    for step in range(doublings + 1):
        probe = await probe_saturation(measure_run, ctx, who, warmup, f"{label}-c{c}",
                                       lambda d, attempt, _s=step, _c=c: specs_for(d, 10 * _s + attempt, _c),
                                       c, duration_s, extra)
        probes.append(probe)
        if step and probe.rate < probes[-2].rate * (1 + gain):
            return SaturationSearch(probes, True, gain)
        c *= 2
    return SaturationSearch(probes, False, gain)
