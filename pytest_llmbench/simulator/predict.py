"""Simulation-based predictions: run the engine model on a virtual clock for loads whose outcome
has no closed form (KV-limited batches, preemption, §5.2/§5.5/§5.8).

:func:`simulate_closed_loop` is what the simulator *should* deliver for a closed-loop load of
``concurrency`` clients with no think time and no network delay; measurements through HTTP are
compared with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import SimConfig
from .engine import Engine, Sequence

__all__ = ["ClosedLoopPrediction", "simulate_closed_loop"]


@dataclass(frozen=True)
class ClosedLoopPrediction:
    """Steady-state figures over the measurement window (real seconds, after ``time_scale``)."""

    concurrency: int
    output_tokens_per_s: float
    requests_per_s: float
    mean_running: float  # average running-batch size per iteration
    num_preemptions: int
    requests_preempted: int
    requests_finished: int
    window_s: float


def simulate_closed_loop(config: SimConfig, concurrency: int, prompt_tokens: int, output_tokens: int, *,
                         duration_s: float = 10.0, warmup_s: float = 2.0) -> ClosedLoopPrediction:
    """Closed loop of ``concurrency`` clients, each sending a new request (distinct prompt ids,
    ``ignore_eos`` semantics: exactly ``output_tokens``) as soon as its previous one finishes."""
    if config.time_scale <= 0:
        raise ValueError("simulate_closed_loop needs time_scale > 0 (with 0 every rate is infinite)")
    if concurrency < 1 or prompt_tokens < 1 or output_tokens < 1:
        raise ValueError("concurrency, prompt_tokens and output_tokens must be >= 1")
    e = Engine(config)
    rid = 0

    def new(now: int) -> None:
        nonlocal rid
        ids = [(rid * 7919 + i) % 90_000 + 1 for i in range(prompt_tokens)]  # distinct prompts
        e.add(Sequence(rid, ids, [0] * output_tokens, output_tokens, "length"), now)
        rid += 1

    for _ in range(concurrency):
        new(0)
    t_w = round(warmup_s * 1e9)
    t_end = round((warmup_s + duration_s) * 1e9)
    now = 0
    tokens = 0
    finished = 0
    batch_sum = 0
    iters = 0
    c0 = None
    while now < t_end:
        if now >= t_w and c0 is None:
            c0 = (e.counters.num_preemptions, e.counters.requests_preempted)
        it = e.plan(now)
        if it is None:  # cannot happen in a closed loop, but never spin
            break
        now += max(it.duration_ns, 1)
        touched = e.commit(it, now, now)
        in_window = t_w <= now <= t_end
        if in_window:
            batch_sum += len(it.decoding) + len(it.chunks)
            iters += 1
        for s in touched:
            if in_window:
                tokens += 1
            if s.status == "finished":
                if in_window:
                    finished += 1
                new(now)
    c0 = c0 or (0, 0)
    return ClosedLoopPrediction(
        concurrency=concurrency,
        output_tokens_per_s=tokens / duration_s,
        requests_per_s=finished / duration_s,
        mean_running=batch_sum / iters if iters else 0.0,
        num_preemptions=e.counters.num_preemptions - c0[0],
        requests_preempted=e.counters.requests_preempted - c0[1],
        requests_finished=finished,
        window_s=duration_s,
    )
