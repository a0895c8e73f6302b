"""How many requests were sent, completed, failed, cancelled and refused, and the run's duration.

A failed request counts against the SUT; a cancelled one (stopped by the harness at a window's end) is
neither a success nor a failure (§4.2.6); a refusal by a content filter is a failure (§4.8.1).
"""

from __future__ import annotations

import numpy as np

from ...common.records import ErrorType
from ..registry import COUNT, PROPORTION, metric
from ..stats import Estimate
from ._kit import count, proportion


@metric("Requests", "requests", kind="scalar", section="§5.1.4.3", aggregation=COUNT)
def request_count(n: int) -> Estimate:
    """measured requests"""
    return count(n)


@metric("Completed", "requests", kind="scalar", aggregation=COUNT)
def completed_count(ok: np.ndarray) -> Estimate:
    """successful requests"""
    return count(int(ok.sum()))


@metric("Errors", "requests", "lower", kind="scalar", aggregation=COUNT)
def error_count(failed: np.ndarray) -> Estimate:
    """failed requests"""
    return count(int(failed.sum()))


@metric("Cancelled", "requests", kind="scalar", aggregation=COUNT)
def cancelled_count(cancelled: np.ndarray) -> Estimate:
    """cancelled requests (excluded from rates)"""
    return count(int(cancelled.sum()))


@metric("Refusals", "requests", kind="scalar", section="§4.8.1", aggregation=COUNT)
def refusals(error: np.ndarray) -> Estimate:
    """requests refused by a content filter (§4.8.1)"""
    return count(int(sum(1 for e in error if e is ErrorType.REFUSED)))


@metric("Success rate", "fraction", "higher", kind="scalar", aggregation=PROPORTION, slo=True)
def success_rate(ok: np.ndarray, failed: np.ndarray, confidence: float) -> Estimate:
    """successful / (successful + failed); cancelled excluded"""
    return proportion(int(ok.sum()), int(ok.sum()) + int(failed.sum()), confidence)


@metric("Error rate", "fraction", "lower", kind="scalar", aggregation=PROPORTION, slo=True)
def error_rate(ok: np.ndarray, failed: np.ndarray, confidence: float) -> Estimate:
    """failed / (successful + failed)"""
    return proportion(int(failed.sum()), int(ok.sum()) + int(failed.sum()), confidence)


@metric("Refusal rate", "fraction", kind="scalar", section="§4.8.1", aggregation=PROPORTION)
def refusal_rate(refusals: Estimate, ok: np.ndarray, failed: np.ndarray, confidence: float) -> Estimate:
    """refused (content filter, §4.8.1) / (successful + failed)"""
    return proportion(int(refusals.n), int(ok.sum()) + int(failed.sum()), confidence)


@metric("Benchmark duration", "s", kind="scalar", section="§5.2.3")
def benchmark_duration(duration: float, n: int) -> Estimate:
    """first submission to last response"""
    return Estimate(duration, n, "s", method="first submission to last response")


@metric("Steady-state duration", "s", kind="scalar", section="§5.2.3.2", window="steady")
def steady_state_duration(steady: tuple[float, float], n: int) -> Estimate:
    """length of the steady-state window"""
    w0, w1 = steady
    return Estimate(w1 - w0, n, "s", method="steady-state window length")
