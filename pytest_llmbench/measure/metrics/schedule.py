"""Open-loop timing against the schedule (§4.2.5, App. B.1.1): what the client itself added.

The draft measures TTFT and E2E from T_submit, the last request byte written (App. B.1.1). In an open
loop a request can leave later than its schedule said (the client's own pacing, a connection wait);
the draft's figures then start late and hide that wait (coordinated omission). ``ttft_from_schedule``
and ``e2e_from_schedule`` measure from the intended send instead: the latency a user arriving on the
schedule saw. The lags are defined for every sent request (``over="all"``), failed ones included.
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


@metric("E2E from schedule", "s", "lower", section="§4.2.5", slo=True, aliases=("schedule_latency",))
def e2e_from_schedule(end_ns: np.ndarray, intended_ns: np.ndarray, has_end: np.ndarray, okf: np.ndarray
                      ) -> np.ndarray:
    """end - intended (open loop latency from the schedule, free of coordinated omission)"""
    return np.where(has_end, (end_ns - intended_ns) * NS, NAN) * okf


@metric("TTFT from schedule", "s", "lower", section="§4.2.5", slo=True)
def ttft_from_schedule(first_token_ns: np.ndarray, intended_ns: np.ndarray, okf: np.ndarray) -> np.ndarray:
    """first content token (§5.1.3.1) - intended send (open loop): TTFT plus the submit lag, free of
    coordinated omission
    """
    return (first_token_ns - intended_ns) * NS * okf
