"""Per-chunk output token counts in the server's own tokens (§4.4, §4.6.2, §4.6.3).

ITL, TPOT and chunk-size figures need the number of tokens in each streamed chunk. Counting the
chunk text with the reference tokenizer is wrong on every server whose tokenizer is another one
(0 tokens for a one-token chunk, 3 for another), so the count comes from the server when it can:

1. ``server-usage-per-chunk`` (exact): the server puts its running ``usage.completion_tokens``
   on every chunk (vLLM ``stream_options.continuous_usage_stats``, asked for by its adapter); a
   chunk's count is the step from the previous chunk's, whatever its text (byte-level tokens of
   an unfinished character stream as empty text, several tokens may share a chunk).
2. ``server-one-per-chunk`` (exact): ``usage.completion_tokens`` equals the number of
   content-bearing chunks, so each such chunk carried one token.
3. ``server-tokenize`` (exact) / ``server-tokenize-reconciled``: after the run, the server
   tokenizes the record's output once (llama.cpp ``POST /tokenize`` with ``with_pieces`` and
   ``add_special: false``); each piece goes to the chunk holding its first byte; when the pieces
   do not add up to ``usage.completion_tokens`` (a merge on re-tokenization, an end token without
   text) the difference is reconciled to the server's total and the method says so.
4. ``reference-tokenizer``: the declared fallback (the reference tokenizer, option B of §4.4).

Over gRPC (``client/transports/grpc.py``) every message carries the token ids it streams: its count is
their number, ``server-token-ids`` (exact), with nothing to count after the run.

Every record carries its method (``RequestRecord.token_count_method``); :func:`method_shares`
gives the share of records counted exactly for the report.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..common.records import RequestRecord

__all__ = [
    "EXACT_METHODS",
    "ONE_PER_CHUNK",
    "USAGE_PER_CHUNK",
    "REFERENCE",
    "TOKENIZE",
    "TOKENIZE_RECONCILED",
    "TOKEN_IDS",
    "align_pieces",
    "apply_chunk_usage",
    "apply_one_per_chunk",
    "apply_pieces",
    "method_shares",
    "needs_server_count",
    "piece_byte_lengths",
    "reconcile_to_total",
]

USAGE_PER_CHUNK = "server-usage-per-chunk"
ONE_PER_CHUNK = "server-one-per-chunk"
TOKENIZE = "server-tokenize"
TOKENIZE_RECONCILED = "server-tokenize-reconciled"
REFERENCE = "reference-tokenizer"
TOKEN_IDS = "server-token-ids"  # gRPC: the ids each message carries, counted
EXACT_METHODS = frozenset({USAGE_PER_CHUNK, ONE_PER_CHUNK, TOKENIZE, TOKEN_IDS})
SERVER_METHODS = EXACT_METHODS | {TOKENIZE_RECONCILED}


def _content_flags(rec: RequestRecord) -> list[bool]:
    """Per chunk: does it carry text, reasoning or tool-call arguments (issue 49)."""
    reasoning, tool = rec.chunk_reasoning, rec.chunk_tool
    flags = list(map(bool, rec.chunk_text))  # the common chunk: text alone (one C pass)
    for extra in (reasoning, tool):
        if len(extra) == len(flags) and any(extra):
            flags = [f or bool(x) for f, x in zip(flags, extra)]
    return flags


def apply_chunk_usage(rec: RequestRecord) -> bool:
    """Exact counts from the running ``usage.completion_tokens`` on every chunk: each chunk's count
    is the step from the one before. Not applied (False) unless every chunk carried one, the steps
    never go back, and the last equals the final usage total."""
    cum = rec.chunk_usage_tokens
    total = rec.output_tokens_server
    if total is None or not cum or len(cum) != len(rec.chunk_ns) or cum[-1] != total:
        return False
    counts, prev = [], 0
    for c in cum:
        if c < prev:
            return False
        counts.append(c - prev)
        prev = c
    rec.chunk_tokens = counts
    rec.token_count_method = USAGE_PER_CHUNK
    return True


def apply_one_per_chunk(rec: RequestRecord) -> bool:
    """Exact counts when the server's total equals the content-bearing chunks (one token each).

    A byte-level token that starts a multi-byte character streams as a chunk with empty text (vLLM
    holds the bytes until the character is complete): when the content-bearing chunks fall short of
    the total but *every* chunk, or every chunk after a leading empty one (chat's role chunk), makes
    up the total exactly, each of those chunks carried one token."""
    flags = _content_flags(rec)
    total = rec.output_tokens_server
    if total is None or not flags:
        return False
    if sum(flags) == total:
        counts = list(map(int, flags))
    elif len(flags) == total and sum(flags) < total:
        counts = [1] * total
    elif len(flags) == total + 1 and not flags[0] and sum(flags) < total:
        counts = [0] + [1] * total
    else:
        return False
    rec.chunk_tokens = counts
    rec.token_count_method = ONE_PER_CHUNK
    return True


def needs_server_count(rec: RequestRecord) -> bool:
    """A successful record whose counts are still the reference tokenizer's and whose server total is known."""
    return (rec.ok and rec.output_tokens_server is not None and bool(rec.chunk_text)
            and rec.token_count_method not in SERVER_METHODS)


def piece_byte_lengths(tokens: Sequence[Any]) -> list[int]:
    """UTF-8 byte length of each ``/tokenize`` piece (a string, or a list of byte values when the
    piece is not valid UTF-8 on its own)."""
    out = []
    for t in tokens:
        piece = t.get("piece") if isinstance(t, dict) else None
        if isinstance(piece, str):
            out.append(len(piece.encode("utf-8")))
        elif isinstance(piece, list):
            out.append(len(piece))
        else:
            raise ValueError(f"the server's tokenizer answered without pieces: {t!r} (with_pieces not supported?)")
    return out


def align_pieces(texts: Sequence[str], piece_bytes: Sequence[int]) -> list[int]:
    """Pieces per chunk: each piece to the chunk that holds its first byte (offsets in UTF-8)."""
    counts = [0] * len(texts)
    if not texts:
        return counts
    ends, acc = [], 0
    for t in texts:
        acc += len(t.encode("utf-8"))
        ends.append(acc)
    j, off = 0, 0
    for n in piece_bytes:
        while j < len(texts) - 1 and off >= ends[j]:
            j += 1
        counts[j] += 1
        off += n
    return counts


def reconcile_to_total(counts: list[int], flags: Sequence[bool], total: int) -> list[int]:
    """Make ``counts`` add up to the server's ``total``: missing tokens go to the last content
    chunk (an end token without text), extra ones come off the largest counts from the end."""
    counts = list(counts)
    diff = total - sum(counts)
    content = [i for i, f in enumerate(flags) if f] or list(range(len(counts)))
    if diff > 0 and counts:
        counts[content[-1]] += diff
    while diff < 0:
        i = max(reversed(range(len(counts))), key=lambda k: (counts[k] - (1 if flags[k] else 0), k))
        if counts[i] - (1 if flags[i] else 0) <= 0:  # never below one token for a content chunk
            i = max(range(len(counts)), key=lambda k: counts[k])
            if counts[i] == 0:
                break
        counts[i] -= 1
        diff += 1
    return counts


def apply_pieces(rec: RequestRecord, piece_bytes: Sequence[int]) -> None:
    """Counts from the server's pieces of the joined output, reconciled to ``usage`` when needed."""
    assert rec.output_tokens_server is not None
    reasoning = rec.chunk_reasoning if len(rec.chunk_reasoning) == len(rec.chunk_text) else [""] * len(rec.chunk_text)
    texts = [r + t for t, r in zip(rec.chunk_text, reasoning)]
    counts = align_pieces(texts, piece_bytes)
    if sum(counts) == rec.output_tokens_server:
        rec.token_count_method = TOKENIZE
    else:
        counts = reconcile_to_total(counts, _content_flags(rec), rec.output_tokens_server)
        rec.token_count_method = TOKENIZE_RECONCILED
    rec.chunk_tokens = counts


def method_shares(records: Iterable[RequestRecord]) -> dict[str, Any]:
    """Counting methods over successful records and the share counted exactly (§4.4, §4.6)."""
    tally = MethodTally()
    for r in records:
        tally.add(r)
    return tally.shares()


class MethodTally:
    """:func:`method_shares`, one record at a time."""

    def __init__(self) -> None:
        self.ok = 0
        self.by: dict[str, int] = {}

    def add(self, r: RequestRecord) -> None:
        if r.ok:
            self.ok += 1
            key = r.token_count_method or REFERENCE
            self.by[key] = self.by.get(key, 0) + 1

    def merge(self, other: MethodTally) -> None:
        """Add another set of records' methods (another run's)."""
        self.ok += other.ok
        for k, n in other.by.items():
            self.by[k] = self.by.get(k, 0) + n

    def shares(self) -> dict[str, Any]:
        exact = sum(n for k, n in self.by.items() if k in EXACT_METHODS)
        return {"methods": self.by, "exact_share": round(exact / self.ok, 4) if self.ok else None}
