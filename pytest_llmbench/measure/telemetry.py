"""The server's own telemetry: its Prometheus ``/metrics`` sampled during a run, beside the client's figures.

A serving engine knows why a client sees the latency it sees: requests running and waiting,
KV-cache usage, preemptions, prefix-cache hits. :class:`TelemetrySampler` scrapes the server's
``/metrics`` at a fixed interval (default :data:`DEFAULT_INTERVAL_S`) from before the run's first
request to after its last, on the run's clock (``perf_counter_ns``, §4.7.1), and keeps, per
*role* (``waiting``, ``running``, ``preemptions``, ``kv_usage``, ``prefix_hits``,
``prefix_queries``, ...), the value of the Prometheus series the server's adapter names for it
(``sut/adapters``: first present name wins, summed over label sets; fractions take the largest).
The exposition is parsed by ``prometheus_client.parser.text_string_to_metric_families``.

Ideas taken from AIPerf's server-metrics collector: a reachability check first (a server
without ``/metrics`` is *not exposed*, never an error), a final scrape after the run (so a
counter's increase covers the whole run), each scrape's own latency kept, and counters read as
increases (reset-aware) and rates between scrapes. Evidence it gives: the queue drained before
measuring (§4.5.1 item 3), preemption *events* (§5.8; an upper bound on requests preempted),
the server's prefix-cache hit rate (§5.7), KV usage at capacity (§5.5, supporting only).

Nothing here sends a request: the caller hands in ``scrape`` (the load generator's client GET).
"""

from __future__ import annotations

import asyncio
import bisect
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["COUNTER_ROLES", "DEFAULT_INTERVAL_S", "DEFAULT_PATH", "FRACTION_ROLES", "NOT_EXPOSED", "SAMPLED", "Scrape",
           "ServerHistogram", "TelemetrySampler", "TelemetrySeries", "read_exposition", "read_histogram", "read_roles",
           "read_samples", "select_lines"]

DEFAULT_INTERVAL_S = 0.25
DEFAULT_PATH = "/metrics"  # Prometheus' convention; a server's adapter names its own (ServerAdapter.metrics_path)
#: Roles whose series are cumulative counters (read as increases and rates).
COUNTER_ROLES = frozenset({"preemptions", "prefix_hits", "prefix_queries", "requests_preempted",
                           "requests_finished"})
#: Roles whose series are fractions: over several label sets (engines) the largest is kept, not the sum.
FRACTION_ROLES = frozenset({"kv_usage"})

SAMPLED = "sampled"
NOT_EXPOSED = "not exposed"
NO_KNOWN_SERIES = "no known series"
OFF = "off"

#: ``scrape()`` -> (HTTP status, body text), or None when the server did not answer.
Scrape = Callable[[], Awaitable["tuple[int, str] | None"]]


def read_exposition(text: str) -> dict[str, tuple[str, dict[str, float]]]:
    """Prometheus text exposition -> ``{sample name: (family type, {label key: value})}``.

    The label key is ``{k="v",...}`` with labels sorted by name ("" without labels). Parsed by
    ``prometheus_client``; a malformed page raises ``ValueError`` naming the problem.
    """
    out: dict[str, tuple[str, dict[str, float]]] = {}
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                key = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out.setdefault(s.name, (fam.type, {}))[1][f"{{{key}}}" if key else ""] = float(s.value)
    except (ValueError, TypeError, IndexError) as exc:
        raise ValueError(f"/metrics is not Prometheus text exposition: {exc}") from None
    return out


def select_lines(text: str, names: frozenset[str]) -> str:
    """The lines of an exposition that belong to ``names`` (samples, and their ``# TYPE``/``# HELP``): what the
    sampler parses between its full first and last scrapes. A vLLM page is mostly histograms no role reads;
    skipping them before the parser cuts its cost several-fold (bench/telemetry.py)."""
    keep = []
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 3 and (parts[2] in names or parts[2] + "_total" in names):
                keep.append(line)
            continue
        cut = len(line)
        for sep in ("{", " "):
            i = line.find(sep)
            if 0 <= i < cut:
                cut = i
        if line[:cut] in names:
            keep.append(line)
    return "\n".join(keep) + "\n"


