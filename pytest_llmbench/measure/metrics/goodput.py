"""Goodput (§5.2.2.3): requests meeting every per-request SLO (``summarize(slos=...)``).

A failed request is never good; an SLO whose metric is undefined (NaN) for a successful request does
not apply to it. Without SLOs these figures are absent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..registry import COUNT, PROPORTION, WINDOW_RATE, derived, metric
from ..stats import Estimate
from ._kit import NS, Windows, count, proportion


@derived
def good(per_request: Mapping[str, np.ndarray], slos: Sequence[Any], ok: np.ndarray) -> np.ndarray | None:
    """One bool per request: successful and meeting every per-request SLO (None without SLOs)."""
    if not slos:
        return None
    met = ok.copy()
    for slo in slos:
        vals = per_request[slo.metric]
        res = np.asarray(slo.ok(vals), dtype=bool)
        if res.shape != vals.shape:
            raise ValueError(f"SLO on {slo.metric!r} returned shape {res.shape}, expected {vals.shape}")
        met &= res | np.isnan(vals.astype(np.float64))
    return met


@metric("Good requests", "requests", "higher", kind="scalar", section="§5.2.2.3", aggregation=COUNT)
def good_count(good: np.ndarray | None) -> Estimate | None:
    """requests meeting every per-request SLO"""
    return None if good is None else count(int(good.sum()))


@metric("Good fraction", "fraction", "higher", kind="scalar", section="§5.2.2.3", aggregation=PROPORTION, slo=True)
def good_fraction(good: np.ndarray | None, ok: np.ndarray, failed: np.ndarray, confidence: float) -> Estimate | None:
    """good / (successful + failed) over the whole run"""
    return None if good is None else proportion(int(good.sum()), int(ok.sum()) + int(failed.sum()), confidence)


@metric("Goodput", "requests/s", "higher", kind="scalar", section="§5.2.2.3", aggregation=WINDOW_RATE, slo=True)
def goodput(good: np.ndarray | None, end_ns: np.ndarray, has_end: np.ndarray, windows: Windows
            ) -> dict[str, Estimate] | None:
    """requests meeting every per-request SLO, completing inside the window, per second; failed requests are
    never good; an SLO whose metric is undefined (NaN) for a successful request does not apply to it
    """
    return None if good is None else windows.rate(windows.sums(end_ns[good & has_end] * NS, None), "requests/s")
