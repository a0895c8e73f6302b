"""Preemption under memory pressure (§5.8.4), where the server reports it (``server_timing``)."""

from __future__ import annotations

import numpy as np

from ..registry import PER_RUN, PROPORTION, metric
from ..stats import Estimate
from ._kit import NAN, proportion


@metric("Preemptions", "events", kind="column")
def preemptions(srv_preemptions: np.ndarray) -> np.ndarray:
    """server_timing.preemptions (§5.8.4)"""
    return srv_preemptions


@metric("Preempted tokens", "tokens", kind="column")
def preempted_tokens(srv_preempted_tokens: np.ndarray) -> np.ndarray:
    """server_timing.preempted_tokens (§5.8.4)"""
    return srv_preempted_tokens


@metric("Preemption rate", "fraction", "lower", kind="scalar", section="§5.8.4", aggregation=PROPORTION)
def preemption_rate(srv_preemptions: np.ndarray, confidence: float) -> Estimate | None:
    """requests with server_timing.preemptions > 0 / requests whose server reported preemptions (§5.8.4)"""
    reported = ~np.isnan(srv_preemptions)
    if not reported.any():
        return None
    return proportion(int((reported & (srv_preemptions > 0)).sum()), int(reported.sum()), confidence)


@metric("Preemption recovery rate", "fraction", "higher", kind="scalar", section="§5.8.4", aggregation=PROPORTION)
def preemption_recovery_rate(srv_preemptions: np.ndarray, ok: np.ndarray, confidence: float) -> Estimate | None:
    """preempted requests that completed successfully / preempted"""
    reported = ~np.isnan(srv_preemptions)
    if not reported.any():
        return None
    pre = reported & (srv_preemptions > 0)
    return proportion(int((pre & ok).sum()), int(pre.sum()), confidence)


@metric("Tokens lost per preemption", "tokens/preemption", "lower", kind="scalar", section="§5.8.4",
        aggregation=PER_RUN)
def tokens_lost_per_preemption(srv_preemptions: np.ndarray, srv_preempted_tokens: np.ndarray) -> Estimate | None:
    """Σ preempted_tokens / Σ preemptions"""
    reported = ~np.isnan(srv_preemptions)
    if not reported.any():
        return None
    pre = reported & (srv_preemptions > 0)
    events = float(np.nansum(srv_preemptions[pre]))
    lost = np.nansum(srv_preempted_tokens[pre])
    return Estimate(float(lost / events) if events else NAN, int(events), "tokens/preemption",
                    undersampled=events == 0, method="Σ preempted_tokens / Σ preemptions")
