"""The sends of each measured run against its own schedule (§4.2.3–§4.2.5), as load facts.

Per run, from its sends as its records finished (``tally.SendTimes``): an open loop's send lag (the
client's hand-over minus the intended time), its Spearman association with the load state at the send (requests in flight, the
oldest outstanding request's age), and the Kolmogorov–Smirnov fit of the send gaps to the
exponential gaps of a Poisson process at the run's rate; a closed loop's completion-to-resubmit gap.
:func:`load_facts` gives every run's figures and the worst run's at the top level.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..compliance import LOAD_CAPABILITIES, LoadFacts, RunLoad
from .tally import tally_of

if TYPE_CHECKING:  # pragma: no cover
    from .run import Measured

__all__ = ["arrival_fit_p", "load_facts"]


def _spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    from scipy.stats import spearmanr

    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return 0.0 if len(x) >= 3 else None  # a constant series carries no association
    rho = float(spearmanr(x, y).statistic)
    return rho if math.isfinite(rho) else None


def arrival_fit_p(handoff_ns: np.ndarray, kind: str | None, rate: float | None) -> float | None:
    """KS p-value of real send gaps against the exponential gaps of a Poisson process at ``rate``
    (§4.2.3), from the runs' hand-over times (ns, any order); None below 30 sends or for another
    arrival process."""
    if kind != "poisson" or not rate or handoff_ns.size < 30:
        return None
    from scipy.stats import kstest

    gaps = np.diff(np.sort(handoff_ns)) / 1e9
    return float(kstest(gaps, "expon", args=(0, 1 / rate)).pvalue)


def _run_load(label: str, m: Measured) -> tuple[RunLoad, int | None]:
    """§4.2.3–§4.2.5 figures of one measured run, against its own rate and schedule (its sends as they
    finished, ``tally.SendTimes``), and the most requests it had outstanding at a send."""
    ld = m.load
    sends = tally_of(m).sends  # collected as the run's records finished
    intended, handoff = sends.column("intended"), sends.column("handoff")
    if ld.load_model != "open":
        # the first request of each slot goes out at the start: a fill, not a completion-to-resubmit gap
        fill = intended == intended.min() if intended.size else np.zeros(0, dtype=bool)
        gaps = (handoff - intended)[~fill] / 1e9
        return RunLoad(label, ld.load_model, concurrency=ld.concurrency_target,
                       resubmit_gap_p99_s=float(np.percentile(gaps, 99)) if gaps.size else None,
                       resubmit_n=int(gaps.size)), sends.max_inflight
    arrival = ld.parameters.get("arrival") or {}
    rate = arrival.get("rate") or ld.requested_rate
    lags = (handoff - intended) / 1e9
    run = RunLoad(label, "open", arrival.get("kind"), rate,
                  send_lag_p99_s=float(np.percentile(lags, 99)) if lags.size else None, send_lag_n=int(lags.size),
                  arrival_fit_p=arrival_fit_p(handoff, arrival.get("kind"), rate),
                  schedule=(arrival.get("schedule") or {}).get("expression"))
    if intended.size > 1:
        run.mean_gap_s = (int(intended.max()) - int(intended.min())) / (intended.size - 1) / 1e9
    state = sends.column("has_state").astype(bool)
    if state.any():
        ls = lags[state].tolist()
        run.lag_inflight_rho = _spearman(ls, sends.column("inflight")[state].astype(np.float64).tolist())
        run.lag_oldest_rho = _spearman(ls, sends.column("oldest")[state].astype(np.float64).tolist())
    return run, sends.max_inflight


def _worst(values: Sequence[float | None], key: Callable[[float], float] = lambda v: v) -> float | None:
    known = [v for v in values if v is not None]
    return max(known, key=key) if known else None


def load_facts(measured: Sequence[Measured]) -> LoadFacts:
    """§4.2.3–§4.2.5 facts observed on the measured records, per run (send lag, the load state at
    send, the fit of the send gaps to the run's own rate); the top-level figures are the worst run's.

    Capabilities are the ones this run exercised; the others are answered by the plugin's tests.
    """
    first = measured[0].load if measured else None
    if first is None:
        return LoadFacts()
    per_run = [_run_load(getattr(getattr(m, "summary", None), "label", None) or f"run {i + 1}", m)
               for i, m in enumerate(measured)]
    runs = tuple(run for run, _ in per_run)
    open_runs = [r for r in runs if r.model == "open"]
    closed_runs = [r for r in runs if r.model != "open"]
    states = [most for _, most in per_run if most is not None]
    facts = LoadFacts(model=first.load_model, concurrency=first.concurrency_target if first.load_model != "open"
                      else None, max_inflight=max(states) if states else None, runs=runs)
    caps: set[str] = set()
    if states and max(states) > 0:
        caps.add("async")  # observed: a request was sent while others were outstanding
    if open_runs:
        o = open_runs[0]
        facts.arrival, facts.rate, facts.schedule = o.arrival, o.rate, o.schedule
        facts.send_lag_n = sum(r.send_lag_n for r in open_runs)
        facts.send_lag_p99_s = _worst([r.send_lag_p99_s for r in open_runs])
        facts.mean_gap_s = min((r.mean_gap_s for r in open_runs if r.mean_gap_s), default=None)
        facts.lag_inflight_rho = _worst([r.lag_inflight_rho for r in open_runs], key=abs)
        facts.lag_oldest_rho = _worst([r.lag_oldest_rho for r in open_runs], key=abs)
        facts.arrival_fit_p = _worst([r.arrival_fit_p for r in open_runs], key=lambda p: -p)
        if any(r.send_lag_n for r in open_runs):
            caps.update({"open_loop", "absolute_schedule"})
            caps.update(str(r.arrival) for r in open_runs if r.arrival and r.send_lag_n)
    if closed_runs:
        facts.resubmit_n = sum(r.resubmit_n for r in closed_runs)
        facts.resubmit_gap_p99_s = _worst([r.resubmit_gap_p99_s for r in closed_runs])
        if any(m.load.load_model != "open" and m.records for m in measured):
            caps.add("closed_loop")
    facts.capabilities = tuple(sorted(caps & set(LOAD_CAPABILITIES)))
    return facts
