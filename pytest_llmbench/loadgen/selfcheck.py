"""Client-delay self-check: how much of a latency figure the client's own delay could be.

Every timestamp of a record is a clock read by the client after the event it stands for; on a busy
host the read comes late (App. B.1.1 defines the times at the wire). The load generator measures
its own delay while it receives (load.py):

* **receive delay**: a probe on a local socket pair, every probe interval: one byte is written and
  the time until a waiting task reads the clock is taken, which is the path a response chunk takes
  (socket readable → event loop → protocol → waiting task → ``perf_counter_ns``);
* **event-loop lag**: how late a timer sleep wakes (the existing self-check sample);
* **CPU share**: the client process's CPU time over the run's wall time (1.0 = one core busy; the
  event loop runs on one core, so a share near 1 means the client was saturated).

The client delay at a percentile is the receive delay at that percentile (the loop lag when no
probe ran). A latency figure is *flagged* when the delay at its percentile is a measurable share
of it, above 5 % (above 1 ms for a figure of zero, which has no share): the client, not the SUT, may
then have set part of it. An absolute bound alone would flag 1.1 ms on an 11 s TTFT (0.01 %). With per-token server timestamps (§4.6.3 option C, the simulator's ``llmbench_timing``) the
difference between the client's first-token time and the server's is the measured error of the
client's timestamps; a run whose error P99 exceeds 1 ms is flagged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..common.records import RequestRecord

__all__ = [
    "DELAY_PERCENTILES",
    "LATENCY_DISTRIBUTIONS",
    "ClientDelay",
    "DelayThresholds",
    "FigureCheck",
    "assess",
    "check_figures",
    "option_c_error",
    "percentiles_ms",
]

#: Percentiles kept of every client-delay sample (those of the latency figures reported).
DELAY_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9)


#: Distributions timed by the client's clock whose percentiles are checked (metrics.py names).
LATENCY_DISTRIBUTIONS: tuple[str, ...] = ("ttft", "tpot", "e2e", "itl", "ttst")


def _key(p: float) -> str:
    return f"p{p:g}"


def percentiles_ms(samples_ns: Iterable[int | float]) -> dict[str, float]:
    """``{"p50": ms, …}`` of ``samples_ns`` at :data:`DELAY_PERCENTILES` (empty without samples)."""
    a = np.fromiter(samples_ns, dtype=np.float64)
    if a.size == 0:
        return {}
    return {_key(p): float(v) / 1e6 for p, v in zip(DELAY_PERCENTILES, np.percentile(a, DELAY_PERCENTILES))}


@dataclass(frozen=True)
class DelayThresholds:
    """When a figure or a run is flagged: the client delay at the figure's percentile above
    ``rel`` of the figure (above ``abs_ms`` for a zero figure); the option-C error P99 above
    ``option_c_p99_ms``."""

    abs_ms: float = 1.0
    rel: float = 0.05
    option_c_p99_ms: float = 1.0


@dataclass(frozen=True)
class ClientDelay:
    """The client's own delay during one run (or the worst of several, :meth:`worst`)."""

    receive_delay_ms: dict[str, float] = field(default_factory=dict)
    receive_n: int = 0
    loop_lag_ms: dict[str, float] = field(default_factory=dict)
    loop_n: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0

    @classmethod
    def of_samples(cls, receive_ns: Sequence[int], loop_ns: Sequence[int], cpu_s: float, wall_s: float) -> ClientDelay:
        return cls(percentiles_ms(receive_ns), len(receive_ns), percentiles_ms(loop_ns), len(loop_ns),
                   max(cpu_s, 0.0), max(wall_s, 0.0))

    @property
    def cpu_share(self) -> float | None:
        """Client CPU time / wall time (1.0 = one core busy the whole run)."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else None

    @property
    def source(self) -> str | None:
        return "receive-probe" if self.receive_delay_ms else "loop-lag" if self.loop_lag_ms else None

    def at(self, percentile: float) -> float | None:
        """The client delay (ms) at ``percentile``: the receive delay, else the loop lag; the next
        higher percentile kept when this one is not (conservative)."""
        table = self.receive_delay_ms or self.loop_lag_ms
        for p in DELAY_PERCENTILES:
            if p >= percentile and _key(p) in table:
                return table[_key(p)]
        return table.get(_key(DELAY_PERCENTILES[-1]))

    @classmethod
    def worst(cls, delays: Iterable[ClientDelay]) -> ClientDelay | None:
        """Per percentile, the largest delay of any run; the highest CPU share (its run's times)."""
        ds = list(delays)
        if not ds:
            return None

        def top(tables: list[dict[str, float]]) -> dict[str, float]:
            keys = {k for t in tables for k in t}
            return {k: max(t[k] for t in tables if k in t) for k in sorted(keys, key=lambda k: float(k[1:]))}

        busiest = max(ds, key=lambda d: d.cpu_share or 0.0)
        return cls(top([d.receive_delay_ms for d in ds]), sum(d.receive_n for d in ds),
                   top([d.loop_lag_ms for d in ds]), sum(d.loop_n for d in ds), busiest.cpu_s, busiest.wall_s)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["cpu_share"] = self.cpu_share
        d["source"] = self.source
        return d

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ClientDelay:
        return cls(**{k: d[k] for k in ("receive_delay_ms", "receive_n", "loop_lag_ms", "loop_n", "cpu_s", "wall_s")
                      if k in d})


def option_c_error(records: Iterable[RequestRecord]) -> dict[str, Any] | None:
    """Client first-token time − the server's first-token send time, per successful record that has
    both (§4.6.3 option C; one host, both on CLOCK_MONOTONIC): ``n`` and ms at P50/P99/max, or None."""
    d = [r.first_token_ns - r.server_token_ns[0] for r in records
         if r.ok and r.first_token_ns is not None and r.server_token_ns]
    if not d:
        return None
    a = np.asarray(d, dtype=np.float64) / 1e6
    p50, p99 = np.percentile(a, [50, 99])
    return {"n": int(a.size), "p50_ms": float(p50), "p99_ms": float(p99), "max_ms": float(a.max()),
            "min_ms": float(a.min())}


@dataclass(frozen=True)
class FigureCheck:
    """One latency figure next to the client's delay at its percentile."""

    figure: str
    percentile: float
    value_s: float
    client_delay_ms: float | None
    share: float | None  # client delay / figure
    flagged: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def check_figures(figures: Iterable[tuple[str, float, float]], delay: ClientDelay | None,
                  thresholds: DelayThresholds = DelayThresholds()) -> list[FigureCheck]:
    """``(name, percentile, value in s)`` per latency figure → :class:`FigureCheck` each."""
    out = []
    for name, p, value in figures:
        ms = delay.at(p) if delay is not None else None
        share = ms / (value * 1e3) if ms is not None and value > 0 else None
        flagged = ms is not None and (share > thresholds.rel if share is not None else ms > thresholds.abs_ms)
        out.append(FigureCheck(name, p, value, ms, share, flagged))
    return out


def assess(figures: Iterable[tuple[str, float, float]], delay: ClientDelay | None,
           option_c: Mapping[str, Any] | None, thresholds: DelayThresholds = DelayThresholds()) -> dict[str, Any]:
    """The self-check of one procedure: the figures with their client delay, the client's own
    figures, the option-C error and whether (and why) the run is flagged."""
    checks = check_figures(figures, delay, thresholds)
    reasons = [f"client delay {c.client_delay_ms:.3g} ms at P{c.percentile:g} of {c.figure} "
               f"({'' if c.share is None else f'{c.share:.1%} of '}{c.value_s * 1e3:.4g} ms; bound "
               f"{thresholds.rel:.0%}{f' / {thresholds.abs_ms:g} ms for a zero figure' if c.share is None else ''})"
               for c in checks if c.flagged]
    if option_c is not None and option_c["p99_ms"] > thresholds.option_c_p99_ms:
        reasons.append(f"measured client-vs-server first-token error P99 {option_c['p99_ms']:.3g} ms > "
                       f"{thresholds.option_c_p99_ms:g} ms (option C)")
    return {
        "figures": [c.to_json() for c in checks],
        "client": delay.to_json() if delay is not None else None,
        "option_c_error": dict(option_c) if option_c is not None else None,
        "thresholds": asdict(thresholds),
        "flagged": bool(reasons),
        "reasons": reasons,
    }


def procedure_check(runs: Sequence[Mapping[str, Any]], metrics: Mapping[str, Any] | None,
                    thresholds: DelayThresholds = DelayThresholds()) -> dict[str, Any] | None:
    """:func:`assess` for one procedure of a results document: every latency percentile of its
    summary ``metrics`` against the worst client delay of its ``runs`` (their ``load`` summaries
    carry ``client_delay`` and ``option_c_error``), the option-C error of the run with the largest
    P99. None when no run measured its client delay (sharded runs, older documents)."""
    loads = [r.get("load") or {} for r in runs]
    delay = ClientDelay.worst(ClientDelay.from_json(ld["client_delay"]) for ld in loads if ld.get("client_delay"))
    errors = [ld["option_c_error"] for ld in loads if ld.get("option_c_error")]
    option_c = max(errors, key=lambda e: e["p99_ms"]) if errors else None
    if delay is None and option_c is None:
        return None
    dists = (metrics or {}).get("distributions") or {}
    figures = [(f"{name}_{k}", float(k[1:]), float(est["value"]))
               for name in LATENCY_DISTRIBUTIONS if (dists.get(name) or {}).get("n")
               for k, est in (dists[name].get("percentiles") or {}).items()
               if isinstance(est, Mapping) and isinstance(est.get("value"), (int, float))]
    return assess(figures, delay, option_c, thresholds)
