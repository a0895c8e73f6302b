"""A replayed trace's send times as the open loop's arrival process (§4.2.3, issue 50).

:class:`TraceArrival` is an :class:`~.load.ArrivalProcess` of kind ``trace`` whose ``offsets_ns()`` yields
the trace's offsets (ns from the run's start, the first 0) and then ends: the open loop sends one request
per offset, at its absolute time, and nothing after the last (``_Runner._dispatch_open`` ends a finite
schedule). ``plan_shards`` deals it like any finite schedule. Its ``rate`` is the trace's mean rate (None
for a trace without a span), for the report only. :func:`replay_fidelity` says how closely a run kept to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..common.records import RequestRecord
from .load import ArrivalProcess, LagStats

__all__ = ["ReplayFidelity", "TraceArrival", "replay_fidelity"]


@dataclass(frozen=True)
class TraceArrival(ArrivalProcess):
    """The send offsets of a trace (ns from the start, non-decreasing), as an arrival process."""

    offsets: tuple[int, ...] = ()

    @classmethod
    def of(cls, offsets: Sequence[int], *, seed: int = 0) -> TraceArrival:
        """The process of ``offsets`` (ns, the first 0, never decreasing); its rate the mean over their span."""
        offs = tuple(int(x) for x in offsets)
        if not offs:
            raise ValueError("a trace's schedule needs at least one send time")
        if offs[0] != 0 or any(b < a for a, b in zip(offs, offs[1:])):
            raise ValueError("a trace's send offsets start at 0 and never decrease")
        span = offs[-1] / 1e9
        rate = (len(offs) - 1) / span if span > 0 and len(offs) > 1 else None
        return cls("trace", rate, seed, None, offsets=offs)  # type: ignore[arg-type]

    def offsets_ns(self) -> Iterator[int]:
        return iter(self.offsets)

    def schedule_ns(self, n: int) -> np.ndarray:
        return super().schedule_ns(min(n, len(self.offsets)))


@dataclass(frozen=True)
class ReplayFidelity:
    """How closely a run replayed its trace (issue 50): per request sent, its send time (T_submit) against the
    trace's (the run's start plus the request's offset), the gaps between consecutive sends against the trace's
    gaps, and the input length the server (else the client's tokenizer) counted against the trace's."""

    planned: int  # the trace's requests
    sent: int  # requests submitted (sent_ns known)
    send_lag: LagStats  # T_submit − trace time
    gap_error: LagStats  # |send gap − trace gap| between consecutive requests (by trace order)
    input_counted_by: str  # "server usage" | "client tokenizer" | "spec" (what counted the sent input)
    input_median_rel_error: float | None  # median |sent − trace| / trace input length
    input_max_rel_error: float | None
    schedule_mismatches: int  # requests whose intended time was not the trace's (0 for a faithful schedule)

    def to_json(self) -> dict[str, Any]:
        return {"planned": self.planned, "sent": self.sent, "send_lag": asdict(self.send_lag),
                "gap_error": asdict(self.gap_error), "input_counted_by": self.input_counted_by,
                "input_median_rel_error": self.input_median_rel_error,
                "input_max_rel_error": self.input_max_rel_error, "schedule_mismatches": self.schedule_mismatches}


def replay_fidelity(records: Iterable[RequestRecord], offsets_ns: Sequence[int], input_lengths: Sequence[int],
                    start_ns: int) -> ReplayFidelity:
    """The :class:`ReplayFidelity` of a run's measured ``records`` (any order; ``index`` = the trace position)
    against the trace's ``offsets_ns`` and ``input_lengths``, the run having started at ``start_ns``."""
    n = len(offsets_ns)
    sent = np.zeros(n, dtype=np.int64)
    inp = np.full(n, -1, dtype=np.int64)
    mismatched = 0
    counted = {"server usage": 0, "client tokenizer": 0, "spec": 0}
    for r in records:
        i = r.index
        if r.phase != "measure" or not 0 <= i < n or not r.sent_ns:
            continue
        sent[i] = r.sent_ns
        if r.intended_ns is not None and r.intended_ns != start_ns + int(offsets_ns[i]):
            mismatched += 1
        if r.input_tokens_server is not None:
            inp[i], how = r.input_tokens_server, "server usage"
        elif r.input_tokens_client is not None:
            inp[i], how = r.input_tokens_client, "client tokenizer"
        else:
            inp[i], how = r.spec_input_tokens, "spec"
        counted[how] += 1
    offs = np.asarray(offsets_ns, dtype=np.int64)
    ok = sent > 0
    lag = sent[ok] - (start_ns + offs[ok])
    both = ok[1:] & ok[:-1]  # consecutive requests both sent
    gaps = np.abs(np.diff(sent) - np.diff(offs))[both]
    want = np.asarray(input_lengths, dtype=np.float64)
    have = inp >= 0
    rel = np.abs(inp[have] - want[have]) / np.maximum(want[have], 1.0)
    return ReplayFidelity(
        planned=n, sent=int(ok.sum()), send_lag=LagStats.of_ns(lag.tolist()), gap_error=LagStats.of_ns(gaps.tolist()),
        input_counted_by=max(counted, key=lambda k: counted[k]) if any(counted.values()) else "none",
        input_median_rel_error=float(np.median(rel)) if rel.size else None,
        input_max_rel_error=float(rel.max()) if rel.size else None, schedule_mismatches=mismatched)
