"""A procedure's load parameter (§4.2.3, §4.2.4) as a marker writes it, and its resolution to the load generator's.

``poisson(rate=4)``, ``uniform(...)``, ``bursty(..., cv=2)``, ``shaped("ramp(10,100,60s)")``, ``closed(8)``
build a :class:`LoadSpec` (public API: ``from pytest_llmbench import poisson``); :func:`resolve_load` turns one
into the load generator's ``OpenLoop``/``ClosedLoop``, scaling a capacity fraction by the SUT's capacity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..loadgen.load import check_arrival
from ..loadgen.shapes import RateSchedule, schedule_of
from .base import CannotMeasure

if TYPE_CHECKING:  # pragma: no cover
    from ..loadgen.load import ClosedLoop, OpenLoop
    from .base import ProcedureContext

__all__ = ["LoadSpec", "bursty", "closed", "poisson", "resolve_load", "shaped", "uniform"]


@dataclass(frozen=True)
class LoadSpec:
    """A procedure's load parameter as a marker writes it: ``poisson(rate=4)``, ``closed(8)`` ...

    Open loop (§4.2.3): ``arrival`` in poisson (REQUIRED), uniform, bursty (declared ``cv`` > 1),
    with an absolute ``rate`` in req/s or ``capacity_fraction`` of the SUT's measured/declared
    request-rate capacity. A rate shape (issue 50): ``arrival="shaped"`` with ``shape``, the schedule's
    expression (loadgen/shapes.py), its rates absolute and its length the run's duration; no rate, fraction
    or cv. Closed loop (§4.2.4): ``concurrency`` requests held in flight.
    """

    model: str  # "open" | "closed"
    arrival: str | None = None
    rate: float | None = None
    capacity_fraction: float | None = None
    concurrency: int | None = None
    cv: float | None = None
    shape: str | None = None  # arrival "shaped": the rate schedule's expression

    def __post_init__(self) -> None:
        if self.model == "open" and (self.arrival == "shaped" or self.shape is not None):
            if self.arrival != "shaped" or not isinstance(self.shape, str):
                raise ValueError("a rate shape is written shaped('ramp(10,100,60s)') (arrival 'shaped' with its "
                                 "expression)")
            if self.rate is not None or self.capacity_fraction is not None or self.cv is not None:
                raise ValueError("a rate shape carries its own rates: give no rate=, capacity_fraction= or cv=")
            self.schedule()  # a malformed expression fails here, when the marker is read
        elif self.model == "open":
            if (self.rate is None) == (self.capacity_fraction is None):
                raise ValueError("open-loop load needs exactly one of rate= (req/s) or capacity_fraction=")
            if self.capacity_fraction is not None and not self.capacity_fraction > 0:
                raise ValueError(f"capacity_fraction must be > 0, got {self.capacity_fraction}")
            object.__setattr__(self, "arrival", check_arrival(self.arrival, self.rate, self.cv))
        elif self.model == "closed":
            if not isinstance(self.concurrency, int) or self.concurrency < 1:
                raise ValueError(f"closed-loop concurrency must be an integer >= 1, got {self.concurrency!r}")
        else:
            raise ValueError(f"load model must be 'open' or 'closed', not {self.model!r}")

    def schedule(self) -> RateSchedule:
        """A shaped load's rate schedule (ValueError for any other load)."""
        if self.shape is None:
            raise ValueError(f"{self.describe()} has no rate schedule")
        return schedule_of(self.shape)

    def describe(self) -> str:
        if self.model == "closed":
            return f"closed loop, concurrency {self.concurrency}"
        if self.shape is not None:
            return f"open loop, shaped arrivals (non-homogeneous Poisson) by {self.schedule().describe()}"
        rate = f"{self.rate:g} req/s" if self.rate is not None else f"{self.capacity_fraction:.0%} of capacity"
        cv = f", cv {self.cv:g}" if self.cv else ""
        return f"open loop, {self.arrival} arrivals at {rate}{cv}"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def poisson(rate: float | None = None, *, capacity_fraction: float | None = None) -> LoadSpec:
    """Open-loop Poisson arrivals (§4.2.3, REQUIRED for open-loop 5.1)."""
    return LoadSpec("open", "poisson", rate=rate, capacity_fraction=capacity_fraction)


