"""What the steps after a measured run read of each of its records, tallied as the records finish (issue 46).

A run :func:`.run.measure` makes feeds every finished record to a :class:`RecordTally` (beside the summary's
columns), so that the load summary (error messages, §4.6.3 option C's error), the run facts (the record
audit of §4.2.6, streaming and chunking of §4.6, token counting of §4.4, the sends of §4.2.3–§4.2.5, the
prefix-cache state of §5.1.2), the measured sample's hygiene (§4.5.1: prompt hashes, cache hits, counting
methods) and the workload as run (§4.3) read no record again from disk. What it keeps grows with the run
only as compact columns: 8 bytes per measured prompt hash, 33 bytes per timed send, 8 per option-C sample;
the rest are counts and histograms of token lengths. A run that was not tallied (records given as a list,
a stored run) is tallied in one pass when first asked (:func:`tally_of`).
"""

from __future__ import annotations

import re
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np

from ..common.records import ErrorType, RequestRecord, prompt_key
from ..compliance import RecordAudit
from ..measure import tokencount

__all__ = [
    "EARLY_RECORDS",
    "CacheHits",
    "CachedTokens",
    "CountingTally",
    "FailureMessages",
    "PromptKeys",
    "RecordScan",
    "RecordTally",
    "SendTimes",
    "SentLengths",
    "tally_of",
]

EARLY_RECORDS = 50  # server per-token timestamps are looked for in this many first records

_T = TypeVar("_T", bound="_Fed")


class _Fed:
    """A tally fed one record at a time (``add``); :meth:`of` feeds it every record of an iterable."""

    def add(self, r: RequestRecord) -> None:  # pragma: no cover - each tally defines its own
        raise NotImplementedError

    @classmethod
    def of(cls: type[_T], records: Iterable[RequestRecord]) -> _T:
        t = cls()
        for r in records:
            t.add(r)
        return t


@dataclass
class CountingTally:
    """Per record, the counting option its output count came from (§4.4.2), one record at a time:
    successful records counted by the server's usage (A) or by the client (B)."""

    a: int = 0
    b: int = 0

    def add(self, r: RequestRecord) -> None:
        if r.ok:
            if r.output_tokens_server is not None:
                self.a += 1
            elif r.output_tokens_client is not None:
                self.b += 1

    def used(self) -> dict[str, int]:
        return {k: v for k, v in (("A", self.a), ("B", self.b)) if v}

    @classmethod
    def merged(cls, tallies: Iterable[CountingTally]) -> CountingTally:
        out = cls()
        for t in tallies:
            out.a += t.a
            out.b += t.b
        return out


@dataclass
class RecordScan:
    """What the run facts read of every record (streaming, chunking, the first send, early server stamps)."""

    n: int = 0
    streamed: int = 0  # records with timed chunks
    content_chunks: int = 0  # chunks that carried tokens
    one_token_chunks: int = 0
    first_sent_ns: int | None = None
    first_stamped: int | None = None  # position of the first record with server per-token timestamps
    counting: CountingTally = field(default_factory=CountingTally)

    def add(self, r: RequestRecord) -> None:
        if self.first_stamped is None and r.server_token_ns:
            self.first_stamped = self.n
        self.n += 1
        self.streamed += len(r.chunk_ns) > 0
        for t in r.chunk_tokens:
            if t:
                self.content_chunks += 1
                self.one_token_chunks += t == 1
        if r.sent_ns and (self.first_sent_ns is None or r.sent_ns < self.first_sent_ns):
            self.first_sent_ns = r.sent_ns
        self.counting.add(r)

    @property
    def early_server_stamps(self) -> bool:
        """Server per-token timestamps in the first :data:`EARLY_RECORDS` records."""
        return self.first_stamped is not None and self.first_stamped < EARLY_RECORDS

    @classmethod
    def merged(cls, scans: Iterable[RecordScan]) -> RecordScan:
        """The scan of several runs' records, run after run."""
        out, scans = cls(), list(scans)
        for s in scans:
            if out.first_stamped is None and s.first_stamped is not None:
                out.first_stamped = out.n + s.first_stamped
            out.n += s.n
            out.streamed += s.streamed
            out.content_chunks += s.content_chunks
            out.one_token_chunks += s.one_token_chunks
            if s.first_sent_ns is not None and (out.first_sent_ns is None or s.first_sent_ns < out.first_sent_ns):
                out.first_sent_ns = s.first_sent_ns
        out.counting = CountingTally.merged(s.counting for s in scans)
        return out