def read_samples(text: str) -> dict[str, float]:
    """``{series: value}``: a series without labels keyed by its name, one with labels by
    ``name{k="v",...}`` (labels sorted), so keys are stable across servers."""
    return {name + key: v for name, (_, by_label) in read_exposition(text).items() for key, v in by_label.items()}


def _aggregate(role: str, values: Sequence[float]) -> float:
    return max(values) if role in FRACTION_ROLES else math.fsum(values)


def read_roles(exposition: Mapping[str, tuple[str, dict[str, float]]],
               names: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, str, float]]:
    """``{role: (Prometheus name, type, value)}`` for each role whose names appear (first present wins;
    label sets summed, fractions: the largest)."""
    out: dict[str, tuple[str, str, float]] = {}
    for role, candidates in names.items():
        for n in candidates:
            hit = exposition.get(n)
            if hit is not None and hit[1]:
                out[role] = (n, hit[0], _aggregate(role, list(hit[1].values())))
                break
    return out


@dataclass(frozen=True)
class ServerHistogram:
    """A server's Prometheus histogram (e.g. vLLM's ``vllm:request_queue_time_seconds``), its label sets
    (engines, models) summed bucket by bucket: upper bounds ``le`` ascending (the last ``inf``), cumulative
    counts, ``total`` (``_sum``) and ``count`` (``_count``). :meth:`since` gives a run's own observations
    (the increase from the page before the run to the page after it)."""

    name: str
    le: tuple[float, ...]
    cumulative: tuple[float, ...]
    total: float
    count: float

    @property
    def mean(self) -> float | None:
        """``_sum / _count``: exact, unlike the percentiles."""
        return self.total / self.count if self.count > 0 else None

    def since(self, before: ServerHistogram | None) -> ServerHistogram:
        """The observations made after ``before`` (reset-aware per series: a drop takes the new value, as
        Prometheus' ``increase`` does); ``before`` None or with other buckets: this one."""
        if before is None or before.le != self.le:
            return self
        inc = lambda a, b: b - a if b >= a else b  # noqa: E731
        return ServerHistogram(self.name, self.le, tuple(inc(a, b) for a, b in zip(before.cumulative, self.cumulative)),
                               inc(before.total, self.total), inc(before.count, self.count))

    def bucket(self, q: float) -> tuple[float, float]:
        """The bucket ``(lower, upper]`` in which the ``q``-quantile (0..1) lies: the percentile's resolution."""
        rank = q * self.count
        lower = 0.0
        for le, c in zip(self.le, self.cumulative):
            if c >= rank and c > 0:
                return lower, le
            lower = le
        return lower, math.inf

    def quantile(self, q: float) -> float | None:
        """Prometheus' ``histogram_quantile``: linear within the bucket holding rank ``q · count`` (the
        bucket's lower bound 0 for the first); None without observations; the last finite bound when the
        rank falls in the ``+Inf`` bucket."""
        if self.count <= 0:
            return None
        rank = q * self.count
        lower, below = 0.0, 0.0
        for le, c in zip(self.le, self.cumulative):
            if c >= rank and c > below:
                if math.isinf(le):
                    return lower
                return lower + (le - lower) * (rank - below) / (c - below)
            lower, below = le, c
        return lower

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "le": [None if math.isinf(x) else x for x in self.le],
                "cumulative": list(self.cumulative), "sum": self.total, "count": self.count}


