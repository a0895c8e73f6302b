"""Window helpers only the tests use, kept out of the package (issue 45): the §5.2.3.2 steady-state
part of a :class:`~pytest_llmbench.loadgen.load.LoadResult`'s send window and its records, and a
batch-means rate over one window (the estimator the metrics build from ``window_sums`` and
``rate_from_window_sums``, ``measure/metrics/_kit.py``)."""

from __future__ import annotations

from pytest_llmbench.common.records import RequestRecord
from pytest_llmbench.loadgen.load import LoadResult
from numpy.typing import ArrayLike

from pytest_llmbench.measure.stats import Estimate, rate_from_window_sums, window_sums
from pytest_llmbench.measure.summary import steady_state_window as window


def steady_state_window(result: LoadResult, exclude_fraction: float = 0.1) -> tuple[int, int]:
    """(start_ns, end_ns) of the steady-state part of the send window: the first
    ``exclude_fraction`` (10 %, §5.2.3.2) of the run is ramp-up and left out."""
    lo, hi = window(result.start_ns, result.send_end_ns, exclude_fraction)
    return result.start_ns + int(lo - result.start_ns), hi


def steady_state_records(result: LoadResult, exclude_fraction: float = 0.1) -> list[RequestRecord]:
    """Records sent inside :func:`steady_state_window`."""
    lo, hi = steady_state_window(result, exclude_fraction)
    return [r for r in result.records if lo <= r.sent_ns <= hi]


def batch_means_rate(times: ArrayLike, weights: ArrayLike | None, start: float, end: float, *,
                     unit: str, batches: int = 10, confidence: float = 0.95) -> Estimate:
    """Rate of events (times in seconds, optional weights) inside ``[start, end]``.

    Value: weighted count / window length. CI: batch means over ``batches`` equal
    sub-windows (t interval over the sub-window rates; their mean equals the value).
    """
    sums, n_events = window_sums(times, weights, start, end, batches)
    return rate_from_window_sums(sums, n_events, end - start, unit=unit, confidence=confidence)
