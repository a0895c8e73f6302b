"""Multi-turn sessions (issue 50): TTFT and cached prompt tokens by turn index, and per-session totals.

A session run's records carry their session and 1-based turn (records format 2.3); other runs have neither
and get no session figures. By turn k: the TTFT distribution over turn k's successful requests (where a
prefix cache serves the history, it falls after turn 1), the cached prompt tokens the server reported
(``usage.prompt_tokens_details.cached_tokens`` or its equivalents, ``frame._cache_read``; absent when it
reports none) and their share of the prompt. Per session: the turns it sent, its prompt and output tokens,
and its duration (its first turn's submission to its last turn's end), each as a distribution over sessions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..registry import derived
from ..stats import Distribution
from ._kit import NS, dist

__all__ = ["SessionFigures", "TurnFigures", "session_figures"]


@dataclass(frozen=True)
class TurnFigures:
    """Turn ``turn`` over every session that sent it."""

    turn: int
    requests: int
    ok: int
    ttft: Distribution  # seconds, over the turn's successful requests
    input_tokens_mean: float | None
    cached_tokens: Distribution | None  # None: the server reported no cached tokens for this turn
    cached_share_mean: float | None  # mean of cached / prompt tokens over requests with both

    def to_json(self) -> dict[str, Any]:
        return {"turn": self.turn, "requests": self.requests, "ok": self.ok, "ttft": self.ttft.to_json(),
                "input_tokens_mean": self.input_tokens_mean,
                "cached_tokens": None if self.cached_tokens is None else self.cached_tokens.to_json(),
                "cached_share_mean": self.cached_share_mean}


@dataclass(frozen=True)
class SessionFigures:
    """A session run's figures: by turn index, and per-session totals as distributions over its sessions."""

    sessions: int
    by_turn: tuple[TurnFigures, ...]
    turns: Distribution  # requests sent per session
    input_tokens: Distribution  # prompt tokens per session, every turn's whole prompt counted
    output_tokens: Distribution  # output tokens per session
    duration: Distribution  # seconds, first submission to last end

    def turn(self, k: int) -> TurnFigures | None:
        return next((t for t in self.by_turn if t.turn == k), None)

    def to_json(self) -> dict[str, Any]:
        return {"sessions": self.sessions, "by_turn": [t.to_json() for t in self.by_turn],
                "per_session": {"turns": self.turns.to_json(), "input_tokens": self.input_tokens.to_json(),
                                "output_tokens": self.output_tokens.to_json(), "duration": self.duration.to_json()}}


def _mean(x: np.ndarray) -> float | None:
    x = x[np.isfinite(x)]
    return float(x.mean()) if x.size else None


@derived
def session_figures(turn: np.ndarray, session: np.ndarray, ttft: np.ndarray, u_cache_read: np.ndarray,
                    isl: np.ndarray, osl: np.ndarray, ok: np.ndarray, sent_ns: np.ndarray, end_ns: np.ndarray,
                    percentiles: Sequence[float], confidence: float) -> SessionFigures | None:
    """TTFT and cached prompt tokens by turn index, per-session totals; None for a run without sessions."""
    has = np.isfinite(turn) & np.isfinite(session)
    if not has.any():
        return None
    by_turn = []
    for k in np.unique(turn[has]).astype(np.int64):
        sel = has & (turn == k)
        good = sel & ok
        cached = u_cache_read[good]
        known = np.isfinite(cached)
        share = cached[known] / np.where(isl[good][known] > 0, isl[good][known], np.nan)
        by_turn.append(TurnFigures(
            int(k), int(sel.sum()), int(good.sum()), dist(f"ttft turn {k}", ttft[good], "s", percentiles, confidence),
            _mean(isl[good]),
            dist(f"cached tokens turn {k}", cached[known], "tokens", percentiles, confidence) if known.any() else None,
            _mean(share)))
    codes = session[has].astype(np.int64)
    n = int(codes.max()) + 1
    present = np.bincount(codes, minlength=n) > 0
    turns = np.bincount(codes, minlength=n).astype(np.float64)[present]
    tokens_in = np.bincount(codes, weights=np.nan_to_num(isl[has]), minlength=n)[present]
    tokens_out = np.bincount(codes, weights=np.nan_to_num(osl[has]), minlength=n)[present]
    first = np.full(n, np.inf)
    last = np.full(n, -np.inf)
    np.minimum.at(first, codes, sent_ns[has].astype(np.float64))
    np.maximum.at(last, codes, end_ns[has].astype(np.float64))
    duration = (last - first)[present] * NS
    return SessionFigures(
        int(present.sum()), tuple(by_turn),
        dist("session turns", turns, "requests", percentiles, confidence),
        dist("session input tokens", tokens_in, "tokens", percentiles, confidence),
        dist("session output tokens", tokens_out, "tokens", percentiles, confidence),
        dist("session duration", duration, "s", percentiles, confidence))
