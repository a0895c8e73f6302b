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
probe ran). It is propagated to each figure before comparing (:func:`figure_error_ms`): a figure
that is one client-stamped interval (TTFT, E2E, ITL, TTST) takes the delay at its percentile; TPOT
= (E2E − TTFT) / (OSL − 1) takes that delay ÷ (OSL − 1) of the request at its percentile. A figure
is *flagged* when its propagated error exceeds 5 % of it (1 ms for a figure of zero, which has no
share): the client, not the SUT, may then have set part of it. The 5 % bound is the project's
reading of §4.2.5 (the load generator must not add delay that distorts the measurement); the
draft's only number, §4.2.1's 1 ms timer resolution, is 4.2.1-MUST-1, checked apart. With
per-token server timestamps (§4.6.3 option C, the simulator's ``llmbench_timing``) the
difference between the client's first-token time and the server's is the measured error of the
client's first-token times; the same rule holds it against TTFT at P50 and P99.
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
    "figure_error_ms",
    "option_c_error",
    "option_c_error_of",
    "percentiles_ms",
    "procedure_check",
]

#: Percentiles kept of every client-delay sample (those of the latency figures reported).
DELAY_PERCENTILES: tuple[float, ...] = (50.0, 90.0, 95.0, 99.0, 99.9)


#: Distributions timed by the client's clock whose percentiles are checked (metrics.py names).
LATENCY_DISTRIBUTIONS: tuple[str, ...] = ("ttft", "tpot", "e2e", "itl", "ttst")
#: Figures that are one interval between two client timestamps: the delay at the percentile reaches them whole.
DIRECT: frozenset[str] = frozenset({"ttft", "ttft_any_chunk", "e2e", "itl", "inter_chunk", "itl_distributed", "ttst",
                                    "e2e_from_schedule", "ttft_from_schedule"})
#: Figures that spread one such interval over a request's tokens: metric -> tokens subtracted from its OSL
#: (TPOT: (E2E − TTFT) / (OSL − 1); normalized latency: E2E / OSL).
PER_TOKEN: dict[str, int] = {"tpot": 1, "normalized_latency": 0}


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
    """When a figure is flagged: its propagated client error above ``rel`` of it (above ``abs_ms``
    for a zero figure); the same for the option-C error against TTFT at P50 and P99."""

    abs_ms: float = 1.0
    rel: float = 0.05


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
    return option_c_error_of(np.fromiter((r.first_token_ns - r.server_token_ns[0] for r in records
                                          if r.ok and r.first_token_ns is not None and r.server_token_ns),
                                         dtype=np.float64))


def option_c_error_of(diffs_ns: np.ndarray) -> dict[str, Any] | None:
    """:func:`option_c_error` of the per-record differences in ns (float64), collected as records finished."""
    if not diffs_ns.size:
        return None
    a = diffs_ns / 1e6
    p50, p99 = np.percentile(a, [50, 99])
    return {"n": int(a.size), "p50_ms": float(p50), "p99_ms": float(p99), "max_ms": float(a.max()),
            "min_ms": float(a.min())}


def _osl_at(per_request: Any, metric: str, value_s: float) -> float | None:
    """OSL of the request whose ``metric`` is nearest ``value_s`` (the shortest of ties), or None."""
    try:
        v = np.asarray(per_request[metric], dtype=np.float64)
        osl = np.asarray(per_request["osl"], dtype=np.float64)
    except (KeyError, TypeError, ValueError):
        return None
    ok = np.isfinite(v) & np.isfinite(osl)
    if v.shape != osl.shape or not ok.any():
        return None
    d = np.abs(v[ok] - value_s)
    return float(osl[ok][d <= d.min() * (1 + 1e-9) + 1e-15].min())


def figure_error_ms(metric: str, percentile: float, value_s: float, delay: ClientDelay | None,
                    per_request: Any = None) -> float | None:
    """The client's delay at ``percentile`` propagated to a figure of ``metric`` (ms): whole for
    one client-stamped interval (:data:`DIRECT`), ÷ (OSL − 1) of the request at the percentile for
    TPOT (÷ OSL for normalized latency, :data:`PER_TOKEN`; the raw delay when ``per_request`` does
    not tell the OSL); None for figures the client's clock does not time or without a delay."""
    ms = delay.at(percentile) if delay is not None else None
    if ms is None:
        return None
    if metric in DIRECT:
        return ms
    if metric in PER_TOKEN:
        osl = _osl_at(per_request, metric, value_s) if per_request is not None else None
        gaps = None if osl is None else osl - PER_TOKEN[metric]
        return ms / gaps if gaps is not None and gaps >= 1 else ms
    return None


