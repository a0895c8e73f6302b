"""A run's records as columns: what the metrics read, and nothing else (docs/metrics.md).

:class:`FrameBuilder` takes each :class:`~pytest_llmbench.common.records.RequestRecord` as the load
generator finishes it (``add``) and copies the fields the metrics need into typed arrays; the record
itself can then go (it is already on disk, ``records.jsonl``). :meth:`FrameBuilder.build` gives the
:class:`RunFrame` that :func:`pytest_llmbench.measure.summary.summarize` reads: one row per request,
sorted by submission (T_submit, App. B.1.1), times in ns after the first submission, NaN where a
record has no value, and the streamed chunks flattened (``chunk_*``, ``chunk_counts`` per row).

Memory: a record with 50 one-token chunks costs about 1.2 KB of columns instead of the tens of KB
its Python lists take (``bench/memory.py``).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..common.records import ErrorType, RequestRecord
from .http_phases import HTTP_PHASES, phases

__all__ = ["FLOAT_FIELDS", "FrameBuilder", "RunFrame"]

_NONE = -(2**63)  # int64 stand-in for "no value" in the nanosecond columns

#: Optional instants (ns, perf_counter) kept per request; NaN after ``build`` where a record has none.
_TIMES = ("first_token_ns", "first_chunk_ns", "intended_ns", "handoff_ns", "first_reasoning_ns")

#: Per-request numbers (float64, NaN where absent): token counts (§4.4), server timing (§5.1.4.2,
#: §5.8.4), usage fields (``u_*``, AIPerf Usage Field Metrics) and HTTP phases (``trace_<phase>``).
FLOAT_FIELDS: tuple[str, ...] = (
    "input_tokens", "max_tokens_asked", "in_client", "in_server", "out_client", "out_server", "reasoning_client",
    "srv_queue_ns", "srv_prefill_ns", "srv_preemptions", "srv_preempted_tokens",
    "u_total", "u_reasoning", "u_cache_read", "u_cache_write", "u_cache_miss",
    *(f"trace_{p}" for p in HTTP_PHASES),
)


def _usage_int(usage: Any, *path: str) -> int | None:
    v = usage
    for k in path:
        if not isinstance(v, dict):
            return None
        v = v.get(k)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _cache_read(r: RequestRecord) -> int | None:
    """OpenAI ``prompt_tokens_details.cached_tokens`` (or ``input_tokens_details``), Anthropic
    ``cache_read_input_tokens``; else ``record.cached_tokens``."""
    for path in (("prompt_tokens_details", "cached_tokens"), ("input_tokens_details", "cached_tokens"),
                 ("cache_read_input_tokens",)):
        v = _usage_int(r.usage, *path)
        if v is not None:
            return v
    return r.cached_tokens


def _chunk_tokens_of(r: RequestRecord) -> list[int]:
    """Tokens per chunk: the tokenizer's counts, else 1 per non-whitespace text chunk."""
    if len(r.chunk_tokens) == len(r.chunk_ns):
        return r.chunk_tokens
    if r.chunk_tokens:
        raise ValueError(f"record {r.index}: {len(r.chunk_tokens)} chunk_tokens for {len(r.chunk_ns)} chunks")
    return [1 if t.strip() else 0 for t in r.chunk_text]


def _first_reasoning_ns(r: RequestRecord) -> int | None:
    """Arrival of the first non-whitespace reasoning chunk, None when none streamed."""
    for t, txt in zip(r.chunk_ns, r.chunk_reasoning):
        if txt and txt.strip():
            return t
    return None


def _nan(v: Any) -> float:
    return math.nan if v is None else float(v)


