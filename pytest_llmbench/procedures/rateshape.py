"""A rate-shaped run over time (issue 50): offered against achieved rate and the latency, window by window.

For a run whose arrivals follow a rate schedule (loadgen/shapes.py), :class:`RateSeries` keeps three numbers
per finished record (its intended send time, its T_submit and its TTFT; 24 bytes, fed off the sending path
where the run's records are tallied) and :meth:`RateSeries.to_json` gives, per window of
:data:`WINDOW_S` seconds from the schedule's start: the offered rate (the schedule's integral over the
window / its length), the scheduled one (the drawn arrivals' intended times), the achieved one (sends by
T_submit, App. B.1.1) and TTFT P50/P99 of the requests sent in the window (§5.1.3: T_first − T_submit, first
content token), plus the rate function's vertices. A measured run keeps it in its summary's
``extra.rate_shape`` (results.json ``procedures[].result.runs[].extra.rate_shape``), which
``report/rates.py`` draws.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..common.records import RequestRecord
from ..measure.stats import numpy_percentiles_sorted

if TYPE_CHECKING:  # pragma: no cover
    from ..loadgen.load import ClosedLoop, OpenLoop
    from ..loadgen.shapes import RateSchedule

__all__ = ["WINDOW_S", "RateSeries", "rate_series_for", "with_rate_series"]

WINDOW_S = 5.0  # seconds per window (issue 50: "per 5-s window")


class RateSeries:
    """One shaped run's sends and TTFTs as its records finish (``add``), summarised per window (``to_json``)."""

    def __init__(self, schedule: RateSchedule, seed: int, window_s: float = WINDOW_S) -> None:
        if not window_s > 0:
            raise ValueError(f"window_s must be > 0, got {window_s!r}")
        self.schedule, self.seed, self.window_s = schedule, seed, float(window_s)
        self.intended = array("q")  # ns, perf_counter clock (0: none)
        self.sent = array("q")  # T_submit, ns (0: never submitted)
        self.ttft = array("q")  # ns (-1: none: failed, or no content token)

    def add(self, r: RequestRecord) -> None:
        """One finished record (any phase but the measured one is skipped)."""
        if r.phase != "measure":
            return
        self.intended.append(r.intended_ns or 0)
        self.sent.append(r.sent_ns or 0)
        ok = r.ok and r.first_token_ns is not None and r.sent_ns
        self.ttft.append(r.first_token_ns - r.sent_ns if ok else -1)  # type: ignore[operator]

    def to_json(self, start_ns: int) -> dict[str, Any]:
        """The windows from the schedule's start ``start_ns`` (the run's ``perf_counter_ns`` origin) to the later of
        the schedule's end and the last send: ``t0_s``, ``t1_s``, ``offered``, ``scheduled``, ``achieved`` (req/s),
        ``sent``, ``ttft_n``, ``ttft_p50_s``, ``ttft_p99_s``; and ``rate_points`` ([t_s, req/s], the rate function's
        vertices, a step where two segments meet)."""
        sched, w = self.schedule, self.window_s
        sent = np.frombuffer(self.sent, dtype=np.int64) if len(self.sent) else np.zeros(0, np.int64)
        intended = np.frombuffer(self.intended, dtype=np.int64) if len(self.intended) else np.zeros(0, np.int64)
        ttft = np.frombuffer(self.ttft, dtype=np.int64) if len(self.ttft) else np.zeros(0, np.int64)
        t_sent = np.where(sent > 0, (sent - start_ns) / 1e9, np.nan)
        t_int = np.where(intended > 0, (intended - start_ns) / 1e9, np.nan)
        end = max(sched.duration_s, float(np.nanmax(t_sent)) if np.isfinite(t_sent).any() else 0.0)
        n_win = max(1, math.ceil(end / w - 1e-9))
        windows = []
        for k in range(n_win):
            t0, t1 = k * w, min((k + 1) * w, end) if k == n_win - 1 else (k + 1) * w
            length = max(t1 - t0, 1e-9)
            in_sent = (t_sent >= t0) & (t_sent < t1) if k < n_win - 1 else (t_sent >= t0) & (t_sent <= t1)
            in_int = (t_int >= t0) & (t_int < t1) if k < n_win - 1 else (t_int >= t0) & (t_int <= t1)
            lat = np.sort(ttft[in_sent & (ttft >= 0)] / 1e9)
            p50, p99 = numpy_percentiles_sorted(lat, (50.0, 99.0)) if lat.size else (None, None)
            windows.append({
                "t0_s": round(t0, 6), "t1_s": round(t1, 6),
                "offered": float(sched.expected_between(t0, min(t1, sched.duration_s))) / length
                if t0 < sched.duration_s else 0.0,
                "scheduled": int(in_int.sum()) / length, "achieved": int(in_sent.sum()) / length,
                "sent": int(in_sent.sum()), "ttft_n": int(lat.size),
                "ttft_p50_s": None if p50 is None else float(p50), "ttft_p99_s": None if p99 is None else float(p99),
            })
        points: list[list[float]] = []
        t = 0.0
        for s in sched.segments:
            points += [[t, s.start_rate], [t + s.duration_s, s.end_rate]]
            t += s.duration_s
        return {"window_s": w, "schedule": sched.to_json(), "seed": self.seed, "windows": windows,
                "rate_points": points, "sent": int((sent > 0).sum()), "expected": sched.expected}


def rate_series_for(load: OpenLoop | ClosedLoop) -> RateSeries | None:
    """The series to keep for ``load``: one when its arrivals follow a rate schedule, else None."""
    schedule = getattr(getattr(load, "arrival", None), "schedule", None)
    if schedule is None:
        return None
    return RateSeries(schedule, load.arrival.seed)  # type: ignore[union-attr]


def with_rate_series(load: OpenLoop | ClosedLoop, on_record: Callable[[RequestRecord], None]
                     ) -> tuple[Callable[[RequestRecord], None], RateSeries | None]:
    """``on_record`` and the series of ``load`` (:func:`rate_series_for`); with a series, an ``on_record`` that
    also feeds it each finished record (off the sending path, where the run's records are tallied)."""
    series = rate_series_for(load)
    if series is None:
        return on_record, None

    def both(rec: RequestRecord) -> None:
        on_record(rec)
        series.add(rec)

    return both, series
