"""§5.2.3.1 rule 1 as the procedures apply it (helpers.queue_trend): significant slope AND a material rise."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from pytest_llmbench.measure.stats import queue_growing
from pytest_llmbench.procedures.helpers import queue_trend


def _measured(t: np.ndarray, d: np.ndarray, window: float = 60.0) -> SimpleNamespace:
    return SimpleNamespace(queue_samples=list(zip(t.tolist(), d.tolist())),
                           load=SimpleNamespace(send_window_s=window, concurrency_samples=[]))


def test_a_steady_queue_with_a_tiny_significant_slope_is_not_growing() -> None:
    t = np.arange(0.0, 60.0, 0.5)
    d = 5.0 + 0.01 * t + np.tile([0.0, 0.1], t.size // 2)  # rises 0.6 requests in a minute
    assert queue_growing(t, d)  # slope significance alone would call this saturation
    trend = queue_trend(_measured(t, d), arrivals=600)
    assert trend.source == "server /metrics waiting gauge" and not trend.growing
    assert trend.rise is not None and trend.rise < 2.0


def test_a_queue_rising_by_tens_of_requests_is_growing() -> None:
    t = np.arange(0.0, 60.0, 0.5)
    d = 2.0 + 0.5 * t + np.tile([0.0, 1.0], t.size // 2)  # ~+25 requests over the steady window
    trend = queue_trend(_measured(t, d), arrivals=600)
    assert trend.growing and trend.rise is not None and trend.rise > 12.0  # >= max(2, 2 % of 600)