@dataclass
class RunFrame:
    """A run's requests as columns, sorted by (submission, index); see the module docstring.

    ``t0``/``t_end``: first submission and last response (last submission when none ended), ns.
    ``sent``/``end`` are int64 ns after ``t0`` (``end`` is ``t_end - t0`` where a request has no end);
    the optional instants are float64 ns after ``t0``; ``chunk_ns``/``server_token_ns`` are int64 ns
    after ``t0``, flattened in row order with ``chunk_counts``/``server_token_counts`` per row.
    """

    t0: int
    t_end: int
    index: np.ndarray
    request_class: np.ndarray  # object: str | None
    error: np.ndarray  # object: ErrorType | None
    sent: np.ndarray
    end: np.ndarray
    has_end: np.ndarray
    times: dict[str, np.ndarray]  # _TIMES, float64 ns after t0
    numbers: dict[str, np.ndarray]  # FLOAT_FIELDS
    reasoning_streamed: np.ndarray  # bool: some reasoning text was streamed
    chunk_counts: np.ndarray
    chunk_ns: np.ndarray
    chunk_tokens: np.ndarray
    server_token_counts: np.ndarray
    server_token_ns: np.ndarray

    @property
    def n(self) -> int:
        return int(self.index.size)

    @property
    def ok(self) -> np.ndarray:
        return np.array([e is None for e in self.error], dtype=bool)

    @classmethod
    def from_records(cls, records: Iterable[RequestRecord], phase: str | None = "measure") -> RunFrame:
        """The frame of ``records`` (only those of ``phase``; None keeps all)."""
        b = FrameBuilder(phase)
        for r in records:
            b.add(r)
        return b.build()


