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

import contextlib
import math
import os
import shutil
import tempfile
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..common.records import REASONING_STANDINGS, ErrorType, RequestRecord, phase_times
from .http_phases import HTTP_PHASES, phases

__all__ = ["BLOCK_CHUNKS", "FLOAT_FIELDS", "SPILL_AT", "ChunkBlock", "ChunkStore", "Chunks", "FrameBuilder", "RunFrame"]

_NONE = -(2**63)  # int64 stand-in for "no value" in the nanosecond columns

#: Optional instants (ns, perf_counter) kept per request; NaN after ``build`` where a record has none.
_TIMES = ("first_token_ns", "first_chunk_ns", "intended_ns", "handoff_ns", "first_reasoning_ns",
          # the phases (issue 49; records.phase_times): ttfa's point, reasoning's last, tool's, content's last
          "first_any_ns", "reasoning_last_ns", "tool_first_ns", "tool_last_ns", "content_last_ns")

#: ``reasoning_standing`` column codes (records.REASONING_STANDINGS, in order).
STANDING_CODES: dict[str, int] = {s: i for i, s in enumerate(REASONING_STANDINGS)}

#: Per-request numbers (float64, NaN where absent): token counts (§4.4), server timing (§5.1.4.2,
#: §5.8.4), usage fields (``u_*``, AIPerf Usage Field Metrics) and HTTP phases (``trace_<phase>``).
FLOAT_FIELDS: tuple[str, ...] = (
    "input_tokens", "max_tokens_asked", "in_client", "in_server", "out_client", "out_server", "reasoning_client",
    "srv_queue_ns", "srv_prefill_ns", "srv_preemptions", "srv_preempted_tokens",
    "u_total", "u_reasoning", "u_cache_read", "u_cache_write", "u_cache_miss",
    *(f"trace_{p}" for p in HTTP_PHASES),
    "tool_client", "reasoning_standing",  # tool-call argument tokens; STANDING_CODES (issue 49)
    "turn", "session",  # a multi-turn session's turn (1-based) and the session's code in the run (issue 50)
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


def chunk_tokens_of(r: RequestRecord) -> list[int]:
    """Tokens per chunk: the tokenizer's counts, else 1 per non-whitespace text chunk."""
    if len(r.chunk_tokens) == len(r.chunk_ns):
        return r.chunk_tokens
    if r.chunk_tokens:
        raise ValueError(f"record {r.index}: {len(r.chunk_tokens)} chunk_tokens for {len(r.chunk_ns)} chunks")
    return [1 if t.strip() else 0 for t in r.chunk_text]


def chunk_gaps_ns(r: RequestRecord) -> np.ndarray:
    """One successful record's option-A samples in ns, in arrival order: the gaps between its content
    chunks (tokens > 0) from its first content token on (what ``metrics.itl.itl_data`` pools for it)."""
    if r.first_token_ns is None or not r.chunk_ns:
        return np.empty(0, dtype=np.int64)
    ns = np.asarray(r.chunk_ns, dtype=np.int64)
    tokens = np.asarray(chunk_tokens_of(r), dtype=np.int64)
    return np.diff(ns[(tokens > 0) & (ns >= r.first_token_ns)])


def aside_chunks(r: RequestRecord, tokens: list[int]) -> tuple[list[int], list[int]]:
    """The arrival and tokens of a record's chunks that carry no content (reasoning or tool-call arguments
    alone): what visible output leaves out (``visible_output_throughput``). A chunk with content counts as
    visible whole."""
    ns_out: list[int] = []
    tok_out: list[int] = []
    for t, n, text in zip(r.chunk_ns, tokens, r.chunk_text):
        if n and not text:
            ns_out.append(t)
            tok_out.append(n)
    return ns_out, tok_out


def _nan(v: Any) -> float:
    return math.nan if v is None else float(v)


#: Per-chunk entries a builder keeps in memory per column before it appends them to a spill file.
SPILL_AT = 1 << 20
#: Chunks (streamed chunks plus server timestamps) per block the summariser reads at once.
BLOCK_CHUNKS = 1 << 19

_CHUNK_DTYPES = {"ns": np.dtype(np.int64), "tokens": np.dtype(np.int32), "server": np.dtype(np.int64),
                 "aside_ns": np.dtype(np.int64), "aside_tokens": np.dtype(np.int32)}
_ARRAY_CODES = {"ns": "q", "tokens": "i", "server": "q", "aside_ns": "q", "aside_tokens": "i"}


class _Column:
    """One per-request column, appended record by record, that costs nothing while every value is the
    same (a field the server never sends: NaN in every row): an ``array`` only from the second value on."""

    __slots__ = ("code", "first", "count", "values")

    def __init__(self, code: str) -> None:
        self.code, self.first, self.count, self.values = code, None, 0, None

    def append(self, v: Any) -> None:
        if self.values is not None:
            self.values.append(v)
        elif self.count and (v == self.first or (v != v and self.first != self.first)):  # NaN stays NaN
            self.count += 1
        elif not self.count:
            self.first, self.count = v, 1
        else:
            self.values = array(self.code, [self.first]) * self.count
            self.values.append(v)

    def __len__(self) -> int:
        return self.count if self.values is None else len(self.values)

    def constant(self) -> tuple[bool, Any]:
        """(True, the value) when every row holds the same value."""
        return (True, self.first) if self.values is None else (False, None)

    def array(self, dtype: Any) -> np.ndarray:
        """The column in insertion order (a fresh array)."""
        if self.values is None:
            return np.full(self.count, self.first, dtype=dtype)
        return np.frombuffer(self.values, dtype=dtype)


class ChunkStore:
    """The run's per-chunk columns (``ns``: arrival, ``tokens``: tokens of the chunk, ``server``: server
    per-token timestamps) in the order records were added: in memory up to :data:`SPILL_AT` entries per
    column, then appended to files in a temporary directory (``close`` removes them). Read back by
    position with ``np.fromfile`` (a file's pages are not mapped, so a read costs only its block)."""

    def __init__(self, spill_at: int | None = None) -> None:
        self.spill_at = SPILL_AT if spill_at is None else spill_at
        self._memory = {k: array(c) for k, c in _ARRAY_CODES.items()}
        self._written = dict.fromkeys(_ARRAY_CODES, 0)
        self._dir: str | None = None
        self._closed = False

    @property
    def spilled(self) -> bool:
        return self._dir is not None

    def length(self, name: str) -> int:
        return self._written[name] + len(self._memory[name])

    def extend(self, name: str, values: Any) -> None:
        mem = self._memory[name]
        mem.extend(values)
        if len(mem) >= self.spill_at:
            self._flush(name)

    def _path(self, name: str) -> str:
        return os.path.join(self._dir or "", f"{name}.bin")

    def _flush(self, name: str) -> None:
        if self._closed:
            raise ValueError("this run's chunk columns were released (summarised already)")
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="llmbench-chunks-")
        mem = self._memory[name]
        with open(self._path(name), "ab") as f:
            f.write(mem.tobytes())
        self._written[name] += len(mem)
        self._memory[name] = array(_ARRAY_CODES[name])

    def read(self, name: str, start: int, count: int) -> np.ndarray:
        """Entries ``start .. start+count-1`` of column ``name`` (a fresh array)."""
        if self._closed:
            raise ValueError("this run's chunk columns were released (summarised already)")
        dtype = _CHUNK_DTYPES[name]
        written = self._written[name]
        parts = []
        if start < written:
            k = min(count, written - start)
            with open(self._path(name), "rb") as f:
                f.seek(start * dtype.itemsize)
                parts.append(np.fromfile(f, dtype=dtype, count=k))
            start, count = start + k, count - k
        if count > 0:
            mem = np.frombuffer(self._memory[name], dtype=dtype) if len(self._memory[name]) else np.empty(0, dtype)
            parts.append(mem[start - written:start - written + count].copy())
        if not parts:
            return np.empty(0, dtype=dtype)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def gather(self, name: str, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
        """The segments ``[starts[i], starts[i] + lens[i])`` of column ``name``, concatenated in the order
        given. Neighbouring segments (records added in about the order they are read) are read as one
        range; a range much wider than its segments is split."""
        total = int(lens.sum())
        if not total:
            return np.empty(0, dtype=_CHUNK_DTYPES[name])
        has = lens > 0
        a = int(starts[has].min())
        b = int((starts + lens)[has].max())
        if b - a <= 2 * total + (1 << 16) or starts.size == 1:
            buf = self.read(name, a, b - a)
            if b - a == total and starts.size and np.array_equal(starts[has][1:], (starts + lens)[has][:-1]) \
                    and int(starts[has][0]) == a:
                return buf  # already contiguous and in order
            first = np.repeat(starts - a - (np.cumsum(lens) - lens), lens)
            return buf[first + np.arange(total)]
        mid = starts.size // 2
        return np.concatenate((self.gather(name, starts[:mid], lens[:mid]),
                               self.gather(name, starts[mid:], lens[mid:])))

    def close(self) -> None:
        """Remove the spill files (idempotent); in-memory columns stay readable when nothing spilled."""
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._closed = True
            self._memory = {k: array(c) for k, c in _ARRAY_CODES.items()}

    def __del__(self) -> None:  # a builder dropped without being summarised leaves no file behind
        with contextlib.suppress(Exception):
            self.close()


@dataclass
class ChunkBlock:
    """The chunks of rows ``lo .. hi-1`` of a run (sorted order): counts per row and the flattened
    columns, times in ns after the run's first submission."""

    lo: int
    hi: int
    chunk_counts: np.ndarray
    chunk_ns: np.ndarray
    chunk_tokens: np.ndarray
    server_token_counts: np.ndarray
    server_token_ns: np.ndarray

    @property
    def n(self) -> int:
        return self.hi - self.lo

    def owner(self) -> np.ndarray:
        """The block row (0-based) of each chunk."""
        return np.repeat(np.arange(self.n, dtype=np.int32), self.chunk_counts)


class Chunks:
    """A run's streamed chunks, read in blocks of whole requests (:meth:`blocks`), in row order.

    The per-request columns of a run stay in memory; the per-chunk ones (tens per request) are read a
    block at a time from the builder's :class:`ChunkStore`, so a metric over chunks holds one block of
    them at once (issue 30). A block holds about :data:`BLOCK_CHUNKS` chunks (at least one request).
    """

    def __init__(self, store: ChunkStore, t0: int, index: np.ndarray, chunk_counts: np.ndarray,
                 chunk_starts: np.ndarray, server_counts: np.ndarray, server_starts: np.ndarray,
                 block_chunks: int | None = None) -> None:
        self.store, self.t0, self.index = store, t0, index
        self.chunk_counts, self.chunk_starts = chunk_counts, chunk_starts
        self.server_counts, self.server_starts = server_counts, server_starts
        self.block_chunks = BLOCK_CHUNKS if block_chunks is None else max(int(block_chunks), 1)

    @property
    def n(self) -> int:
        return int(self.chunk_counts.size)

    def bounds(self) -> list[tuple[int, int]]:
        """The blocks' row ranges."""
        n = self.n
        weight = np.cumsum(self.chunk_counts + self.server_counts)
        out, lo, done = [], 0, 0
        while lo < n:
            hi = int(np.searchsorted(weight, done + self.block_chunks, side="right"))
            hi = min(max(hi, lo + 1), n)
            out.append((lo, hi))
            done, lo = int(weight[hi - 1]), hi
        return out

    def block(self, lo: int, hi: int) -> ChunkBlock:
        counts = self.chunk_counts[lo:hi]
        ns = self.store.gather("ns", self.chunk_starts[lo:hi], counts)
        if ns.size > 1:
            owner = np.repeat(np.arange(hi - lo, dtype=np.int32), counts)
            bad = (np.diff(ns) < 0) & (owner[1:] == owner[:-1])
            if bad.any():
                raise ValueError(f"record {self.index[lo + int(owner[1:][bad][0])]}: chunk_ns is not non-decreasing")
        ns -= self.t0
        tokens = self.store.gather("tokens", self.chunk_starts[lo:hi], counts)
        s_counts = self.server_counts[lo:hi]
        server = self.store.gather("server", self.server_starts[lo:hi], s_counts) - self.t0
        return ChunkBlock(lo, hi, counts, ns, tokens, s_counts, server)

    def blocks(self) -> Iterator[ChunkBlock]:
        for lo, hi in self.bounds():
            yield self.block(lo, hi)

    def aside(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The chunks that carry reasoning or tool-call arguments and no content (:func:`aside_chunks`), as
        (arrival ns after t0, tokens), a slice of about :attr:`block_chunks` at a time, in the order added."""
        total = self.store.length("aside_ns")
        for start in range(0, total, self.block_chunks):
            k = min(self.block_chunks, total - start)
            yield self.store.read("aside_ns", start, k) - self.t0, self.store.read("aside_tokens", start, k)

    def whole(self) -> ChunkBlock:
        """Every row's chunks at once (small runs, tests)."""
        return self.block(0, self.n)

    @property
    def spilled(self) -> bool:
        return self.store.spilled

    def close(self) -> None:
        self.store.close()


@dataclass
class RunFrame:
    """A run's requests as columns, sorted by (submission, index); see the module docstring.

    ``t0``/``t_end``: first submission and last response (last submission when none ended), ns.
    ``sent``/``end`` are int64 ns after ``t0`` (``end`` is ``t_end - t0`` where a request has no end);
    the optional instants are float64 ns after ``t0`` (a column the same in every row is a read-only
    ``np.broadcast_to`` of that value); ``chunks`` reads the streamed chunks and server per-token
    timestamps block by block (:class:`Chunks`), ``chunk_counts``/``server_token_counts`` per row,
    ``chunk_token_sum`` the tokens of each row's chunks.
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
    chunk_token_sum: np.ndarray
    server_token_counts: np.ndarray
    chunks: Chunks

    @property
    def n(self) -> int:
        return int(self.index.size)

    @property
    def ok(self) -> np.ndarray:
        return np.array([e is None for e in self.error], dtype=bool)

    @property
    def chunk_ns(self) -> np.ndarray:
        """Every chunk's arrival, ns after t0, flattened in row order (read whole: small runs, tests)."""
        return self.chunks.whole().chunk_ns

    @property
    def chunk_tokens(self) -> np.ndarray:
        return self.chunks.whole().chunk_tokens

    @property
    def server_token_ns(self) -> np.ndarray:
        return self.chunks.whole().server_token_ns

    @classmethod
    def from_records(cls, records: Iterable[RequestRecord], phase: str | None = "measure") -> RunFrame:
        """The frame of ``records`` (only those of ``phase``; None keeps all)."""
        b = FrameBuilder(phase)
        for r in records:
            b.add(r)
        return b.build(release=True)


class FrameBuilder:
    """Copies each finished record's measured fields into columns (``add``); ``build`` sorts them.

    Keeps no reference to a record. An inconsistent record (chunk token counts that do not match its
    chunks) is reported by ``build`` with the record's index, so the run that streams it is not cut short.
    Per-request columns stay in memory (a column the same in every row costs nothing); the per-chunk
    ones go to a :class:`ChunkStore`, which spills them to temporary files beyond :data:`SPILL_AT`
    entries: the summary removes the files (``summarize``), as does :meth:`close`. A record added after
    ``build(release=True)`` starts a new run.
    """

    def __init__(self, phase: str | None = "measure", *, spill_at: int | None = None,
                 block_chunks: int | None = None) -> None:
        self.phase = phase
        self.spill_at, self.block_chunks = spill_at, block_chunks
        self._index = array("q")
        self._sent = array("q")
        self._end = _Column("q")
        self._times = {k: _Column("q") for k in _TIMES}
        self._numbers = {k: _Column("d") for k in FLOAT_FIELDS}
        self._number_columns = tuple(self._numbers.values())
        self._reasoning = _Column("b")
        self._err_code = _Column("b")
        self._class_code = _Column("i")
        self._classes: dict[str | None, int] = {}
        self._sessions: dict[str, int] = {}  # session id -> its code (the "session" column), in order of arrival
        self._chunk_counts = array("q")
        self._token_sum = array("q")
        self._server_counts = _Column("q")
        self._chunks = ChunkStore(spill_at)
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
            tokens = chunk_tokens_of(r)
        except ValueError as exc:
            self._error = self._error or str(exc)
            tokens = [0] * len(r.chunk_ns)
        self._index.append(r.index)
        self._sent.append(r.sent_ns)
        self._end.append(_NONE if r.end_ns is None else r.end_ns)
        t = self._times
        # the phases: as the client set them (format 2.2), else from the chunks (records of older formats)
        ph = (r.first_any_ns, r.reasoning_first_ns, r.reasoning_last_ns, r.tool_first_ns, r.tool_last_ns,
              r.content_last_ns) if r.first_any_ns is not None or not r.chunk_ns else phase_times(r)
        for k, v in (("first_token_ns", r.first_token_ns), ("first_chunk_ns", r.first_chunk_ns),
                     ("intended_ns", r.intended_ns), ("handoff_ns", r.handoff_ns), ("first_reasoning_ns", ph[1]),
                     ("first_any_ns", ph[0]), ("reasoning_last_ns", ph[2]), ("tool_first_ns", ph[3]),
                     ("tool_last_ns", ph[4]), ("content_last_ns", ph[5])):
            t[k].append(_NONE if v is None else v)
        usage, timing = r.usage, r.server_timing or {}
        trace = phases(r.http_trace)
        values = (r.input_tokens, r.max_tokens, r.input_tokens_client, r.input_tokens_server,
                  r.output_tokens_client, r.output_tokens_server, r.reasoning_tokens_client,
                  timing.get("queue_ns"), timing.get("prefill_ns"), timing.get("preemptions"),
                  timing.get("preempted_tokens"), _usage_int(usage, "total_tokens"),
                  _usage_int(usage, "completion_tokens_details", "reasoning_tokens"), _cache_read(r),
                  _usage_int(usage, "cache_creation_input_tokens"), _usage_int(usage, "prompt_cache_miss_tokens"),
                  *(trace[p] for p in HTTP_PHASES), r.tool_tokens_client,
                  STANDING_CODES["streamed" if ph[1] is not None else r.reasoning_standing], r.turn,
                  None if r.session_id is None else self._sessions.setdefault(r.session_id, len(self._sessions)))
        for col, v in zip(self._number_columns, values):
            col.append(_nan(v))
        reasoning = ph[1] is not None
        self._reasoning.append(reasoning)
        if reasoning or ph[3] is not None:  # chunks of reasoning or tool-call arguments alone (rare: no cost else)
            aside_ns, aside_tokens = aside_chunks(r, tokens)
            self._chunks.extend("aside_ns", aside_ns)
            self._chunks.extend("aside_tokens", aside_tokens)
        self._err_code.append(-1 if r.error_type is None else _ERROR_CODES[r.error_type])
        code = self._classes.setdefault(r.request_class, len(self._classes))
        self._class_code.append(code)
        self._chunk_counts.append(len(r.chunk_ns))
        self._token_sum.append(sum(tokens))
        self._chunks.extend("ns", r.chunk_ns)
        self._chunks.extend("tokens", tokens)
        server = r.server_token_ns or ()
        self._server_counts.append(len(server))
        if server:
            self._chunks.extend("server", server)

    def close(self) -> None:
        """Remove the spilled chunk files (a builder that will not be summarised)."""
        self._chunks.close()

    def build(self, *, release: bool = False) -> RunFrame:
        """The columns sorted by (submission, index); raises ValueError naming a bad record or no record.

        ``release``: hand the buffers over (the builder is empty afterwards, and a record added later
        starts a new run), so that the run's columns are not held twice.
        """
        frame = self._build()
        if release:
            self.__init__(self.phase, spill_at=self.spill_at, block_chunks=self.block_chunks)  # type: ignore[misc]
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
        end_abs = _sorted(self._end, np.int64, order)
        sent_abs = sent_abs[order]
        has_end = end_abs != _NONE
        t0 = int(sent_abs[0])
        t_end = int(end_abs[has_end].max()) if has_end.any() else int(sent_abs.max())
        times = {}
        for k, col in self._times.items():
            same, v = col.constant()
            if same:
                times[k] = np.broadcast_to(np.float64(math.nan if v == _NONE else float(v - t0)), (n,))
            else:
                a = col.array(np.int64)[order]
                times[k] = np.where(a == _NONE, np.nan, (a - t0).astype(np.float64))
        classes = np.empty(len(self._classes), dtype=object)
        for name, code in self._classes.items():
            classes[code] = name
        errors = np.empty(len(_ERRORS) + 1, dtype=object)
        errors[: len(_ERRORS)] = _ERRORS
        errors[-1] = None  # code -1
        counts = np.frombuffer(self._chunk_counts, dtype=np.int64)
        s_counts = self._server_counts.array(np.int64)
        c_starts = np.zeros(n, dtype=np.int64)
        np.cumsum(counts[:-1], out=c_starts[1:])
        s_starts = np.zeros(n, dtype=np.int64)
        np.cumsum(s_counts[:-1], out=s_starts[1:])
        numbers = {}
        for k, col in self._numbers.items():
            same, v = col.constant()
            numbers[k] = np.broadcast_to(np.float64(v), (n,)) if same else col.array(np.float64)[order]
        chunk_counts, index_sorted = counts[order], index[order]
        chunks = Chunks(self._chunks, t0, index_sorted, chunk_counts, c_starts[order], s_counts[order],
                        s_starts[order], self.block_chunks)
        return RunFrame(
            t0=t0, t_end=t_end, index=index_sorted,
            request_class=classes[_sorted(self._class_code, np.int32, order)],
            error=errors[_sorted(self._err_code, np.int8, order)],
            sent=sent_abs - t0, end=np.where(has_end, end_abs, t_end) - t0, has_end=has_end, times=times,
            numbers=numbers, reasoning_streamed=_sorted(self._reasoning, np.int8, order).astype(bool),
            chunk_counts=chunk_counts,
            chunk_token_sum=np.frombuffer(self._token_sum, dtype=np.int64)[order].astype(np.float64),
            server_token_counts=s_counts[order], chunks=chunks,
        )


def _sorted(col: _Column, dtype: Any, order: np.ndarray) -> np.ndarray:
    same, v = col.constant()
    return np.full(order.size, v, dtype=dtype) if same else col.array(dtype)[order]


_ERRORS: tuple[ErrorType, ...] = tuple(ErrorType)
_ERROR_CODES: dict[ErrorType, int] = {e: i for i, e in enumerate(_ERRORS)}
