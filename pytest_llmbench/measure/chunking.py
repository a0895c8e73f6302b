"""Which §4.6.3 option a run's ITL is measured with, decided per run by App. B.2.1.

App. B.2.1: first characterise the delivery pattern (tokens per chunk); when single-token chunks
dominate (> 90 %) measure directly; when multi-token chunks are common prefer server timestamps;
else use chunk timing (option A, reported as "Time Between Chunks", §4.6.3) and document it.

The decision, in order:

1. **C** when every successful multi-token record carries server per-token timestamps
   (``server_token_ns``): §4.6.3 "Option C is RECOMMENDED when available", and the timestamps do
   not depend on how tokens were packed into chunks (the embedded simulator sends them).
2. The delivery pattern needs per-chunk counts in the server's tokens (measure/tokencount.py).
   When any successful record's counts are the reference tokenizer's, the pattern is unknown
   (cl100k splits a server token into 0, 1 or 3 "tokens"): **A**.
3. **B** (direct) when more than 90 % of the content chunks carry exactly one server token; the
   tokens of the remaining multi-token chunks get their chunk's arrival time (option B's rule) and
   are counted in the evidence (``tokens_at_chunk_time``).
4. Else **A**: ITL is not measurable on this server; the gaps between chunks are reported as
   ``tbc`` (Time Between Chunks) with the chunk-size distribution (``chunk_size``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from ..common.records import RequestRecord
from .tokencount import EXACT_METHODS, REFERENCE, TOKENIZE_RECONCILED

__all__ = ["DIRECT_SHARE", "ITL_NOT_MEASURABLE", "ItlDecision", "ItlTally", "decide_itl"]

#: App. B.2.1 step 2: single-token chunks "dominate" above this share of content chunks.
DIRECT_SHARE = 0.9
#: What an ``itl.*`` SLO or gate rule says on a run measured under option A (§4.6.3, App. B.2.1).
ITL_NOT_MEASURABLE = "ITL is not measurable on this server: use tbc.*"
#: Counting methods whose per-chunk counts are the server's (tokenize-reconciled: aligned pieces
#: moved by at most the difference to the server's total).
_SERVER_COUNTED = EXACT_METHODS | {TOKENIZE_RECONCILED}


@dataclass(frozen=True)
class ItlDecision:
    """The §4.6.3 option of one run and the evidence App. B.2.1 decided it from."""

    option: str  # "A", "B" or "C"
    reason: str
    content_chunks: int  # content chunks of successful records
    single_token_chunks: int | None  # None: the counts are not the server's (pattern unknown)
    multi_token_chunks: int | None
    tokens_at_chunk_time: int | None  # tokens beyond the first of multi-token chunks (option B's zero gaps)
    records: int  # successful records with content
    records_counted_by_server: int
    server_timestamps: int  # successful records carrying server per-token timestamps
    #: with reference-tokenizer counts: the single-token share *in reference tokens* (evidence only,
    #: never the B.2.1 pattern: a server token is 0, 1 or several cl100k tokens)
    reference_single_token_share: float | None = None

    @property
    def single_token_share(self) -> float | None:
        if self.single_token_chunks is None or not self.content_chunks:
            return None
        return self.single_token_chunks / self.content_chunks

    @property
    def method(self) -> str:
        """The compliance name of the option (compliance.registry.ITL_METHODS)."""
        return {"A": "chunk", "B": "distributed", "C": "server"}[self.option]

    def to_json(self) -> dict[str, Any]:
        share = self.single_token_share
        return {**asdict(self), "single_token_share": None if share is None else round(share, 6),
                "method": self.method}

    def summary(self) -> str:
        """One line for the report: option, share and counts."""
        share = self.single_token_share
        ref = self.reference_single_token_share
        pattern = ((f"tokens per chunk unknown in server tokens ({ref:.1%} single-token in reference-tokenizer "
                    "counts)" if ref is not None else "delivery pattern unknown") if share is None else
                   f"{share:.1%} of {self.content_chunks} content chunks carry one server token")
        extra = (f"; {self.tokens_at_chunk_time} tokens of {self.multi_token_chunks} multi-token chunks at their "
                 "chunk's time" if self.option == "B" and self.multi_token_chunks else "")
        return f"option {self.option}: {self.reason} ({pattern}{extra}; App. B.2.1)"


@dataclass
class ItlTally:
    """App. B.2.1's counts over one run's successful records with content, added one record at a
    time (a long run is decided without keeping its records): what :meth:`decision` decides from."""

    records: int = 0
    records_counted_by_server: int = 0
    server_timestamps: int = 0
    multi_token_unstamped: int = 0  # records of >= 2 tokens without server per-token timestamps
    content_chunks: int = 0
    single_token_chunks: int = 0
    multi_token_chunks: int = 0
    tokens_at_chunk_time: int = 0

    def add(self, r: RequestRecord) -> None:
        if not r.ok:
            return
        sizes = [t for t in r.chunk_tokens if t > 0]
        if not sizes:
            return
        self.records += 1
        self.records_counted_by_server += (r.token_count_method or REFERENCE) in _SERVER_COUNTED
        self.server_timestamps += bool(r.server_token_ns)
        self.multi_token_unstamped += sum(r.chunk_tokens) >= 2 and not r.server_token_ns
        self.content_chunks += len(sizes)
        for t in sizes:
            if t == 1:
                self.single_token_chunks += 1
            else:
                self.multi_token_chunks += 1
                self.tokens_at_chunk_time += t - 1

    def decision(self) -> ItlDecision:
        """App. B.2.1 over the records added (see the module docstring)."""
        exact = self.records_counted_by_server == self.records
        single = self.single_token_chunks if exact else None
        common = dict(content_chunks=self.content_chunks, single_token_chunks=single,
                      multi_token_chunks=self.multi_token_chunks if exact else None,
                      tokens_at_chunk_time=self.tokens_at_chunk_time if exact else None, records=self.records,
                      records_counted_by_server=self.records_counted_by_server,
                      server_timestamps=self.server_timestamps)
        if self.server_timestamps and not self.multi_token_unstamped:
            return ItlDecision("C", "server per-token timestamps on every successful multi-token record", **common)
        if not exact:
            common["reference_single_token_share"] = round(self.single_token_chunks / self.content_chunks, 6) \
                if self.content_chunks else None
            return ItlDecision("A", f"{self.records - self.records_counted_by_server} of {self.records} records "
                                    "counted with the reference tokenizer: tokens per chunk unknown, so chunk timing",
                               **common)
        if not self.content_chunks:  # nothing streamed: no gap to measure either way; the direct rule is vacuous
            return ItlDecision("B", "no content chunks", **common)
        share = self.single_token_chunks / self.content_chunks
        if share > DIRECT_SHARE:
            return ItlDecision("B", f"single-token chunks dominate (> {DIRECT_SHARE:.0%}): direct per-token gaps",
                               **common)
        return ItlDecision("A", f"multi-token chunks common (single-token share <= {DIRECT_SHARE:.0%}) and no "
                                "server per-token timestamps: chunk timing", **common)


def decide_itl(records: Iterable[RequestRecord]) -> ItlDecision:
    """App. B.2.1 over one run's successful records (see the module docstring)."""
    tally = ItlTally()
    for r in records:
        tally.add(r)
    return tally.decision()