@dataclass
class SendTimes(_Fed):
    """One run's sent records (``intended_ns`` known, ``sent_ns`` set) as columns, 8 bytes per value:
    intended and hand-over times, and the load state at the hand-over (§4.2.5 evidence)."""

    intended: array[int] = field(default_factory=lambda: array("q"))
    handoff: array[int] = field(default_factory=lambda: array("q"))
    has_state: array[int] = field(default_factory=lambda: array("b"))  # 1: inflight_at_send recorded
    inflight: array[int] = field(default_factory=lambda: array("q"))  # inflight_at_send or 0
    oldest: array[int] = field(default_factory=lambda: array("q"))  # oldest_outstanding_ns or 0
    max_inflight: int | None = None  # over every record of the run, sent or not

    def add(self, r: RequestRecord) -> None:
        if r.inflight_at_send is not None and (self.max_inflight is None or r.inflight_at_send > self.max_inflight):
            self.max_inflight = r.inflight_at_send
        if r.intended_ns is None or not r.sent_ns:
            return
        self.intended.append(r.intended_ns)
        self.handoff.append(r.handoff_ns)
        self.has_state.append(r.inflight_at_send is not None)
        self.inflight.append(r.inflight_at_send or 0)
        self.oldest.append(r.oldest_outstanding_ns or 0)


    def column(self, name: str) -> np.ndarray:
        return np.frombuffer(getattr(self, name), dtype=np.int8 if name == "has_state" else np.int64)


@dataclass
class CacheHits:
    """The measured prefix-cache hit fraction from ``usage...cached_tokens`` (§4.5.1, §5.7), one record
    at a time.

    Over successful records whose server reported ``cached_tokens``: the share of prompt tokens
    served from cache, and the share of requests with more than half their prompt cached (a
    measured sample contaminated by warm-up or repetition shows up here). ``fraction`` is None
    when the server reports no cached counts.
    """

    n: int = 0
    prompt: int = 0
    cached: int = 0
    over_half: int = 0

    def add(self, r: RequestRecord) -> None:
        if not r.ok or r.cached_tokens is None:
            return
        self.n += 1
        self.prompt += r.input_tokens
        self.cached += min(r.cached_tokens or 0, r.input_tokens)
        self.over_half += r.input_tokens > 0 and (r.cached_tokens or 0) > r.input_tokens / 2

    def merge(self, other: CacheHits) -> None:
        """Add another set of records' hits (another run's)."""
        self.n, self.prompt = self.n + other.n, self.prompt + other.prompt
        self.cached, self.over_half = self.cached + other.cached, self.over_half + other.over_half

    def summary(self) -> dict[str, Any]:
        n = self.n
        return {
            "requests_reporting": n,
            "fraction": round(self.cached / self.prompt, 4) if n and self.prompt else None,
            "requests_over_half_cached": self.over_half,
            "share_over_half_cached": round(self.over_half / n, 4) if n else None,
        }


@dataclass
class CachedTokens(_Fed):
    """Records whose server reported cached prompt tokens (§5.1.2: prefix caching observed): how many
    records, how many with cached tokens, the most cached in one."""

    n: int = 0
    hits: int = 0
    most: int = 0

    def add(self, r: RequestRecord) -> None:
        self.n += 1
        if r.cached_tokens:
            self.hits, self.most = self.hits + 1, max(self.most, r.cached_tokens)


    @classmethod
    def merged(cls, tallies: Iterable[CachedTokens]) -> CachedTokens:
        out = cls()
        for t in tallies:
            out.n, out.hits, out.most = out.n + t.n, out.hits + t.hits, max(out.most, t.most)
        return out


class PromptKeys:
    """The records' prompt hashes (``RequestSpec.prompt_hash``), each kept as an 8-byte integer (a hash that
    is not 16 hex digits is kept as it is): how many a set of hashes holds (the warm-up's, §4.5.1), and how
    many repeat an earlier one."""

    def __init__(self) -> None:
        self.keys = array("Q")
        self.other: list[str] = []

    def add(self, r: RequestRecord) -> None:
        h = r.prompt_hash
        if h is None:
            return
        key = prompt_key(h)
        if key is not None:
            self.keys.append(key)
        else:
            self.other.append(h)

    @staticmethod
    def _all(tallies: Iterable[PromptKeys]) -> tuple[np.ndarray, list[str]]:
        ts = list(tallies)
        keys = [np.frombuffer(t.keys, dtype=np.uint64) for t in ts]
        return (np.concatenate(keys) if keys else np.empty(0, dtype=np.uint64)), [o for t in ts for o in t.other]

    @classmethod
    def seen_in(cls, tallies: Iterable[PromptKeys], hashes: set[str]) -> int:
        """Records (of all ``tallies``) whose prompt hash is one of ``hashes``."""
        keys, other = cls._all(tallies)
        ints = np.array([k for h in hashes if (k := prompt_key(h)) is not None], dtype=np.uint64)
        return int(np.isin(keys, ints).sum()) + sum(h in hashes for h in other)

    @classmethod
    def repeats(cls, tallies: Iterable[PromptKeys]) -> int:
        """Records (of all ``tallies``) whose prompt repeats an earlier one."""
        keys, other = cls._all(tallies)
        return int(keys.size) + len(other) - int(np.unique(keys).size) - len(set(other))


