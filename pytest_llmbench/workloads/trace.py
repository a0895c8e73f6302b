"""Production traces replayed (issue 50): a Mooncake-style JSON Lines trace read, checked and turned into requests.

A trace gives, per request, its send time, its input and output lengths and the ids of its prompt's
blocks (``hash_ids``: one id per ``block_size`` tokens, equal ids = an equal block, so requests that
start with the same ids share a prefix). No text is needed: each block is synthesised as token ids of the
run's tokenizer (the server's vocabulary, §4.4), drawn from a generator seeded by the run's seed and the
block's id (§4.3.3), so equal ids give identical blocks, distinct ids distinct blocks (checked), and the
last block is cut to the request's ``input_length``. The same seed and file give the same requests byte
for byte (``request_sequence_sha256``).

Formats read (:data:`TRACE_FORMATS`):

* ``mooncake`` (Mooncake FAST'25 traces; AIPerf's ``mooncake_trace`` custom dataset): ``timestamp`` in
  ms (an integer or a float), ``input_length``, ``output_length``, ``hash_ids``; 512-token blocks. AIPerf's
  variants are read too: ``delay`` (ms after the previous request) instead of ``timestamp``, and no
  ``hash_ids`` (the request's blocks are its own, shared with no other). AIPerf's ``text_input`` and
  ``messages`` lines carry text instead of lengths: they are refused (named).
* ``bailian`` (Alibaba Bailian traces, and vLLM bench's ``timed-trace`` dataset with its defaults):
  ``timestamp`` in seconds, 16-token blocks; ``chat_id``/``parent_chat_id``/``turn``/``type`` are read and
  not used (each line is one self-contained request). A file whose first line has ``chat_id`` is read so
  when no format is given.

Every bad line is a :class:`TraceError` naming the file, the line and the field, raised while reading,
before any request is sent. Absolute timestamps are normalised to the first; ``speedup`` divides every
offset; ``limit`` keeps the first lines.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from ..common.records import RequestSpec
from ..common.tokenizer import Tokenizer, get_tokenizer
from .core import Workload, WorkloadDeclaration, finish_blocks
from .distributions import LengthDistribution, WorkloadError
from .standard import _output_control
from .text import text_factory

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "TRACE_FORMATS",
    "Trace",
    "TraceError",
    "TraceRequest",
    "checked_trace",
    "read_trace",
    "trace_warmup",
    "trace_workload",
    "using_traces",
]

#: Formats read, and their time unit in ns and block size in tokens.
TRACE_FORMATS: dict[str, tuple[int, int]] = {"mooncake": (1_000_000, 512), "bailian": (1_000_000_000, 16)}
DEFAULT_BLOCK_SIZE = TRACE_FORMATS["mooncake"][1]
TRACE_WORKLOAD = "trace"
_SPEC_BLOCK = 256  # requests made (and re-tokenized) at a time
_MEASURE, _OWN, _WARMUP = 0, 1, 2  # block namespaces: a hash id's, a request without hash ids, the warm-up's
_PER_REQUEST = 1 << 24  # key stride of a request's own blocks (up to 2^24 blocks each)
_CACHE_TOKENS = 4_000_000  # token ids of drawn blocks kept for reuse (16 MB as int32)


class TraceError(WorkloadError):
    """A trace that cannot be replayed; the message names the file, the line and the field."""


@dataclass(frozen=True)
class TraceRequest:
    """One line of a trace: its line number, its send offset (ns from the first request, speedup applied),
    its lengths and its blocks' ids (empty: blocks of its own)."""

    line: int
    offset_ns: int
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


@dataclass(frozen=True)
class Trace:
    """A trace read and checked: its requests in file order, and where they came from."""

    path: str
    sha256: str
    format: str
    block_size: int
    speedup: float
    limit: int | None
    lines: int  # non-empty lines in the file
    requests: tuple[TraceRequest, ...]

    def __len__(self) -> int:
        return len(self.requests)

    def offsets_ns(self) -> tuple[int, ...]:
        """Each request's send offset in ns (0 first, never decreasing)."""
        return tuple(r.offset_ns for r in self.requests)

    @property
    def duration_s(self) -> float:
        return self.requests[-1].offset_ns / 1e9 if self.requests else 0.0

    @property
    def mean_rate(self) -> float | None:
        """Requests per second over the trace's span (None: a single request or no span)."""
        d = self.duration_s
        return (len(self.requests) - 1) / d if d > 0 and len(self.requests) > 1 else None

    def describe(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "format": self.format, "block_size": self.block_size,
                "speedup": self.speedup, "limit": self.limit, "lines": self.lines, "requests": len(self.requests),
                "duration_s": round(self.duration_s, 6), "mean_rate": self.mean_rate}