class FrameBuilder:
    """Copies each finished record's measured fields into columns (``add``); ``build`` sorts them.

    Keeps no reference to a record. An inconsistent record (chunk token counts that do not match its
    chunks) is reported by ``build`` with the record's index, so the run that streams it is not cut short.
    """

    def __init__(self, phase: str | None = "measure") -> None:
        self.phase = phase
        self._index = array("q")
        self._sent = array("q")
        self._end = array("q")
        self._times = {k: array("q") for k in _TIMES}
        self._numbers = {k: array("d") for k in FLOAT_FIELDS}
        self._reasoning = array("b")
        self._err_code = array("b")
        self._class_code = array("i")
        self._classes: dict[str | None, int] = {}
        self._chunk_counts = array("q")
        self._chunk_ns = array("q")
        self._chunk_tokens = array("q")
        self._server_counts = array("q")
        self._server_ns = array("q")
        self._error: str | None = None

    def __len__(self) -> int:
        return len(self._index)

    @property
    def last_sent_ns(self) -> int | None:
        """The last T_submit collected so far (None before the first record)."""
        return max(self._sent) if len(self._sent) else None

    def add(self, r: RequestRecord) -> None:
        """Copy what the metrics read of one record (of this builder's phase; others are skipped)."""
        if self.phase is not None and r.phase != self.phase:
            return
        try:
            tokens = _chunk_tokens_of(r)
        except ValueError as exc:
            self._error = self._error or str(exc)
            tokens = [0] * len(r.chunk_ns)
        self._index.append(r.index)
        self._sent.append(r.sent_ns)
        self._end.append(_NONE if r.end_ns is None else r.end_ns)
        t = self._times
        for k, v in (("first_token_ns", r.first_token_ns), ("first_chunk_ns", r.first_chunk_ns),
                     ("intended_ns", r.intended_ns), ("handoff_ns", r.handoff_ns),
                     ("first_reasoning_ns", _first_reasoning_ns(r) if r.chunk_reasoning else None)):
            t[k].append(_NONE if v is None else v)
        usage, timing = r.usage, r.server_timing or {}
        trace = phases(r.http_trace)
        values = (r.input_tokens, r.max_tokens, r.input_tokens_client, r.input_tokens_server,
                  r.output_tokens_client, r.output_tokens_server, r.reasoning_tokens_client,
                  timing.get("queue_ns"), timing.get("prefill_ns"), timing.get("preemptions"),
                  timing.get("preempted_tokens"), _usage_int(usage, "total_tokens"),
                  _usage_int(usage, "completion_tokens_details", "reasoning_tokens"), _cache_read(r),
                  _usage_int(usage, "cache_creation_input_tokens"), _usage_int(usage, "prompt_cache_miss_tokens"),
                  *(trace[p] for p in HTTP_PHASES))
        for arr, v in zip(self._numbers.values(), values):
            arr.append(_nan(v))
        self._reasoning.append(any(r.chunk_reasoning))
        self._err_code.append(-1 if r.error_type is None else _ERROR_CODES[r.error_type])
        code = self._classes.setdefault(r.request_class, len(self._classes))
        self._class_code.append(code)
        self._chunk_counts.append(len(r.chunk_ns))
        self._chunk_ns.extend(r.chunk_ns)
        self._chunk_tokens.extend(tokens)
        server = r.server_token_ns or ()
        self._server_counts.append(len(server))
        self._server_ns.extend(server)

    def build(self, *, release: bool = False) -> RunFrame:
        """The columns sorted by (submission, index); raises ValueError naming a bad record or no record.

        ``release``: hand the buffers over (the builder is empty afterwards), so that the run's columns
        are not held twice.
        """
        frame = self._build()
        if release:
            self.__init__(self.phase)  # type: ignore[misc]
        return frame

    def _build(self) -> RunFrame:
        if self._error:
            raise ValueError(self._error)
        n = len(self._index)
        if not n:
            raise ValueError(f"no records to summarise (phase filter: {self.phase!r})")
        index = np.frombuffer(self._index, dtype=np.int64)
        sent_abs = np.frombuffer(self._sent, dtype=np.int64)
        order = np.lexsort((index, sent_abs))
        end_abs = np.frombuffer(self._end, dtype=np.int64)[order]
        sent_abs = sent_abs[order]
        has_end = end_abs != _NONE
        t0 = int(sent_abs[0])
        t_end = int(end_abs[has_end].max()) if has_end.any() else int(sent_abs.max())
        times = {}
        for k, arr in self._times.items():
            a = np.frombuffer(arr, dtype=np.int64)[order]
            times[k] = np.where(a == _NONE, np.nan, (a - t0).astype(np.float64))
        classes = np.empty(len(self._classes), dtype=object)
        for name, code in self._classes.items():
            classes[code] = name
        errors = np.empty(len(_ERRORS) + 1, dtype=object)
        errors[: len(_ERRORS)] = _ERRORS
        errors[-1] = None  # code -1
        counts = np.frombuffer(self._chunk_counts, dtype=np.int64)
        s_counts = np.frombuffer(self._server_counts, dtype=np.int64)
        return RunFrame(
            t0=t0, t_end=t_end, index=index[order],
            request_class=classes[np.frombuffer(self._class_code, dtype=np.int32)[order]],
            error=errors[np.frombuffer(self._err_code, dtype=np.int8)[order]],
            sent=sent_abs - t0, end=np.where(has_end, end_abs, t_end) - t0, has_end=has_end, times=times,
            numbers={k: np.frombuffer(a, dtype=np.float64)[order] for k, a in self._numbers.items()},
            reasoning_streamed=np.frombuffer(self._reasoning, dtype=np.int8)[order].astype(bool),
            chunk_counts=counts[order], chunk_ns=_ragged(self._chunk_ns, counts, order) - t0,
            chunk_tokens=_ragged(self._chunk_tokens, counts, order).astype(np.int32),
            server_token_counts=s_counts[order], server_token_ns=_ragged(self._server_ns, s_counts, order) - t0,
        )


_ERRORS: tuple[ErrorType, ...] = tuple(ErrorType)
_ERROR_CODES: dict[ErrorType, int] = {e: i for i, e in enumerate(_ERRORS)}


def _ragged(values: array, counts: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Segments of ``values`` (lengths ``counts``, in insertion order) re-arranged into ``order``."""
    flat = np.frombuffer(values, dtype=np.int64) if len(values) else np.empty(0, dtype=np.int64)
    if not flat.size or np.array_equal(order, np.arange(order.size)):
        return flat.copy()
    starts = np.zeros(counts.size, dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    lens = counts[order]
    firsts = np.repeat(starts[order] - (np.cumsum(lens) - lens), lens)
    return flat[firsts + np.arange(int(lens.sum()))]