class SentLengths:
    """The input lengths (``spec_input_tokens``) and output caps (``max_tokens``) as sent, as histograms
    (length -> records): the workload as run (§4.3, ``sample.as_run``) in memory that does not grow with
    the run."""

    def __init__(self) -> None:
        self.inputs: Counter[int] = Counter()
        self.outputs: Counter[int] = Counter()

    def add(self, r: RequestRecord) -> None:
        self.inputs[r.spec_input_tokens] += 1
        self.outputs[r.max_tokens] += 1

    @property
    def n(self) -> int:
        return sum(self.inputs.values())

    @classmethod
    def merged(cls, tallies: Iterable[SentLengths]) -> SentLengths:
        out = cls()
        for t in tallies:
            out.inputs.update(t.inputs)
            out.outputs.update(t.outputs)
        return out


class FailureMessages:
    """The reasons failed requests gave (cancelled ones are not failures), one record at a time: messages
    that differ only in their numbers count as one (``run.error_messages``)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.example: dict[str, tuple[str, str]] = {}

    def add(self, r: RequestRecord) -> None:
        if not r.failed:
            return
        msg = " ".join(str(r.error_message or "").split())[:200] or "(no message)"
        if r.status is not None and r.status >= 400 and not msg.startswith(f"HTTP {r.status}"):
            msg = f"HTTP {r.status}: {msg}"
        key = re.sub(r"\d+", "#", msg)
        self.counts[key] += 1
        self.example.setdefault(key, (msg, r.error_type.value if r.error_type is not None else "error"))

    def top(self, n: int = 3) -> list[dict[str, Any]]:
        """The ``n`` most frequent: one example message each, its error type and count."""
        return [{"message": self.example[k][0], "type": self.example[k][1], "count": c}
                for k, c in self.counts.most_common(n)]


class RecordTally(_Fed):
    """Everything the steps after a run read of its records (see the module docstring), one record at a time."""

    def __init__(self) -> None:
        self.n = 0
        self.audit = RecordAudit()  # measured phase (§4.2.6)
        self.scan = RecordScan()
        self.sends = SendTimes()
        self.cached = CachedTokens()
        self.lengths = SentLengths()
        self.failures = FailureMessages()
        self.option_c = array("d")  # client first-token time − the server's first-token send time, ns
        self.pre_content = 0  # records with a non-content chunk before the first content token (§5.1.3.1)
        self.server_count_needed = False  # a record whose counts may be recounted in the server's tokens (§4.4)
        self.connection_failures = 0  # connect, protocol and timeout errors (a server that died, prompts.py)
        # the measured sample's hygiene (§4.4, §4.5.1, §5.7): measured phase only
        self.hits = CacheHits()
        self.methods = tokencount.MethodTally()
        self.counting = CountingTally()
        self.prompts = PromptKeys()

    def add(self, r: RequestRecord) -> None:
        self.n += 1
        self.scan.add(r)
        self.sends.add(r)
        self.cached.add(r)
        self.lengths.add(r)
        self.failures.add(r)
        if r.ok and r.first_token_ns is not None and r.server_token_ns:
            self.option_c.append(r.first_token_ns - r.server_token_ns[0])
        if r.first_chunk_ns is not None and r.first_token_ns is not None and r.first_chunk_ns < r.first_token_ns:
            self.pre_content += 1
        if not self.server_count_needed and tokencount.needs_server_count(r):
            self.server_count_needed = True
        if r.error_type in (ErrorType.CONNECT, ErrorType.PROTOCOL, ErrorType.TIMEOUT):
            self.connection_failures += 1
        if r.phase == "measure":
            self.audit.add(r)
            self.hits.add(r)
            self.methods.add(r)
            self.counting.add(r)
            self.prompts.add(r)


    def option_c_ns(self) -> np.ndarray:
        return np.frombuffer(self.option_c, dtype=np.float64)


class TalliedRun(Protocol):
    """A measured run as the tallies see it (``run.Measured``): its records and the tally fed as they finished."""

    records: Iterable[RequestRecord]
    tally: RecordTally | None


def tally_of(m: TalliedRun) -> RecordTally:
    """The run's :class:`RecordTally`: the one its records were fed to as they finished, else one pass over
    them now (kept on the run)."""
    t = m.tally
    if t is None:
        t = RecordTally.of(m.records)
        m.tally = t
    return t


def tallies(measured: Iterable[TalliedRun]) -> Iterator[RecordTally]:
    for m in measured:
        yield tally_of(m)