# ---------------------------------------------------------------------- reading
def _int_field(obj: dict[str, Any], key: str, where: str, *, minimum: int) -> int:
    v = obj.get(key)
    if v is None:
        raise TraceError(f"{where}: field {key!r} is missing")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v != int(v):
        raise TraceError(f"{where}: field {key!r} must be an integer, got {v!r}")
    if v < minimum:
        raise TraceError(f"{where}: field {key!r} must be >= {minimum}, got {v!r}")
    return int(v)


def _time_field(obj: dict[str, Any], key: str, where: str) -> float:
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise TraceError(f"{where}: field {key!r} must be a number, got {v!r}")
    if v < 0:
        raise TraceError(f"{where}: field {key!r} must be >= 0, got {v!r}")
    return float(v)


def _hash_ids(obj: dict[str, Any], where: str) -> tuple[int, ...]:
    v = obj.get("hash_ids")
    if v is None:
        return ()
    if not isinstance(v, list) or not v:
        raise TraceError(f"{where}: field 'hash_ids' must be a non-empty list of integers, got {v!r}")
    for x in v:
        if isinstance(x, bool) or not isinstance(x, int) or x < 0:
            raise TraceError(f"{where}: field 'hash_ids' must hold integers >= 0, got {x!r}")
    return tuple(v)


def _detect(path: Path) -> str:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    first = json.loads(line)
                except ValueError:
                    return "mooncake"  # the reader names the line
                return "bailian" if isinstance(first, dict) and "chat_id" in first else "mooncake"
    return "mooncake"


#: the session's traces, read and checked before the first request (the plugin: ``--llm-trace`` at configure, a
#: marker's ``trace=`` at collection), by path as given, and the path of the session's own (``--llm-trace``):
#: what a procedure replays and a dry run plans, without reading the file again
_CHECKED: contextvars.ContextVar[tuple[Mapping[str, Trace], str | None]] = contextvars.ContextVar(
    "llmbench_checked_traces", default=(MappingProxyType({}), None))