@dataclass(frozen=True)
class FigureCheck:
    """One latency figure next to the client's delay at its percentile and that delay propagated to it."""

    figure: str
    percentile: float
    value_s: float
    client_delay_ms: float | None  # the delay at the figure's percentile
    share: float | None  # propagated error / figure
    flagged: bool
    error_ms: float | None = None  # the delay propagated to the figure (figure_error_ms)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _metric_of(figure: str) -> str:
    """``tpot_p99.9`` -> ``tpot``."""
    return figure.rpartition("_p")[0] or figure


def check_figures(figures: Iterable[tuple[str, float, float]], delay: ClientDelay | None,
                  thresholds: DelayThresholds = DelayThresholds(), per_request: Any = None) -> list[FigureCheck]:
    """``(name, percentile, value in s)`` per latency figure → :class:`FigureCheck` each; ``per_request``
    (the figures' per-request columns) gives TPOT's request OSL."""
    out = []
    for name, p, value in figures:
        raw = delay.at(p) if delay is not None else None
        err = figure_error_ms(_metric_of(name), p, value, delay, per_request)
        share = err / (value * 1e3) if err is not None and value > 0 else None
        flagged = err is not None and (share > thresholds.rel if share is not None else err > thresholds.abs_ms)
        out.append(FigureCheck(name, p, value, raw, share, flagged, err))
    return out


def _reason(c: FigureCheck, th: DelayThresholds) -> str:
    via = "" if c.error_ms == c.client_delay_ms or c.error_ms is None or c.client_delay_ms is None else \
        f" → {c.error_ms:.3g} ms over the request's output tokens"
    share = "" if c.share is None else f"{c.share:.1%} of "
    zero = f" / {th.abs_ms:g} ms for a zero figure" if c.share is None else ""
    return (f"client delay {c.client_delay_ms:.3g} ms at P{c.percentile:g} of {c.figure}{via} "
            f"({share}{c.value_s * 1e3:.4g} ms; bound {th.rel:.0%}{zero})")


def _option_c_reasons(option_c: Mapping[str, Any], checks: Sequence[FigureCheck], th: DelayThresholds) -> list[str]:
    """The option-C error at P50 and P99 against TTFT at the same percentile (the figure rule)."""
    ttft = {c.percentile: c.value_s for c in checks if _metric_of(c.figure) == "ttft"}
    out = []
    for key, p in (("p50_ms", 50.0), ("p99_ms", 99.0)):
        err, v = option_c.get(key), ttft.get(p)
        if not isinstance(err, (int, float)):
            continue
        bound = th.rel * v * 1e3 if v else th.abs_ms
        if err > bound:
            against = f"{th.rel:.0%} of TTFT P{p:g} {v * 1e3:.4g} ms" if v else f"{th.abs_ms:g} ms"
            out.append(f"measured client-vs-server first-token error P{p:g} {err:.3g} ms > {against} (option C)")
    return out


def assess(figures: Iterable[tuple[str, float, float]], delay: ClientDelay | None,
           option_c: Mapping[str, Any] | None, thresholds: DelayThresholds = DelayThresholds(),
           per_request: Any = None) -> dict[str, Any]:
    """The self-check of one procedure: the figures with their client delay, the client's own
    figures, the option-C error and whether (and why) the run is flagged."""
    checks = check_figures(figures, delay, thresholds, per_request)
    reasons = [_reason(c, thresholds) for c in checks if c.flagged]
    if option_c is not None:
        reasons.extend(_option_c_reasons(option_c, checks, thresholds))
    return {
        "figures": [c.to_json() for c in checks],
        "client": delay.to_json() if delay is not None else None,
        "option_c_error": dict(option_c) if option_c is not None else None,
        "thresholds": asdict(thresholds),
        "flagged": bool(reasons),
        "reasons": reasons,
    }


def procedure_check(runs: Sequence[Mapping[str, Any]], metrics: Mapping[str, Any] | None,
                    thresholds: DelayThresholds = DelayThresholds(), *, primary: int | None = None,
                    per_request: Any = None) -> dict[str, Any] | None:
    """:func:`assess` for one procedure of a results document: every latency percentile of its
    summary ``metrics`` against the client delay of the run that produced them (``runs[primary]``;
    the worst of every run when the summary is not one run's), whose ``load`` summary carries
    ``client_delay`` and ``option_c_error``. ``per_request``: the summary's per-request columns (TPOT's
    OSL). None when no run measured its client delay (sharded runs, older documents)."""
    loads = [r.get("load") or {} for r in runs]
    if primary is not None and 0 <= primary < len(loads) and loads[primary].get("client_delay"):
        loads = [loads[primary]]
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
    return assess(figures, delay, option_c, thresholds, per_request)
