"""Rate shapes over time for the open loop (issue 50): a piecewise rate schedule and its arrivals.

A :class:`RateSchedule` is a list of segments, each ``duration_s`` long, its rate going linearly from
``start_rate`` to ``end_rate`` requests/s (equal rates: a constant segment). Named constructors build
the usual shapes (:func:`hold`, :func:`ramp`, :func:`steps`, :func:`spike`, :func:`burst_drain`,
:func:`sine`), and :func:`parse_shape` reads the same shapes from a short expression a marker or an ini
file can hold (grammar below). :class:`ShapedArrival` draws the arrivals as a non-homogeneous Poisson
process by thinning (Lewis and Shedler, 1979), seeded (§4.3.3): the same schedule and seed give the same
offsets, byte for byte. It is an :class:`~.load.ArrivalProcess` of kind ``"shaped"`` whose
``offsets_ns()`` ends where the schedule ends (a finite schedule, dealt out by ``shards.plan_shards``
like any other).

Expression grammar (whitespace is free; every duration carries its unit: ``ms``, ``s``, ``m`` or ``h``;
a rate is a plain number of requests/s >= 0)::

    shape    := term ("+" term)*                    terms follow one another in time
    term     := name "(" arg ("," arg)* ")"
    arg      := [key "="] value
    hold(rate, for)                                 constant rate
    ramp(from, to, for)                             linear from one rate to another
    steps(rate@for, rate@for, ...)                  constant steps
    spike(base, peak, at, width, for)               base, peak for ``width`` from ``at``, base to ``for``
    burst(high, low, on, off, cycles)               burst/drain cycle: ``on`` at high, ``off`` at low, repeated
    sine(mean, amp, period, for)                    mean + amp·sin(2πt/period), 0 <= mean - amp

e.g. ``ramp(10,100,60s)``, ``hold(10,30s) + ramp(10,100,60s) + hold(100,30s)``, ``steps(10@30s,50@30s)``,
``spike(20,200,at=30s,width=5s,for=60s)``, ``burst(80,5,on=10s,off=20s,cycles=4)``,
``sine(mean=50,amp=40,period=60s,for=300s)``. A sinusoid is drawn as :data:`SINE_PIECES` linear pieces
per period (the rate departs from the sine by at most 0.2 % of ``amp``); the schedule records the pieces.
Every malformed expression is a ValueError naming what is wrong and what to write.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .load import ArrivalProcess

__all__ = [
    "SINE_PIECES",
    "RateSchedule",
    "Segment",
    "ShapedArrival",
    "burst_drain",
    "hold",
    "parse_shape",
    "ramp",
    "schedule_of",
    "sine",
    "spike",
    "steps",
]

#: linear pieces per period of a sinusoid (chord error amp·(1 − cos(π/48)) ≈ 0.2 % of amp)
SINE_PIECES = 48
_BLOCK = 4096  # thinning candidates drawn at once (numpy), as the base process draws its gaps
_MAX_SEGMENTS = 100_000
_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_WRITE = ("write e.g. ramp(10,100,60s), hold(20,30s) + ramp(20,80,60s), steps(10@30s,50@30s), "
          "spike(20,200,at=30s,width=5s,for=60s), burst(80,5,on=10s,off=20s,cycles=4) or "
          "sine(mean=50,amp=40,period=60s,for=300s)")


def _g(v: float) -> str:
    """A number as the expression writes it (shortest round-trip form)."""
    return repr(float(v)).removesuffix(".0") if float(v).is_integer() and abs(v) < 1e15 else repr(float(v))


@dataclass(frozen=True)
class Segment:
    """``duration_s`` seconds whose rate goes linearly from ``start_rate`` to ``end_rate`` req/s."""

    duration_s: float
    start_rate: float
    end_rate: float

    def __post_init__(self) -> None:
        if not (isinstance(self.duration_s, (int, float)) and math.isfinite(self.duration_s) and self.duration_s > 0):
            raise ValueError(f"a segment's duration must be a positive number of seconds, got {self.duration_s!r}")
        for name in ("start_rate", "end_rate"):
            r = getattr(self, name)
            if not (isinstance(r, (int, float)) and not isinstance(r, bool) and math.isfinite(r) and r >= 0):
                raise ValueError(f"a segment's {name.replace('_', ' ')} must be a number of requests/s >= 0, "
                                 f"got {r!r}")
        object.__setattr__(self, "duration_s", float(self.duration_s))
        object.__setattr__(self, "start_rate", float(self.start_rate))
        object.__setattr__(self, "end_rate", float(self.end_rate))

    @property
    def expected(self) -> float:
        """The rate's integral over the segment: its expected number of arrivals."""
        return 0.5 * (self.start_rate + self.end_rate) * self.duration_s

    @property
    def max_rate(self) -> float:
        return max(self.start_rate, self.end_rate)

    def text(self) -> str:
        """The segment as an expression term."""
        if self.start_rate == self.end_rate:
            return f"hold({_g(self.start_rate)},{_g(self.duration_s)}s)"
        return f"ramp({_g(self.start_rate)},{_g(self.end_rate)},{_g(self.duration_s)}s)"


