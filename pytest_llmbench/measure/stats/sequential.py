"""Looking at a run's data while it runs, and stopping once an SLO's verdict is settled (issue 47).

A run that checks its SLO after every request and stops at the first PASS would pass far more often
than its confidence says: each look is another chance for chance to decide. The looks here are fixed
before the run, and the confidence is spent across them:

* **Schedule** (:func:`look_schedule`): looks at ``n1, 2·n1, 4·n1, …`` requests sent, and at the plan's
  end (``planned``). ``n1`` is the smallest count at which the SLO can be decided at all at a look's
  confidence: for a share SLO the count at which zero requests beyond the threshold give PASS
  (:func:`.bounds.smallest_n`); for a mean, an eighth of the plan.
* **Spending** (Bonferroni over the looks): with ``K`` looks, each look decides at confidence
  ``1 - (1-c)/K``. A wrong PASS of the run needs a wrong PASS at one of its looks, so by the union bound
  (Bonferroni) its probability is at most ``K·(1-c)/K = 1-c``, and the same for a wrong FAIL, whatever
  the dependence between looks (they share their requests). It is simple and conservative (the looks'
  errors overlap, so the real rate is lower: about 3 % instead of 5 % for a P99 at 95 % on a 10,000
  request plan); Pocock or O'Brien–Fleming boundaries (Jennison & Turnbull, Group Sequential Methods,
  2000, ch. 2 and 7) spend the same error with less margin but need the exact joint law of the looks.
  ``K`` and ``n1`` depend on each other; the smallest ``K`` whose schedule has at most ``K`` looks is used.
* **In flight** (:meth:`ShareLooks.decide`): at a look on the first ``n_j`` requests sent, those not yet
  finished count as beyond the threshold for PASS and as within it for FAIL. The bounds are monotone in
  the count beyond, so whatever the in-flight requests turn out to be, the verdict on the complete look
  would be the same: the in-flight requests delay a decision, never make a wrong one. Stopping never
  cancels them; the final verdict is the look's, taken on all of its requests once finished.
* **Bursts**: requests beyond a latency threshold come in bursts (a queue builds up), and then a count
  varies more than the binomial's. Each look widens its bounds by a design effect fixed before the look
  (:func:`.bounds.design_effect` of the previous look's requests, at least the run's declared burst
  allowance), so the monotonicity above holds.

References: union bound for repeated significance tests, Armitage, McPherson & Rowe, JRSS A 132 (1969)
235–244 (why uncorrected looks inflate the error); group-sequential designs, Jennison & Turnbull (2000).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .bounds import ShareDecision, share_bounds, share_verdict, smallest_n

__all__ = ["LOOK_METHOD", "LookSchedule", "ShareLooks", "look_schedule"]

#: How the schedule spends the confidence (named in the docs and in each verdict's message).
LOOK_METHOD = "Bonferroni over a fixed schedule of looks (first at the smallest deciding count, then doubling)"


@dataclass(frozen=True)
class LookSchedule:
    """Fixed looks (requests sent, ascending, the last the plan's end) and each look's confidence.

    ``confidence`` is the run's (each direction's error stays at most ``1 - confidence``);
    ``look_confidence = 1 - (1 - confidence)/spent_over`` is what each look decides at, with
    ``spent_over >= len(looks)`` the number of looks the error was split over.
    """

    looks: tuple[int, ...]
    confidence: float
    spent_over: int
    method: str = LOOK_METHOD

    def __post_init__(self) -> None:
        if not self.looks or any(b <= a for a, b in zip(self.looks, self.looks[1:])) or self.looks[0] < 1:
            raise ValueError(f"looks must be ascending positive counts, got {self.looks}")
        if self.spent_over < len(self.looks):
            raise ValueError(f"the error must be split over at least the {len(self.looks)} looks, not {self.spent_over}")

    @property
    def look_confidence(self) -> float:
        return 1.0 - (1.0 - self.confidence) / self.spent_over

    @property
    def planned(self) -> int:
        return self.looks[-1]

    def index(self, n: int) -> int | None:
        """The look taken at ``n`` requests (0-based), None when ``n`` is not one of them."""
        try:
            return self.looks.index(int(n))
        except ValueError:
            return None

    def describe(self) -> str:
        looks = ", ".join(f"{n:,}" for n in self.looks)
        return (f"{len(self.looks)} looks at {looks} requests, each at {_pct(self.look_confidence)} confidence "
                f"(Bonferroni: {_pct(1 - self.confidence)} split over {self.spent_over})")

    def to_json(self) -> dict[str, Any]:
        return {"looks": list(self.looks), "confidence": self.confidence, "look_confidence": self.look_confidence,
                "spent_over": self.spent_over, "method": self.method}


def _pct(x: float) -> str:
    return f"{x * 100:.4g}%"


def _doubling(first: int, planned: int) -> tuple[int, ...]:
    looks: list[int] = []
    n = max(int(first), 1)
    while n < planned:
        looks.append(n)
        n *= 2
    looks.append(planned)
    return tuple(looks)


def look_schedule(planned: int, confidence: float, *, p0: float | None = None, first: int | None = None,
                  design_effect: float = 1.0) -> LookSchedule:
    """The fixed looks of a run of ``planned`` requests and the confidence each decides at (Bonferroni).

    With ``p0`` (a share SLO, "share beyond <= p0") the first look is at the smallest count where zero
    requests beyond decide PASS at the look's confidence: ``n1(K) = smallest_n(0, p0, 1 - (1-c)/K)``; the
    looks double from there to ``planned``. ``K`` is the smallest number of looks whose schedule has at most
    ``K`` looks (a schedule with fewer looks than ``K`` still splits the error ``K`` ways: conservative).
    Without ``p0``, ``first`` (default: an eighth of the plan) starts the doubling. A plan shorter than the
    first look has one look, at its end, with the whole confidence (a fixed-sample verdict).
    For a P99 SLO at 95 % and a 10,000-request plan: 6 looks at 477, 954, 1,908, 3,816, 7,632 and 10,000,
    each at 99.17 %. ``design_effect`` (a declared burst allowance, :func:`.bounds.burst_design_effect`)
    moves the first look to where zero exceedances decide under it.
    """
    if planned < 1:
        raise ValueError(f"planned must be >= 1 request, got {planned}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    for k in range(1, 64):
        look_conf = 1.0 - (1.0 - confidence) / k
        if p0 is not None:
            n1 = smallest_n(0, p0, look_conf, design_effect)
        else:
            n1 = first if first is not None else max(math.ceil(planned / 8), 1)
        looks = _doubling(n1, planned)
        if len(looks) <= k:
            return LookSchedule(looks, confidence, k)
    raise ValueError(f"no look schedule with fewer than 64 looks for planned={planned}")  # pragma: no cover


@dataclass(frozen=True)
class ShareLooks:
    """The decisions of a share SLO ("share beyond <= p0") at the looks of a schedule (vectorised).

    At look ``j`` (the first ``n_j`` requests sent, every one judged) with ``k`` finished requests beyond
    the threshold, ``f`` in flight and design effect ``d``: PASS when ``U((k+f)/d, n_j/d) < p0``, FAIL when
    ``L(k/d, n_j/d) > p0``, at the look's confidence (:func:`.bounds.share_verdict`, the same decision for
    one look). ``d`` must be fixed before the look's requests are seen (the run's burst allowance, or the
    design effect of the previous look's requests): then the decision is monotone in ``k`` and a verdict
    taken with requests in flight is the complete look's.
    """

    schedule: LookSchedule
    p0: float
    method: str = "binomial"

    def decide(self, look: Any, beyond: Any, in_flight: Any = 0, design_effect: Any = 1.0) -> tuple[Any, Any]:
        """(PASS?, FAIL?) at look index ``look`` (numpy arrays broadcast)."""
        n = np.asarray(self.schedule.looks)[np.asarray(look)]
        k = np.asarray(beyond, dtype=np.float64)
        f = np.asarray(in_flight, dtype=np.float64)
        conf = self.schedule.look_confidence
        _, upper = share_bounds(k + f, n, conf, self.method, design_effect)
        lower, _ = share_bounds(k, n, conf, self.method, design_effect)
        return np.asarray(upper) < self.p0, np.asarray(lower) > self.p0

    def verdict(self, beyond: float, judged: int, in_flight: int = 0, design_effect: float = 1.0) -> ShareDecision:
        """The look's decision for ``beyond`` of ``judged`` finished requests and ``in_flight`` unfinished."""
        return share_verdict(beyond, judged, self.p0, self.schedule.look_confidence, method=self.method,
                             in_flight=in_flight, design_effect=design_effect)