def uniform(rate: float | None = None, *, capacity_fraction: float | None = None) -> LoadSpec:
    """Open-loop evenly spaced arrivals (§4.2.3)."""
    return LoadSpec("open", "uniform", rate=rate, capacity_fraction=capacity_fraction)


def bursty(rate: float | None = None, *, cv: float = 2.0, capacity_fraction: float | None = None) -> LoadSpec:
    """Open-loop bursty arrivals: gamma gaps with coefficient of variation ``cv`` > 1 (§4.2.3)."""
    return LoadSpec("open", "bursty", rate=rate, capacity_fraction=capacity_fraction, cv=cv)


def shaped(shape: str | RateSchedule | Sequence[Sequence[float]]) -> LoadSpec:
    """Open-loop arrivals whose rate follows a schedule (issue 50): an expression such as
    ``"ramp(10,100,60s)"`` or ``"hold(10,30s) + ramp(10,100,60s)"``, or segments ``(duration_s, rate)`` /
    ``(duration_s, start_rate, end_rate)`` (loadgen/shapes.py). A non-homogeneous Poisson process, not
    §5.1.2.2's Poisson at one rate: a custom load for the draft's items."""
    text = shape if isinstance(shape, str) else schedule_of(shape).text()
    return LoadSpec("open", "shaped", shape=text)


def closed(concurrency: int) -> LoadSpec:
    """Closed loop holding ``concurrency`` requests in flight (§4.2.4)."""
    return LoadSpec("closed", concurrency=concurrency)


async def resolve_load(
    ctx: ProcedureContext,
    spec: Any,
    *,
    max_requests: int | None = None,
    duration_s: float | None = None,
    seed: int,
    turns: float = 1.0,
) -> tuple[OpenLoop | ClosedLoop, dict[str, Any]]:
    """A LoadSpec -> the load generator's OpenLoop/ClosedLoop, resolving capacity fractions.

    ``seed`` drives the arrival gaps (one stream from ``ctx.seeds(...)``). Returns the load and a
    JSON description (with the capacity source when one was used). ``turns``: requests per arrival, a
    session run's mean turns per session (issue 50: an arrival starts a session): a capacity fraction then
    starts sessions at fraction x capacity / turns, so the requests offered are the fraction of capacity.
    """
    from ..loadgen.load import ArrivalProcess, ClosedLoop, OpenLoop
    from ..loadgen.shapes import ShapedArrival

    desc: dict[str, Any] = spec.to_json()
    if spec.model == "closed":
        return ClosedLoop(spec.concurrency, max_requests=max_requests, duration_s=duration_s), desc
    if spec.shape is not None:  # the schedule sets the rates and the run's length (a shorter duration cuts it)
        shaped_arrival = ShapedArrival.of(spec.schedule(), seed=seed)
        length = shaped_arrival.schedule.duration_s  # type: ignore[union-attr]
        desc.update(schedule=shaped_arrival.schedule.to_json())  # type: ignore[union-attr]
        return OpenLoop(shaped_arrival, max_requests=max_requests,
                        duration_s=length if duration_s is None else min(duration_s, length)), desc
    rate = spec.rate
    if rate is None:
        cap = await ctx.get_capacity("rate")
        if not cap.rate:
            raise CannotMeasure("no request-rate capacity available to scale the load by")
        rate = spec.capacity_fraction * cap.rate
        desc.update(resolved_rate=rate, capacity_rate=cap.rate, capacity_source=cap.source,
                    capacity_standing=getattr(cap, "standing", None))
        if turns != 1.0:  # the arrivals start sessions of ``turns`` requests each
            rate /= turns
            desc.update(session_start_rate=rate, turns_per_session=round(turns, 4))
    arrival = ArrivalProcess(spec.arrival, rate, seed=seed, cv=spec.cv)
    return OpenLoop(arrival, max_requests=max_requests, duration_s=duration_s), desc