@contextlib.contextmanager
def using_traces(traces: Mapping[str, Trace], session: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """Within the block (a procedure's run, the dry-run plan), :func:`checked_trace` finds ``traces``;
    ``session`` is the path of the session's trace (``--llm-trace``), the one a procedure replays by default."""
    token = _CHECKED.set((MappingProxyType(dict(traces)), None if session is None else str(session)))
    try:
        yield
    finally:
        _CHECKED.reset(token)


def checked_trace(path: str | os.PathLike[str] | None = None) -> Trace | None:
    """The trace at ``path`` (None: the session's ``--llm-trace``) as the session read and checked it
    (:func:`using_traces`), or None when it holds none there."""
    traces, session = _CHECKED.get()
    key = str(path) if path else session
    return None if key is None else traces.get(key)


def read_trace(path: str | os.PathLike[str], *, fmt: str | None = None, block_size: int | None = None,
               speedup: float = 1.0, limit: int | None = None) -> Trace:
    """Read and check a trace (see the module's docstring); raises :class:`TraceError` naming file, line, field.

    ``fmt``: one of :data:`TRACE_FORMATS` (None: ``bailian`` when the first line has ``chat_id``, else
    ``mooncake``); ``block_size``: tokens per hash id (None: the format's); ``speedup`` > 0 divides the
    offsets; ``limit``: the first ``limit`` requests only (the lines after them are not read)."""
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"trace file {str(p)!r} does not exist")
    if fmt is not None and fmt not in TRACE_FORMATS:
        raise TraceError(f"{p}: unknown trace format {fmt!r}; read: {', '.join(TRACE_FORMATS)}")
    if not (isinstance(speedup, (int, float)) and math.isfinite(speedup) and speedup > 0):
        raise TraceError(f"{p}: trace speedup must be a number > 0, got {speedup!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise TraceError(f"{p}: trace limit must be an integer >= 1, got {limit!r}")
    fmt = fmt or _detect(p)
    unit_ns, default_block = TRACE_FORMATS[fmt]
    bs = default_block if block_size is None else block_size
    if isinstance(bs, bool) or not isinstance(bs, int) or bs < 1:
        raise TraceError(f"{p}: trace block size must be an integer >= 1, got {bs!r}")
    digest = hashlib.sha256()
    rows: list[tuple[int, float, int, int, tuple[int, ...]]] = []
    lines = 0
    t_prev: float | None = None
    with p.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            digest.update(raw)
            if not raw.strip():
                continue
            lines += 1
            if limit is not None and len(rows) >= limit:
                continue  # hashed (the file's identity), not read
            where = f"{p}:{lineno}"
            try:
                obj = json.loads(raw)
            except ValueError as exc:
                raise TraceError(f"{where}: not a JSON object: {exc}") from None
            if not isinstance(obj, dict):
                raise TraceError(f"{where}: not a JSON object: {type(obj).__name__}")
            for text_field in ("text_input", "messages"):
                if text_field in obj:
                    raise TraceError(f"{where}: field {text_field!r}: a trace replayed here gives lengths "
                                     "(input_length, hash_ids), not text")
            t = _line_time(obj, where, t_prev, first=not rows)
            inp = _int_field(obj, "input_length", where, minimum=1)
            out = _int_field(obj, "output_length", where, minimum=1)
            ids = _hash_ids(obj, where)
            if ids and not (len(ids) - 1) * bs < inp <= len(ids) * bs:
                raise TraceError(f"{where}: field 'input_length' {inp} does not match {len(ids)} hash_ids of "
                                 f"{bs} tokens (must be in {(len(ids) - 1) * bs + 1}..{len(ids) * bs}; block size "
                                 "--llm-trace-block-size)")
            rows.append((lineno, t, inp, out, ids))
            t_prev = t
    if not rows:
        raise TraceError(f"trace file {str(p)!r} holds no request")
    t0 = rows[0][1]
    reqs = tuple(TraceRequest(line, int(round((t - t0) * unit_ns / speedup)), inp, out, ids)
                 for line, t, inp, out, ids in rows)
    return Trace(str(p), digest.hexdigest(), fmt, bs, float(speedup), limit, lines, reqs)


def _line_time(obj: dict[str, Any], where: str, t_prev: float | None, *, first: bool) -> float:
    """A line's time in the trace's unit: its ``timestamp`` (never before the previous line's), or the previous
    line's plus its ``delay`` (AIPerf), or 0 for a first line with neither."""
    has_t, has_d = "timestamp" in obj, "delay" in obj
    if has_t and has_d:
        raise TraceError(f"{where}: fields 'timestamp' and 'delay' cannot both be given")
    if has_t:
        t = _time_field(obj, "timestamp", where)
        if t_prev is not None and t < t_prev:
            raise TraceError(f"{where}: field 'timestamp' {obj['timestamp']!r} is before the previous line's "
                             f"({t_prev:g}): a trace is replayed in time order")
        return t
    if has_d:
        return (t_prev or 0.0) + _time_field(obj, "delay", where)
    if first:
        return 0.0
    raise TraceError(f"{where}: field 'timestamp' is missing (or 'delay')")


# ---------------------------------------------------------------------- prompts
class _Blocks:
    """Token blocks of ``block_size`` ids from the round-trip word pool (text re-encodes to the ids), one per
    (namespace, key): a generator seeded by (seed, namespace, key, attempt); a block equal to one already
    given to another key is drawn again (next attempt), so distinct keys give distinct blocks."""

    def __init__(self, pool: np.ndarray, block_size: int, seed: int, taken: set[bytes] | None = None) -> None:
        self.pool, self.bs, self.seed = pool, block_size, int(seed)
        self.cache: dict[tuple[int, int], np.ndarray] = {}
        self.cache_max = max(1, _CACHE_TOKENS // block_size)
        self.owner: dict[bytes, tuple[int, int]] = {}
        self.taken = taken or set()  # digests of blocks another workload holds (the warm-up avoids the trace's)

    def get(self, ns: int, key: int) -> np.ndarray:
        k = (ns, key)
        blk = self.cache.get(k)
        if blk is not None:
            return blk
        for attempt in range(1000):
            rng = np.random.default_rng([self.seed, ns, key, attempt])
            blk = self.pool[rng.integers(0, len(self.pool), size=self.bs)]
            d = hashlib.blake2b(blk.tobytes(), digest_size=16).digest()
            if self.owner.get(d, k) == k and d not in self.taken:  # its own block again after an eviction
                break
        else:  # pragma: no cover - a pool too small for this many distinct blocks
            raise TraceError(f"cannot draw {len(self.owner) + 1} distinct blocks of {self.bs} tokens")
        self.owner[d] = k
        if len(self.cache) >= self.cache_max:  # bounded: a block is drawn again (the same) when asked after eviction
            self.cache.clear()
        self.cache[k] = blk
        return blk

    def digests(self) -> set[bytes]:
        return set(self.owner)


def _keys(ns: int, index: int, r: TraceRequest, bs: int) -> tuple[int, Sequence[int]]:
    """The (namespace, keys) of request ``index``'s blocks: its hash ids, or blocks of its own (keyed by its
    index) for a line without them, or for a warm-up request (namespace ``ns``)."""
    if ns == _MEASURE and r.hash_ids:
        return _MEASURE, r.hash_ids
    return (_OWN if ns == _MEASURE else ns), [index * _PER_REQUEST + j for j in range(-(-r.input_length // bs))]


def _prompt(blocks: _Blocks, ns: int, keys: Sequence[int], length: int) -> np.ndarray:
    """The blocks of ``keys`` one after the other, the last cut so that the prompt is ``length`` ids."""
    parts = [blocks.get(ns, k) for k in keys]
    return (np.concatenate(parts) if len(parts) > 1 else parts[0])[:length]


def _shared_blocks(trace: Trace) -> list[int]:
    """Per request, how many of its leading blocks some other request starts with too."""
    counts: dict[int, int] = {}
    chains: list[list[int]] = []
    for r in trace.requests:
        h, chain = 0, []
        for x in r.hash_ids:
            h = hash((h, x))
            counts[h] = counts.get(h, 0) + 1
            chain.append(h)
        chains.append(chain)
    out = []
    for chain in chains:
        k = 0
        while k < len(chain) and counts[chain[k]] > 1:
            k += 1
        out.append(k)
    return out


def _specs(trace: Trace, blocks: _Blocks, tok: Tokenizer, force_output: bool,
           shared: Sequence[int]) -> Iterator[list[RequestSpec]]:
    """The trace's requests, ``_SPEC_BLOCK`` at a time: one request per line, in order (index = position);
    ``shared``: per request, its leading blocks another request starts with too (:func:`_shared_blocks`)."""
    bs = trace.block_size
    batch: list[RequestSpec] = []
    for i, r in enumerate(trace.requests):
        ids = _prompt(blocks, *_keys(_MEASURE, i, r, bs), r.input_length)
        k = shared[i]
        batch.append(_trace_spec(i, ids, tok, r.output_length, force_output,
                                 prefix_id=f"hash:{r.hash_ids[0]}" if k else None,
                                 prefix_tokens=min(k * bs, r.input_length)))
        if len(batch) == _SPEC_BLOCK:
            yield batch
            batch = []
    if batch:
        yield batch


def _trace_spec(index: int, ids: np.ndarray, tok: Tokenizer, output: int, force_output: bool, *,
                workload: str = TRACE_WORKLOAD, prefix_id: str | None = None, prefix_tokens: int = 0) -> RequestSpec:
    id_list = ids.tolist()
    return RequestSpec(index=index, workload=workload, input_tokens=len(id_list), max_tokens=int(output),
                       prompt_text=tok.decode(id_list), prompt_ids=tuple(id_list),
                       min_tokens=int(output) if force_output else None, ignore_eos=bool(force_output),
                       prefix_id=prefix_id, prefix_tokens=prefix_tokens)


def _pool(tok: Tokenizer) -> np.ndarray:
    return np.asarray(text_factory(tok).words, dtype=np.int32)


def trace_workload(trace: Trace, *, seed: int, tokenizer: Tokenizer | None = None, force_output: bool = True,
                   lazy: bool = True) -> Workload:
    """The trace's requests as a workload (custom, §4.3.1): prompts synthesised per block (module docstring),
    output held at ``output_length`` with ``min_tokens`` and ``ignore_eos`` (``force_output``). ``lazy``: drawn
    a block of requests at a time into a :class:`~.core.SpecStream` (never all in memory), ahead of the run."""
    tok = tokenizer if tokenizer is not None else get_tokenizer()
    blocks = _Blocks(_pool(tok), trace.block_size, seed)
    n = len(trace)
    tname = tok.declaration.name
    shared_blocks = _shared_blocks(trace)
    shared = sum(1 for k in shared_blocks if k)
    decl = WorkloadDeclaration(
        name=TRACE_WORKLOAD,
        description=f"Trace replay of {Path(trace.path).name} ({trace.format} format, {n} requests): lengths, "
                    "shared blocks and send times from the trace (custom, §4.3.1)",
        standard=False,
        seed=seed,
        request_count=n,
        input_length=LengthDistribution("empirical", {"values": [r.input_length for r in trace.requests]},
                                        tokenizer=tname, note="the trace's input_length, one per line"),
        output_length=LengthDistribution("empirical", {"values": [r.output_length for r in trace.requests]},
                                         tokenizer=tname, note="the trace's output_length, one per line"),
        output_control=_output_control(force_output),
        content={"domain": "synthetic (no semantic meaning): the trace carries no text",
                 "language": "none (random tokens)", "system_prompt": False, "system_prompt_tokens": 0,
                 "generation": f"one block of {trace.block_size} token ids per hash id, drawn from the "
                               f"{len(blocks.pool)} vocabulary tokens that re-encode to themselves, seeded by "
                               "(seed, hash id): equal ids give identical blocks, distinct ids distinct blocks; "
                               "the last block cut to input_length"},
        prefix_sharing={"fraction": shared / n if n else 0.0, "length": f"leading hash_ids blocks of "
                        f"{trace.block_size} tokens shared with another request", "prefixes": "from the trace"},
        tokenizer=tok.declaration.to_json(),
        dataset={"source": trace.path, "sha256": trace.sha256, "format": trace.format,
                 "version": f"sha256 {trace.sha256[:16]}",
                 "subset_selection": (f"the first {n} of {trace.lines} lines (--llm-trace-limit)"
                                      if trace.limit is not None and n < trace.lines else f"all {n} lines"),
                 "preprocessing": f"timestamps normalised to the first, divided by speedup {trace.speedup:g}"},
        params={"trace": trace.describe(), "force_output": force_output},
    )
    decl.notes.append("a replayed trace is a custom workload, and its send times a custom load (§4.3.1, §4.2.3)")
    return finish_blocks(_specs(trace, blocks, tok, force_output, shared_blocks), decl, tok, n=n, lazy=lazy)


def trace_warmup(trace: Trace, *, n: int, seed: int, trace_seed: int, tokenizer: Tokenizer | None = None,
                 force_output: bool = True) -> list[RequestSpec]:
    """``n`` warm-up requests for a trace (§4.5.1): lengths drawn from the trace's lines (its own seed stream),
    prompts made of blocks disjoint from every block of the trace's requests (as built with ``trace_seed``), so
    no warm-up prompt can fill a cache a measured request reads."""
    tok = tokenizer if tokenizer is not None else get_tokenizer()
    pool = _pool(tok)
    measured = _Blocks(pool, trace.block_size, trace_seed)
    bs = trace.block_size
    for i, r in enumerate(trace.requests):  # the trace's blocks, drawn in the workload's order (digests kept)
        ns, keys = _keys(_MEASURE, i, r, bs)
        for k in keys:
            measured.get(ns, k)
    blocks = _Blocks(pool, trace.block_size, seed, taken=measured.digests())
    rng = np.random.default_rng([int(seed), _WARMUP])
    picks = rng.integers(0, len(trace), size=max(n, 1))
    out = []
    for i, j in enumerate(picks.tolist()):
        r = trace.requests[j]
        out.append(_trace_spec(i, _prompt(blocks, *_keys(_WARMUP, i, r, bs), r.input_length), tok,
                               r.output_length, force_output, workload="trace-warmup"))
    return out
