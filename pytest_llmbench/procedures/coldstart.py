"""§4.5.3 cold start: the first requests after a restart of the SUT, against as many sent warm.

:class:`ColdStart` holds the cold run (sent one at a time right after the restart, before any
warm-up) and the warm reference (as many requests of the same workload, sent the same way after the
warm-up), and gives the labelled table, notes and measurements every procedure's result carries when
it measured one (``ProcedureRun.measure_cold_start`` / ``measure_warm_reference``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..measure.units import Cell, CellValue
from ..sut.adapters import metric_names
from .helpers import fmt_ms
from .result import Table
from .run import Measured

__all__ = ["ColdStart"]


@dataclass
class ColdStart:
    """§4.5.3 cold start: the SUT restarted through the configure hook's ``restart`` setting, the first
    requests sent one at a time before any warm-up, and as many requests of the same workload
    sent the same way after the warm-up (the warm reference)."""

    restart_s: float  # the restart call until it returned (stop, start, the server answering)
    cold: Measured
    warm: Measured | None = None

    @staticmethod
    def ttfts(m: Measured | None) -> list[float | None]:
        """TTFT (s) per request in send order; None for a request that failed."""
        if m is None:
            return []
        recs = sorted(m.records, key=lambda r: r.sent_ns)
        return [(r.first_token_ns - r.sent_ns) / 1e9 if r.ok and r.first_token_ns is not None else None
                for r in recs]

    @property
    def server_requests_before(self) -> float | None:
        """The server's finished-requests counter at the cold run's first scrape (adapter role
        ``requests_finished``; else the known names in its first snapshot)."""
        first = self.cold.telemetry.first("requests_finished")
        if first is not None:
            return first
        before = self.cold.server_before or {}  # 0 right after a restart: nothing was served before
        return next((before[n] for n in metric_names("requests_finished") if n in before), None)

    def to_json(self) -> dict[str, Any]:
        cold, warm = self.ttfts(self.cold), [t for t in self.ttfts(self.warm) if t is not None]
        first = cold[0] if cold else None
        warm_p50 = float(np.median(warm)) if warm else None
        first_rec = min(self.cold.records, key=lambda r: r.sent_ns) if self.cold.records else None
        return {
            "restart_s": round(self.restart_s, 3),
            "requests": len(cold),
            "first_ttft_s": first,
            "first_e2e_s": (first_rec.end_ns - first_rec.sent_ns) / 1e9
            if first_rec is not None and first_rec.ok and first_rec.end_ns else None,
            "first_error": None if first_rec is None or first_rec.ok else first_rec.error_message,
            "cold_ttft_s": cold,
            "warm_ttft_s": self.ttfts(self.warm),
            "warm_ttft_p50_s": warm_p50,
            "first_over_warm_p50": first / warm_p50 if first is not None and warm_p50 else None,
            "server_requests_before": self.server_requests_before,
            "warmup_requests_before": 0,  # the cold requests are the first the client sends after the restart
            "cold_run": self.cold.summary.label,
            "warm_run": None if self.warm is None else self.warm.summary.label,
        }

    def table(self) -> Table:
        d = self.to_json()
        rows: list[list[CellValue]] = [
            [f"cold #{i + 1}" + (" (first after restart)" if i == 0 else ""), Cell(t, "s") if t is not None
             else "failed"] for i, t in enumerate(d["cold_ttft_s"])]
        rows += [[f"warm #{i + 1}", Cell(t, "s") if t is not None else "failed"] for i, t in enumerate(d["warm_ttft_s"])]
        ratio = d["first_over_warm_p50"]
        return Table("Cold start (§4.5.3)", ["Request", "TTFT"], rows, notes=[
            f"COLD START measurement: the SUT was restarted ({d['restart_s']:.1f} s until it answered) and the first "
            f"{d['requests']} requests were sent one at a time before any warm-up; the warm rows are as many "
            "requests of the same workload sent the same way after the warm-up",
            f"first request TTFT {fmt_ms(d['first_ttft_s'])} vs warm P50 {fmt_ms(d['warm_ttft_p50_s'])}"
            + (f" ({ratio:.2f}x)" if ratio is not None else ""),
            "server requests finished before the first cold request: "
            + ("not reported (no /metrics counter)" if d["server_requests_before"] is None
               else f"{d['server_requests_before']:g}")])

    def measurements(self) -> dict[str, Any]:
        d = self.to_json()

        def ms(v: float | None) -> float | None:
            return None if v is None else round(v * 1000, 3)

        return {"cold_start_first_ttft_ms": ms(d["first_ttft_s"]), "cold_start_warm_ttft_p50_ms":
                ms(d["warm_ttft_p50_s"]), "cold_start_ratio": d["first_over_warm_p50"],
                "cold_start_restart_s": d["restart_s"], "cold_start_requests": d["requests"]}
