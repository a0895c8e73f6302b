"""Open-loop timing against the schedule (§4.2.5, App. B.1.1): what the client itself added.

Defined for every sent request (``over="all"``), failed ones included, except the latency.
"""

from __future__ import annotations

import numpy as np

from ..registry import metric
from ._kit import NAN, NS


@metric("Submit lag", "s", "lower", section="§4.2.5", slo=True, aliases=("submit_lag",), over="all")
def send_lag(sent_ns: np.ndarray, intended_ns: np.ndarray) -> np.ndarray:
    """sent (T_submit) - intended: the schedule lag plus connection set-up and the request write (open loop,
    §4.2.5, App. B.1.1); every sent request
    """
    return (sent_ns.astype(np.float64) - intended_ns) * NS


@metric("Schedule lag", "s", "lower", section="§4.2.5", slo=True, over="all")
def schedule_lag(handoff_ns: np.ndarray, intended_ns: np.ndarray) -> np.ndarray:
    """hand-over to the transport (queued) - intended: the client's own pacing (open loop, §4.2.5); every
    sent request
    """
    return (handoff_ns - intended_ns) * NS


@metric("Schedule latency", "s", "lower", section="§4.2.5", slo=True)
def schedule_latency(end_ns: np.ndarray, intended_ns: np.ndarray, has_end: np.ndarray, okf: np.ndarray
                     ) -> np.ndarray:
    """end - intended (open loop latency from the schedule, free of coordinated omission)"""
    return np.where(has_end, (end_ns - intended_ns) * NS, NAN) * okf