def read_histogram(exposition: Mapping[str, tuple[str, dict[str, float]]], name: str) -> ServerHistogram | None:
    """The histogram ``name`` of a parsed page (:func:`read_exposition`), its label sets other than ``le``
    summed; None when the page has no ``name_bucket`` series."""
    buckets = exposition.get(name + "_bucket")
    if not buckets or not buckets[1]:
        return None
    by_le: dict[float, float] = {}
    for key, v in buckets[1].items():
        m = _LE.search(key)
        if m is None:
            continue
        le = math.inf if m.group(1) in ("+Inf", "Inf", "inf") else float(m.group(1))
        by_le[le] = by_le.get(le, 0.0) + v
    if not by_le:
        return None
    le = tuple(sorted(by_le))
    total = math.fsum((exposition.get(name + "_sum") or ("", {}))[1].values())
    count = math.fsum((exposition.get(name + "_count") or ("", {}))[1].values())
    return ServerHistogram(name, le, tuple(by_le[x] for x in le), total, count)


_LE = re.compile(r'le="([^"]+)"')


@dataclass
class TelemetrySeries:
    """A run's server series: one timestamp array and, per role, one value array (None: the scrape
    failed or the series was absent then). ``t_ns``: the run's clock; stored relative to ``origin_ns``.

    ``status``: :data:`SAMPLED`, :data:`NOT_EXPOSED` (no /metrics: not an error), ``no known series``
    (a page without any series the adapter names), or ``off`` (sampling disabled).
    """

    status: str
    detail: str = ""
    interval_s: float = DEFAULT_INTERVAL_S
    path: str = DEFAULT_PATH
    names: dict[str, str] = field(default_factory=dict)  # role -> the Prometheus name read
    kinds: dict[str, str] = field(default_factory=dict)  # role -> gauge | counter | unknown
    t_ns: list[int] = field(default_factory=list)
    values: dict[str, list[float | None]] = field(default_factory=dict)
    scrape_ns: list[int] = field(default_factory=list)  # each successful scrape's own latency
    failed: int = 0  # scrapes that got no readable page after the first one
    origin_ns: int = 0  # the run's t = 0 (the load's start) on the same clock
    client_in_flight: list[int] | None = None  # the client's requests in flight at each scrape (same times)

    def set_client_in_flight(self, changes: Sequence[tuple[int, int]]) -> None:
        """The client's in-flight count at each scrape from the load generator's change log
        (``(ns since origin, in flight)``, LoadResult.concurrency_samples): the value in force then."""
        if not changes:
            return
        at = [t for t, _ in changes]
        self.client_in_flight = [changes[i - 1][1] if (i := bisect.bisect_right(at, t - self.origin_ns)) else 0
                                 for t in self.t_ns]

    @property
    def sampled(self) -> bool:
        return self.status == SAMPLED and bool(self.t_ns)

    def times_s(self) -> list[float]:
        return [(t - self.origin_ns) / 1e9 for t in self.t_ns]

    def points(self, role: str) -> list[tuple[float, float]]:
        """(s on the run's clock, value) of the scrapes that read ``role``."""
        return [(t, v) for t, v in zip(self.times_s(), self.values.get(role, ())) if v is not None]

    def has(self, role: str) -> bool:
        return any(v is not None for v in self.values.get(role, ()))

    def first(self, role: str) -> float | None:
        pts = self.points(role)
        return pts[0][1] if pts else None

    def peak(self, role: str, t0: float | None = None, t1: float | None = None) -> float | None:
        vals = [v for t, v in self.points(role) if (t0 is None or t >= t0) and (t1 is None or t <= t1)]
        return max(vals) if vals else None

    def mean(self, role: str, t0: float | None = None, t1: float | None = None) -> float | None:
        vals = [v for t, v in self.points(role) if (t0 is None or t >= t0) and (t1 is None or t <= t1)]
        return math.fsum(vals) / len(vals) if vals else None

    def increase(self, role: str) -> float | None:
        """A counter's increase over the series, reset-aware (a drop counts the new value, as
        Prometheus' ``increase`` does); None without two readings."""
        vals = [v for _, v in self.points(role)]
        if len(vals) < 2:
            return None
        return math.fsum(b - a if b >= a else b for a, b in zip(vals, vals[1:]))

    def rates(self, role: str) -> list[tuple[float, float]]:
        """A counter's rate per second between consecutive readings, at the later reading's time."""
        pts = self.points(role)
        return [(t1, ((v1 - v0) if v1 >= v0 else v1) / (t1 - t0))
                for (t0, v0), (t1, v1) in zip(pts, pts[1:]) if t1 > t0]

    def to_json(self) -> dict[str, Any]:
        """The results.json form: times in s on the run's clock (ms resolution), one array per role."""
        scrape = sorted(self.scrape_ns)
        return {
            "status": self.status, "detail": self.detail, "path": self.path, "interval_s": self.interval_s,
            "names": dict(self.names), "kinds": dict(self.kinds),
            "t_s": [round(t, 3) for t in self.times_s()],
            "values": {r: [None if v is None or not math.isfinite(v) else v for v in vs]
                       for r, vs in self.values.items()},
            "client_in_flight": self.client_in_flight,
            "scrapes": len(self.t_ns), "failed": self.failed,
            "scrape_ms": None if not scrape else {"p50": round(scrape[len(scrape) // 2] / 1e6, 3),
                                                  "max": round(scrape[-1] / 1e6, 3)},
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> TelemetrySeries:
        """Back from :meth:`to_json` (times become ns from ``origin_ns`` = 0)."""
        return cls(status=str(d.get("status", NOT_EXPOSED)), detail=str(d.get("detail", "")),
                   interval_s=float(d.get("interval_s") or DEFAULT_INTERVAL_S), path=str(d.get("path", DEFAULT_PATH)),
                   names=dict(d.get("names") or {}), kinds=dict(d.get("kinds") or {}),
                   t_ns=[round(float(t) * 1e9) for t in d.get("t_s") or []],
                   values={str(r): list(v) for r, v in (d.get("values") or {}).items()},
                   failed=int(d.get("failed") or 0), client_in_flight=d.get("client_in_flight"))


class TelemetrySampler:
    """Scrape ``/metrics`` every ``interval_s`` between :meth:`start` and :meth:`stop`.

    ``start()`` makes the first scrape (the reachability check) and returns its full snapshot
    (``{sample name: value summed over its label sets}``; None when not exposed), then samples on an absolute schedule
    (a slow scrape skips slots rather than drifting); ``stop()`` cancels it and makes the final
    scrape, whose snapshot it returns. ``interval_s`` 0: only the two snapshots, no series.
    ``clock`` is injectable so tests control the timestamps. ``path`` names the page in the series and
    its messages: default the scrape's own ``path`` (the load generator's scraper takes it from the
    server's adapter), else :data:`DEFAULT_PATH`.
    """

    def __init__(self, scrape: Scrape, names: Mapping[str, Sequence[str]], *, interval_s: float = DEFAULT_INTERVAL_S,
                 path: str | None = None, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        if interval_s < 0 or not math.isfinite(interval_s):
            raise ValueError(f"telemetry interval must be >= 0 seconds (0: off), got {interval_s!r}")
        self._scrape, self._names, self._clock = scrape, {r: tuple(n) for r, n in names.items()}, clock
        self._wanted = frozenset(n for ns in self._names.values() for n in ns)
        if path is None:
            path = str(getattr(scrape, "path", DEFAULT_PATH))
        self.series = TelemetrySeries(status=OFF if interval_s == 0 else NOT_EXPOSED, interval_s=interval_s,
                                      path=path)
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        #: the parsed pages of the first and the last scrape (the snapshots): a run's histograms (:meth:`histograms`)
        self._pages: list[dict[str, tuple[str, dict[str, float]]]] = []

    async def _once(self, *, snapshot: bool = False) -> dict[str, float] | None:
        """One scrape into the series; with ``snapshot`` the page's every sample name (summed over label sets)."""
        t0 = self._clock()
        got = await self._scrape()
        t1 = self._clock()
        s = self.series
        if got is None or got[0] != 200:
            if not s.t_ns:
                s.detail = f"GET {s.path} answered {got[0]}" if got else f"GET {s.path}: no answer"
            s.failed += bool(s.t_ns)
            return None
        try:  # the first and last scrapes read the whole page (snapshots); the others only the named series
            page = read_exposition(got[1] if snapshot else select_lines(got[1], self._wanted))
        except ValueError as exc:
            if not s.t_ns:
                s.detail = str(exc)
            s.failed += bool(s.t_ns)
            return None
        roles = read_roles(page, self._names)
        if not roles and not s.t_ns:
            s.status = NO_KNOWN_SERIES
            s.detail = (f"GET {s.path} has none of the series the server's adapter names "
                        f"({', '.join(sorted({n for ns in self._names.values() for n in ns})[:6])}, ...)")
            return None
        if s.status != OFF:
            s.status = SAMPLED
        n = len(s.t_ns)
        s.t_ns.append((t0 + t1) // 2)  # the page was rendered between send and answer: the midpoint
        s.scrape_ns.append(t1 - t0)
        for role, (name, kind, value) in roles.items():
            s.names.setdefault(role, name)
            s.kinds.setdefault(role, "counter" if role in COUNTER_ROLES and kind == "unknown" else kind)
            s.values.setdefault(role, [None] * n).append(value)
        for vs in s.values.values():
            if len(vs) == n:
                vs.append(None)
        if snapshot:  # every sample name, summed over its label sets (engines, models)
            self._pages.append(page)
            return {name: math.fsum(by.values()) for name, (_, by) in page.items()}
        return None

    def histograms(self, names: Mapping[str, Sequence[str]]) -> dict[str, ServerHistogram]:
        """After :meth:`stop`: per role, the run's own observations of the first histogram named for it
        that the last page holds (its increase since the first page), e.g. vLLM's queue and prefill
        times. Empty when the server was not scraped twice."""
        if len(self._pages) < 2:
            return {}
        out = {}
        for role, candidates in names.items():
            for n in candidates:
                after = read_histogram(self._pages[-1], n)
                if after is not None:
                    out[role] = after.since(read_histogram(self._pages[0], n))
                    break
        return out

    async def start(self) -> dict[str, float] | None:
        """The first scrape (reachability; the 'before' snapshot) and, when exposed, the sampling loop."""
        before = await self._once(snapshot=True)
        if before is not None and self.series.interval_s > 0:
            self._task = asyncio.create_task(self._loop())
        return before

    async def _loop(self) -> None:
        period = round(self.series.interval_s * 1e9)
        start = self._clock()
        k = 1
        while True:
            wait = start + k * period - self._clock()
            if wait > 0:
                await asyncio.sleep(wait / 1e9)
            await self._once()
            k = max(k + 1, (self._clock() - start) // period + 1)  # a slow scrape skips slots, no drift

    async def stop(self, *, origin_ns: int | None = None) -> dict[str, float] | None:
        """Stop sampling; the final scrape (the 'after' snapshot) when the first one answered.
        ``origin_ns``: the run's t = 0 for the stored times (default: the first scrape). A second
        call does nothing (None)."""
        if self._stopped:
            return None
        self._stopped = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)  # its CancelledError, not ours
        try:
            after = await self._once(snapshot=True) if self.series.t_ns else None
        finally:
            close = getattr(self._scrape, "aclose", None)  # a scrape with its own connection closes it
            if close is not None:
                await close()
        s = self.series
        s.origin_ns = origin_ns if origin_ns is not None else (s.t_ns[0] if s.t_ns else 0)
        if s.status == OFF and s.t_ns:
            s.detail = "sampling off (--llm-telemetry-interval 0): snapshots before and after the run only"
        return after
