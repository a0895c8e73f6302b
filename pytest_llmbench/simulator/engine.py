"""The engine model: iteration-level (continuous-batching) scheduling over a paged KV cache.

Pure logic with no clock of its own: :meth:`Engine.plan` decides one iteration at a given time
(admissions, preemptions, prefill chunks, decodes) and returns its modelled duration;
:meth:`Engine.commit` applies it at its end time (KV progress, emitted tokens, finishes). The HTTP
server drives it in real time; :func:`run_virtual` drives it on a virtual clock for tests.

Scheduling follows vLLM/Sarathi:

* Without chunked prefill (vLLM V0 style, prefill first): when waiting requests can be admitted,
  an iteration prefills them *whole* and running requests do not decode in it, so a long prompt
  stalls every running stream for its whole prefill (§5.4).
* With chunked prefill (Sarathi): each iteration decodes every running request first, then spends
  the rest of the ``max_num_batched_tokens`` budget on prefill chunks (continuing ones first, then
  newly admitted requests, FCFS), so the stall is bounded by one chunk.
* Admission (FCFS, stops at the first request that does not fit) needs free KV blocks for the
  request's whole prefill. When a decode needs a new block and none is free, the newest running
  request is preempted by recompute: its KV is discarded (counted as preempted tokens) and it is
  re-queued at the front; on readmission it prefills prompt + already generated tokens again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .config import SimConfig
from .kv import BlockManager, chain_hash

__all__ = [
    "Engine",
    "EngineError",
    "Iteration",
    "KVCapacityError",
    "QueueFullError",
    "Sequence",
    "ShuttingDownError",
    "run_virtual",
]

WAITING, RUNNING, FINISHED, ABORTED = "waiting", "running", "finished", "aborted"


class EngineError(Exception):
    """A request the engine will not take (subclasses say why)."""


class QueueFullError(EngineError):
    """The waiting queue is at its bound (HTTP 429)."""


class KVCapacityError(EngineError):
    """The request could never fit in the KV cache, even alone."""


class ShuttingDownError(EngineError):
    """The server is shutting down (HTTP 503)."""


@dataclass(slots=True, eq=False)
class Sequence:
    """One request inside the engine. Token ids of prompt and (planned) output are known up front."""

    rid: int
    prompt_ids: list[int]
    output_ids: list[int]  # the planned output; the request finishes after emitting all of them
    max_tokens: int
    finish_reason: str  # reason reported once every planned token is emitted
    record_times: bool = False  # keep per-token emit times (llmbench_timing)
    arrival_ns: int = 0
    status: str = WAITING
    n_prompt: int = 0
    n_out: int = 0
    num_computed: int = 0  # tokens whose KV is computed
    num_emitted: int = 0  # output tokens delivered (never decreases, even on preemption)
    prefill_target: int = 0  # tokens to compute before the next token can be emitted
    prefilling: bool = False
    blocks: list[int] = field(default_factory=list)
    hashes: list[int] = field(default_factory=list)  # chain hashes of full blocks, memoised
    num_registered: int = 0  # leading blocks already published to the prefix cache
    first_sched_ns: int | None = None
    first_token_ns: int | None = None
    finish_ns: int | None = None
    preemptions: int = 0
    preempted_tokens: int = 0
    cached_tokens: int = 0  # prefix-cache hit at first admission
    emit_ns: list[int] | None = None
    emit_unix_ns: list[int] | None = None
    all_ids: list[int] = field(default_factory=list)
    waiter: Any = None  # owned by the driver (e.g. an asyncio.Future)
    payload: Any = None  # owned by the driver

    def __post_init__(self) -> None:
        self.n_prompt = len(self.prompt_ids)
        self.n_out = len(self.output_ids)
        self.all_ids = list(self.prompt_ids) + list(self.output_ids)
        if self.record_times:
            self.emit_ns, self.emit_unix_ns = [], []

    @property
    def done(self) -> bool:
        return self.status == FINISHED or self.status == ABORTED

    @property
    def queue_ns(self) -> int | None:
        return None if self.first_sched_ns is None else self.first_sched_ns - self.arrival_ns

    @property
    def prefill_ns(self) -> int | None:
        if self.first_token_ns is None or self.first_sched_ns is None:
            return None
        return self.first_token_ns - self.first_sched_ns


@dataclass(slots=True)
class Iteration:
    """One planned engine step."""

    start_ns: int
    duration_ns: int
    decoding: list[Sequence]
    chunks: list[tuple[Sequence, int, int]]  # (seq, start, end) prefill positions computed
    duration_ms: float  # model time before time_scale


@dataclass
class EngineCounters:
    """Monotonic counters exported as Prometheus ``*_total`` metrics."""

    iterations: int = 0
    num_preemptions: int = 0
    requests_preempted: int = 0
    preempted_tokens: int = 0
    prefix_cache_hit_tokens: int = 0
    prefix_cache_queried_tokens: int = 0
    requests_finished: int = 0
    requests_aborted: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    prefill_tokens_computed: int = 0


class Engine:
    """Continuous-batching scheduler + KV cache. Not thread-safe; one driver calls it."""

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.kv = BlockManager(config.kv_blocks_total, config.block_size, config.prefix_cache)
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.counters = EngineCounters()
        self.draining = False
        self.cold = True  # the first iteration after process start pays cold_start_ms (§4.5.3)

    # ------------------------------------------------------------------ requests
    def check_fits(self, prompt_tokens: int, max_tokens: int) -> None:
        """Raise :class:`KVCapacityError` if such a request could never fit in the KV cache."""
        cap = self.kv.num_blocks * self.config.block_size
        if prompt_tokens + max_tokens > cap:
            raise KVCapacityError(
                f"prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) exceeds the KV cache "
                f"capacity of {cap} tokens; this request could never be scheduled")

    def add(self, seq: Sequence, now_ns: int) -> None:
        """Queue a request (FCFS). Raises :class:`EngineError` subclasses when refused."""
        if self.draining:
            raise ShuttingDownError("server is shutting down")
        if len(self.waiting) >= self.config.max_waiting:
            raise QueueFullError(f"waiting queue is full ({self.config.max_waiting} requests)")
        self.check_fits(seq.n_prompt, seq.max_tokens)
        seq.arrival_ns = now_ns
        seq.status = WAITING
        self.counters.prompt_tokens += seq.n_prompt
        self.waiting.append(seq)

    def abort(self, seq: Sequence) -> None:
        """Drop a request (client went away): free its KV, never emit again."""
        if seq.done:
            return
        if seq.status == RUNNING:
            self.running.remove(seq)
            self.kv.release(seq.blocks)
            seq.blocks = []
        else:
            try:
                self.waiting.remove(seq)
            except ValueError:
                pass
        seq.status = ABORTED
        self.counters.requests_aborted += 1

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def set_prefix_cache(self, on: bool) -> None:
        self.kv.set_enabled(on)

    def flush_prefix_cache(self) -> None:
        self.kv.flush()

    # ------------------------------------------------------------------ scheduling
    def _hashes(self, seq: Sequence, n_blocks: int) -> list[int]:
        hs = seq.hashes
        bs = self.config.block_size
        ids = seq.all_ids
        while len(hs) < n_blocks:
            j = len(hs)
            hs.append(chain_hash(hs[-1] if hs else 0, ids[j * bs:(j + 1) * bs]))
        return hs

    def _admit(self, seq: Sequence, now_ns: int) -> bool:
        """Give ``seq`` KV blocks for its prefill (using cached prefix blocks); False if no room."""
        cfg = self.config
        bs = cfg.block_size
        target = seq.n_prompt + seq.num_emitted
        matched: list[int] = []
        if self.kv.enabled:
            max_m = (target - 1) // bs  # at least one token is always computed
            matched = self.kv.match(self._hashes(seq, max_m), max_m)
        n_new = cfg.blocks_for(target) - len(matched)
        if not self.kv.can_allocate(n_new, matched):
            return False
        self.kv.acquire(matched)
        seq.blocks = matched + [self.kv.allocate() for _ in range(n_new)]
        cached = len(matched) * bs
        seq.num_computed = cached
        seq.num_registered = len(matched)
        seq.prefill_target = target
        seq.prefilling = True
        seq.status = RUNNING
        c = self.counters
        c.prefix_cache_queried_tokens += target
        c.prefix_cache_hit_tokens += cached
        if seq.first_sched_ns is None:
            seq.first_sched_ns = now_ns
            seq.cached_tokens = cached
        return True

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.kv.release(seq.blocks)
        seq.blocks = []
        seq.preempted_tokens += seq.num_computed
        self.counters.preempted_tokens += seq.num_computed
        seq.num_computed = 0
        seq.num_registered = 0
        seq.prefilling = False
        seq.preemptions += 1
        self.counters.num_preemptions += 1
        if seq.preemptions == 1:
            self.counters.requests_preempted += 1
        seq.status = WAITING
        self.waiting.appendleft(seq)

    def _reserve_decodes(self) -> list[Sequence]:
        """Decoding sequences for this iteration, each with a KV slot (preempting the newest)."""
        bs = self.config.block_size
        kv = self.kv
        running = self.running
        out: list[Sequence] = []
        i = 0
        while i < len(running):
            seq = running[i]
            i += 1
            if seq.prefilling:
                continue
            if seq.num_computed < len(seq.blocks) * bs:  # room in its last block
                out.append(seq)
                continue
            while kv.num_free == 0:
                victim = running[-1]
                self._preempt(victim)
                if victim is seq:
                    break
            if seq.status != RUNNING:
                break  # seq was the newest and preempted itself; nothing after it remains
            seq.blocks.append(kv.allocate())
            out.append(seq)
        return out

    def plan(self, now_ns: int) -> Iteration | None:
        """Decide the iteration starting at ``now_ns``; None when there is nothing to do."""
        cfg = self.config
        decoding: list[Sequence] = []
        chunks: list[tuple[Sequence, int, int]] = []
        waiting = self.waiting
        running = self.running
        if cfg.chunked_prefill:
            budget = cfg.max_num_batched_tokens
            decoding = self._reserve_decodes()
            budget -= len(decoding)
            for seq in running:
                if budget <= 0:
                    break
                if seq.prefilling:
                    n = min(seq.prefill_target - seq.num_computed, budget)
                    chunks.append((seq, seq.num_computed, seq.num_computed + n))
                    budget -= n
            while waiting and budget > 0 and len(running) < cfg.max_num_seqs:
                seq = waiting[0]
                if not self._admit(seq, now_ns):
                    break
                waiting.popleft()
                running.append(seq)
                n = min(seq.prefill_target - seq.num_computed, budget)
                chunks.append((seq, seq.num_computed, seq.num_computed + n))
                budget -= n
        else:
            budget = cfg.max_num_batched_tokens
            while waiting and len(running) < cfg.max_num_seqs:
                seq = waiting[0]
                todo = seq.n_prompt + seq.num_emitted  # upper bound before cache lookup
                if chunks and todo > budget:
                    break
                if not self._admit(seq, now_ns):
                    break
                n = seq.prefill_target - seq.num_computed
                waiting.popleft()
                running.append(seq)
                chunks.append((seq, seq.num_computed, seq.prefill_target))
                budget -= n
            if not chunks:
                decoding = self._reserve_decodes()
        if not decoding and not chunks:
            return None
        prefill_ms = 0.0
        for _, s, e in chunks:
            prefill_ms += cfg.prefill_chunk_ms(s, e)
        ms = cfg.iteration_ms(len(decoding), prefill_ms)
        if self.cold:
            ms += cfg.cold_start_ms
            self.cold = False
        return Iteration(now_ns, round(ms * cfg.time_scale * 1e6), decoding, chunks, ms)

    # ------------------------------------------------------------------ progress
    def _register(self, seq: Sequence) -> None:
        full = seq.num_computed // self.config.block_size
        if full > seq.num_registered:
            hs = self._hashes(seq, full)
            blocks = seq.blocks
            for j in range(seq.num_registered, full):
                self.kv.register(blocks[j], hs[j])
            seq.num_registered = full

    def _emit(self, seq: Sequence, end_ns: int, end_unix_ns: int) -> None:
        if seq.num_emitted < seq.n_out:
            seq.num_emitted += 1
            self.counters.generation_tokens += 1
            if seq.first_token_ns is None:
                seq.first_token_ns = end_ns
            if seq.emit_ns is not None:
                seq.emit_ns.append(end_ns)
                seq.emit_unix_ns.append(end_unix_ns)  # type: ignore[union-attr]
        if seq.num_emitted >= seq.n_out:
            if seq.first_token_ns is None:  # refused before any token: "first" = end of prefill
                seq.first_token_ns = end_ns
            seq.status = FINISHED
            seq.finish_ns = end_ns
            self.running.remove(seq)
            self.kv.release(seq.blocks)
            seq.blocks = []
            self.counters.requests_finished += 1

    def commit(self, it: Iteration, end_ns: int, end_unix_ns: int | None = None) -> list[Sequence]:
        """Apply a planned iteration at its end; returns the sequences that emitted or finished."""
        if end_unix_ns is None:
            end_unix_ns = end_ns
        self.counters.iterations += 1
        touched: list[Sequence] = []
        prefix = self.kv.enabled
        bs = self.config.block_size
        for seq in it.decoding:
            if seq.status != RUNNING:
                continue
            seq.num_computed += 1
            if prefix and seq.num_computed // bs > seq.num_registered:
                self._register(seq)
            self._emit(seq, end_ns, end_unix_ns)
            touched.append(seq)
        for seq, s, e in it.chunks:
            if seq.status != RUNNING or not seq.prefilling or seq.num_computed != s:
                continue  # aborted or preempted meanwhile
            seq.num_computed = e
            self.counters.prefill_tokens_computed += e - s
            if prefix:
                self._register(seq)
            if e >= seq.prefill_target:
                seq.prefilling = False
                self._emit(seq, end_ns, end_unix_ns)
                touched.append(seq)
        return touched

    # ------------------------------------------------------------------ introspection
    def check_invariants(self) -> None:
        """Assert KV accounting is consistent with the sequences (used by tests)."""
        self.kv.check_invariants()
        bs = self.config.block_size
        refs = [0] * self.kv.num_blocks
        for seq in self.running:
            assert seq.status == RUNNING
            for b in seq.blocks:
                refs[b] += 1
            need = seq.prefill_target if seq.prefilling else seq.num_computed
            assert len(seq.blocks) * bs >= need, f"seq {seq.rid} lacks blocks for {need} tokens"
            assert seq.num_computed <= seq.n_prompt + seq.num_emitted
        for seq in self.waiting:
            assert not seq.blocks and seq.status == WAITING
        assert refs == self.kv.ref, "block reference counts disagree with running sequences"
        assert len(self.running) <= self.config.max_num_seqs


def run_virtual(engine: Engine, arrivals: Iterable[tuple[int, Sequence]],
                max_iterations: int = 10_000_000) -> int:
    """Run ``engine`` on a virtual clock until every request is done; returns the end time (ns).

    ``arrivals`` are ``(arrival_ns, seq)`` pairs; a request arriving during an iteration is queued
    when that iteration ends (as in the real driver). With ``time_scale == 0`` all times stay 0.
    """
    pending = deque(sorted(arrivals, key=lambda a: a[0]))
    now = 0
    for _ in range(max_iterations):
        while pending and pending[0][0] <= now:
            t, seq = pending.popleft()
            engine.add(seq, t)
        it = engine.plan(now)
        if it is None:
            if not pending:
                return now
            now = pending[0][0]
            continue
        now += it.duration_ns
        engine.commit(it, now, now)
    raise RuntimeError(f"virtual run did not finish within {max_iterations} iterations")