@dataclass(frozen=True)
class RateSchedule:
    """A piecewise-linear rate over ``[0, duration_s)`` (segments in time order), and the expression it
    was written as (``expression``; None: given as segments, :meth:`text` then writes it)."""

    segments: tuple[Segment, ...]
    expression: str | None = None
    _edges: np.ndarray = field(init=False, repr=False, compare=False)
    _cum: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        segs = tuple(self.segments)
        if not segs:
            raise ValueError(f"a rate schedule needs at least one segment; {_WRITE}")
        if len(segs) > _MAX_SEGMENTS:
            raise ValueError(f"a rate schedule of {len(segs)} segments is more than {_MAX_SEGMENTS}")
        if not all(isinstance(s, Segment) for s in segs):
            raise ValueError("a rate schedule's segments must be Segment objects (use schedule_of for tuples)")
        if max(s.max_rate for s in segs) <= 0:
            raise ValueError("a rate schedule whose rate is 0 throughout sends nothing: give a rate > 0 somewhere")
        object.__setattr__(self, "segments", segs)
        edges = np.concatenate(([0.0], np.cumsum([s.duration_s for s in segs])))
        object.__setattr__(self, "_edges", edges)
        object.__setattr__(self, "_cum", np.concatenate(([0.0], np.cumsum([s.expected for s in segs]))))

    # -- the rate function -----------------------------------------------------------------
    @property
    def duration_s(self) -> float:
        return float(self._edges[-1])

    @property
    def expected(self) -> float:
        """Expected number of arrivals over the whole schedule (the rate's integral)."""
        return float(self._cum[-1])

    @property
    def mean_rate(self) -> float:
        return self.expected / self.duration_s

    @property
    def max_rate(self) -> float:
        return max(s.max_rate for s in self.segments)

    @property
    def edges_s(self) -> tuple[float, ...]:
        """Segment boundaries from 0 to the end, in seconds."""
        return tuple(float(e) for e in self._edges)

    def _locate(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per time: its segment's index and the time into that segment (clamped to the schedule)."""
        t = np.clip(np.asarray(t, dtype=np.float64), 0.0, self.duration_s)
        i = np.clip(np.searchsorted(self._edges, t, side="right") - 1, 0, len(self.segments) - 1)
        return i, t - self._edges[i]

    def rate_at(self, t: float | np.ndarray) -> np.ndarray:
        """The rate (req/s) at time ``t`` s (0 outside ``[0, duration_s)``); right-continuous at a boundary."""
        ta = np.asarray(t, dtype=np.float64)
        i, u = self._locate(ta)
        r0 = np.array([s.start_rate for s in self.segments])[i]
        r1 = np.array([s.end_rate for s in self.segments])[i]
        d = np.array([s.duration_s for s in self.segments])[i]
        out = r0 + (r1 - r0) * (u / d)
        return np.where((ta >= 0) & (ta < self.duration_s), out, 0.0)

    def cumulative(self, t: float | np.ndarray) -> np.ndarray:
        """Λ(t): the rate's integral from 0 to ``t`` s (the expected arrivals by then)."""
        i, u = self._locate(np.asarray(t, dtype=np.float64))
        r0 = np.array([s.start_rate for s in self.segments])[i]
        r1 = np.array([s.end_rate for s in self.segments])[i]
        d = np.array([s.duration_s for s in self.segments])[i]
        return self._cum[i] + r0 * u + 0.5 * (r1 - r0) * u * u / d

    def expected_between(self, a: float | np.ndarray, b: float | np.ndarray) -> np.ndarray:
        """Expected arrivals in ``[a, b)``."""
        return self.cumulative(b) - self.cumulative(a)

    # -- description -------------------------------------------------------------------------
    def text(self) -> str:
        """The expression as written, else the segments as ``hold``/``ramp`` terms joined by ``+``."""
        return self.expression or self.canonical()

    def canonical(self) -> str:
        """The segments as ``hold``/``ramp`` terms joined by ``+`` (parses back to the same schedule)."""
        return " + ".join(s.text() for s in self.segments)

    def describe(self) -> str:
        """One line for reports: the expression and its rate range, length and mean."""
        lo = min(min(s.start_rate, s.end_rate) for s in self.segments)
        return (f"{self.text()}: {lo:g}–{self.max_rate:g} req/s over {self.duration_s:g} s, "
                f"mean {self.mean_rate:.4g} req/s")

    def to_json(self) -> dict[str, Any]:
        """What results.json records: the expression, the segments ``[duration_s, start_rate, end_rate]``
        and the figures they give."""
        return {"expression": self.text(), "segments": [[s.duration_s, s.start_rate, s.end_rate]
                                                         for s in self.segments],
                "duration_s": self.duration_s, "mean_rate": self.mean_rate, "max_rate": self.max_rate,
                "expected_requests": self.expected}


# --------------------------------------------------------------------------------------------
# named shapes
# --------------------------------------------------------------------------------------------


def _steps(levels: Sequence[tuple[float, float]]) -> tuple[Segment, ...]:
    return tuple(Segment(d, r, r) for r, d in levels)


def _spike(base: float, peak: float, at_s: float, width_s: float, duration_s: float) -> tuple[Segment, ...]:
    if not (at_s >= 0 and width_s > 0 and at_s + width_s <= duration_s):
        raise ValueError(f"a spike needs 0 <= at ({at_s:g} s) and at + width ({width_s:g} s) <= for "
                         f"({duration_s:g} s)")
    parts = [(base, at_s), (peak, width_s), (base, duration_s - at_s - width_s)]
    return _steps([(r, d) for r, d in parts if d > 0])


def _burst(high: float, low: float, on_s: float, off_s: float, cycles: int) -> tuple[Segment, ...]:
    if not (isinstance(cycles, int) and not isinstance(cycles, bool) and 1 <= cycles <= _MAX_SEGMENTS // 2):
        raise ValueError(f"burst cycles must be a whole number from 1 to {_MAX_SEGMENTS // 2}, got {cycles!r}")
    return _steps([(high, on_s), (low, off_s)] * cycles)


def _sine(mean: float, amp: float, period_s: float, duration_s: float) -> tuple[Segment, ...]:
    if not (0 <= amp <= mean):
        raise ValueError(f"a sine rate needs 0 <= amp <= mean (the rate may not go below 0), got mean={mean:g}, "
                         f"amp={amp:g}")
    if not (period_s > 0 and duration_s > 0):
        raise ValueError(f"a sine needs period > 0 and for > 0, got period={period_s:g} s, for={duration_s:g} s")
    n = math.ceil(duration_s / period_s * SINE_PIECES - 1e-9)
    if n > _MAX_SEGMENTS:
        raise ValueError(f"sine(for={duration_s:g}s) spans {n} pieces of period/{SINE_PIECES}; more than "
                         f"{_MAX_SEGMENTS}: give a longer period or a shorter duration")
    ts = np.minimum(np.arange(n + 1) * (period_s / SINE_PIECES), duration_s)
    rates = np.maximum(mean + amp * np.sin(2 * np.pi * ts / period_s), 0.0)
    return tuple(Segment(float(b - a), float(r0), float(r1))
                 for a, b, r0, r1 in zip(ts[:-1], ts[1:], rates[:-1], rates[1:]) if b > a)


def hold(rate: float, duration_s: float) -> RateSchedule:
    """A constant ``rate`` for ``duration_s`` seconds."""
    return RateSchedule((Segment(duration_s, rate, rate),))


def ramp(start_rate: float, end_rate: float, duration_s: float) -> RateSchedule:
    """Linear from ``start_rate`` to ``end_rate`` over ``duration_s`` seconds (ramp-up or ramp-down)."""
    return RateSchedule((Segment(duration_s, start_rate, end_rate),))


def steps(levels: Sequence[tuple[float, float]]) -> RateSchedule:
    """Constant steps: ``(rate, duration_s)`` each, in order."""
    return RateSchedule(_steps(levels))


def spike(base: float, peak: float, at_s: float, width_s: float, duration_s: float) -> RateSchedule:
    """``base`` req/s, ``peak`` for ``width_s`` seconds from ``at_s``, then ``base`` up to ``duration_s``."""
    return RateSchedule(_spike(base, peak, at_s, width_s, duration_s))


def burst_drain(high: float, low: float, on_s: float, off_s: float, cycles: int) -> RateSchedule:
    """``cycles`` burst/drain cycles: ``on_s`` seconds at ``high``, then ``off_s`` at ``low`` (e.g. 0)."""
    return RateSchedule(_burst(high, low, on_s, off_s, cycles))


def sine(mean: float, amp: float, period_s: float, duration_s: float) -> RateSchedule:
    """``mean + amp·sin(2πt/period_s)`` for ``duration_s`` seconds (a diurnal shape), as :data:`SINE_PIECES`
    linear pieces per period; needs ``0 <= amp <= mean``."""
    return RateSchedule(_sine(mean, amp, period_s, duration_s))


# --------------------------------------------------------------------------------------------
# the expression form
# --------------------------------------------------------------------------------------------

#: per term: its parameters in order, each "rate", "dur" or "int"
_TERMS: dict[str, tuple[tuple[str, str], ...]] = {
    "hold": (("rate", "rate"), ("for", "dur")),
    "ramp": (("from", "rate"), ("to", "rate"), ("for", "dur")),
    "spike": (("base", "rate"), ("peak", "rate"), ("at", "dur"), ("width", "dur"), ("for", "dur")),
    "burst": (("high", "rate"), ("low", "rate"), ("on", "dur"), ("off", "dur"), ("cycles", "int")),
    "sine": (("mean", "rate"), ("amp", "rate"), ("period", "dur"), ("for", "dur")),
}
_SIGNATURES = {**{k: f"{k}({', '.join(n for n, _ in v)})" for k, v in _TERMS.items()},
               "steps": "steps(rate@for, rate@for, ...)"}
_TERM = re.compile(r"^([a-z_]+)\((.*)\)$", re.S)
_NUMBER = r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?"
_DURATION = re.compile(rf"^({_NUMBER})(ms|s|m|h)$")


def _rate(text: str, where: str) -> float:
    if not re.fullmatch(_NUMBER, text):
        raise ValueError(f"{where}: {text!r} is not a number of requests/s >= 0 (write e.g. 10 or 2.5)")
    return float(text)


def _duration(text: str, where: str) -> float:
    m = _DURATION.match(text)
    if m is None:
        hint = f" (write {text}s)" if re.fullmatch(_NUMBER, text) else ""
        raise ValueError(f"{where}: {text!r} is not a duration: a number and a unit ms, s, m or h{hint}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def _split(text: str, sep: str, where: str) -> list[str]:
    """``text`` split at ``sep`` outside parentheses; unbalanced parentheses are an error."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"{where}: unbalanced ')'; {_WRITE}")
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise ValueError(f"{where}: unclosed '('; {_WRITE}")
    parts.append("".join(cur))
    return parts


def _term(text: str, pos: int) -> tuple[Segment, ...]:
    where = f"term {pos} {text!r}"
    m = _TERM.match(text)
    if m is None:
        raise ValueError(f"{where} is not name(arguments); {_WRITE}")
    name, body = m.group(1), m.group(2)
    args = [a for a in _split(body, ",", where)]
    if any(not a for a in args):
        raise ValueError(f"{where}: an empty argument; write {_SIGNATURES.get(name, name + '(...)')}")
    if name == "steps":
        levels = []
        for a in args:
            rate, at, dur = a.partition("@")
            if not at:
                raise ValueError(f"{where}: step {a!r} is not rate@duration (write e.g. steps(10@30s,50@30s))")
            levels.append((_rate(rate, where), _duration(dur, where)))
        try:
            return _steps(levels)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}; write {_SIGNATURES['steps']}") from None
    params = _TERMS.get(name)
    if params is None:
        raise ValueError(f"{where}: unknown shape {name!r}; known: {', '.join(sorted(_SIGNATURES.values()))}")
    sig = _SIGNATURES[name]
    bound: dict[str, str] = {}
    for i, a in enumerate(args):
        key, eq, value = a.partition("=")
        if not eq:
            if bound and any(k != p for k, (p, _) in zip(bound, params)):
                raise ValueError(f"{where}: a positional argument after a keyword one; write {sig}")
            if i >= len(params):
                raise ValueError(f"{where}: too many arguments; write {sig}")
            key, value = params[i][0], a
        if key not in dict(params):
            raise ValueError(f"{where}: unknown argument {key!r}; write {sig}")
        if key in bound:
            raise ValueError(f"{where}: argument {key!r} given twice; write {sig}")
        bound[key] = value
    missing = [p for p, _ in params if p not in bound]
    if missing:
        raise ValueError(f"{where}: missing {', '.join(missing)}; write {sig}")
    vals: list[Any] = []
    for p, kind in params:
        v = bound[p]
        if kind == "rate":
            vals.append(_rate(v, f"{where} {p}"))
        elif kind == "dur":
            vals.append(_duration(v, f"{where} {p}"))
        elif not v.isdigit():
            raise ValueError(f"{where}: {p} {v!r} is not a whole number; write {sig}")
        else:
            vals.append(int(v))
    build = {"hold": lambda r, d: (Segment(d, r, r),), "ramp": lambda a, b, d: (Segment(d, a, b),),
             "spike": _spike, "burst": _burst, "sine": _sine}[name]
    try:
        return build(*vals)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}; write {sig}") from None


def parse_shape(expression: str) -> RateSchedule:
    """The schedule an expression writes (module docstring's grammar); ValueError naming the problem."""
    if not isinstance(expression, str) or not expression.strip():
        raise ValueError(f"a rate shape expression must be a non-empty string, got {expression!r}; {_WRITE}")
    text = re.sub(r"\s+", "", expression.lower())
    segments: list[Segment] = []
    for pos, term in enumerate(_split(text, "+", "the shape"), 1):
        if not term:
            raise ValueError(f"the shape {expression!r}: an empty term around '+'; {_WRITE}")
        segments.extend(_term(term, pos))
    return RateSchedule(tuple(segments), expression=expression.strip())


def schedule_of(shape: str | RateSchedule | Sequence[Sequence[float]]) -> RateSchedule:
    """A schedule from an expression, a schedule, or segments ``(duration_s, rate)`` /
    ``(duration_s, start_rate, end_rate)``."""
    if isinstance(shape, RateSchedule):
        return shape
    if isinstance(shape, str):
        return parse_shape(shape)
    try:
        items = list(shape)
    except TypeError:
        raise ValueError(f"a rate shape is an expression, a RateSchedule or a list of (duration_s, rate[, "
                         f"end_rate]) segments, got {shape!r}") from None
    segs = []
    for i, seg in enumerate(items, 1):
        if isinstance(seg, Segment):
            segs.append(seg)
            continue
        if isinstance(seg, (str, bytes)) or not hasattr(seg, "__len__") or len(seg) not in (2, 3):
            raise ValueError(f"segment {i} {seg!r} is not (duration_s, rate) or (duration_s, start_rate, end_rate)")
        try:
            segs.append(Segment(seg[0], seg[1], seg[-1]))
        except ValueError as exc:
            raise ValueError(f"segment {i} {tuple(seg)!r}: {exc}") from None
    return RateSchedule(tuple(segs))


# --------------------------------------------------------------------------------------------
# the arrivals
# --------------------------------------------------------------------------------------------


def _segment_times(seg: Segment, t0: float, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """One segment's arrivals (s from the schedule's start), in blocks, by thinning: candidates of a
    homogeneous Poisson process at the segment's own maximum rate, each kept with probability
    rate(t) / maximum (exact for a non-homogeneous Poisson process; segments are independent)."""
    top = seg.max_rate
    if top <= 0:
        return
    slope = (seg.end_rate - seg.start_rate) / seg.duration_s
    u = 0.0  # time into the segment of the last candidate
    while True:
        cand = u + np.cumsum(rng.exponential(1.0 / top, size=_BLOCK))
        keep_p = rng.random(_BLOCK)
        inside = cand < seg.duration_s
        rate = seg.start_rate + slope * cand
        kept = cand[inside & (keep_p * top < rate)]
        if kept.size:
            yield t0 + kept
        if not inside[-1]:
            return
        u = float(cand[-1])


@dataclass(frozen=True)
class ShapedArrival(ArrivalProcess):
    """Arrivals whose rate follows ``schedule`` (a non-homogeneous Poisson process, drawn by thinning).

    ``rate`` is the schedule's mean rate (what a single-rate reader takes as the requested rate);
    the send times end with the schedule. Build with :meth:`of`."""

    schedule: RateSchedule | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.schedule, RateSchedule):
            raise ValueError("a shaped arrival process needs its RateSchedule (ShapedArrival.of(schedule, seed))")
        if self.kind != "shaped":
            raise ValueError(f"a ShapedArrival's kind is 'shaped', got {self.kind!r}")

    @classmethod
    def of(cls, shape: str | RateSchedule | Sequence[Sequence[float]], seed: int = 0) -> ShapedArrival:
        """The process of a schedule (an expression, a schedule or segments; :func:`schedule_of`)."""
        sched = schedule_of(shape)
        return cls("shaped", sched.mean_rate, seed=seed, schedule=sched)

    def gaps_s(self, n: int, rng: np.random.Generator | None = None) -> np.ndarray:
        """Not defined: the gaps of a shaped process depend on when they fall (use :meth:`times_s`)."""
        raise TypeError("a shaped arrival process has no stationary gap distribution; read offsets_ns() or times_s()")

    def blocks_s(self) -> Iterator[np.ndarray]:
        """The arrival times in seconds from the start, block by block, in order (one generator, seeded)."""
        rng = np.random.default_rng(self.seed)
        assert self.schedule is not None
        t0 = 0.0
        for seg in self.schedule.segments:
            yield from _segment_times(seg, t0, rng)
            t0 += seg.duration_s

    def times_s(self) -> np.ndarray:
        """Every arrival time in seconds (the whole schedule at once: for tests and planning)."""
        blocks = list(self.blocks_s())
        return np.concatenate(blocks) if blocks else np.zeros(0)

    def offsets_ns(self) -> Iterator[int]:
        """Scheduled send offsets in ns from the run start, drawn block by block; ends with the schedule."""
        for block in self.blocks_s():
            yield from (block * 1e9).astype(np.int64).tolist()
