"""The data contract: :class:`RequestSpec` in, :class:`RequestRecord` out (docs/architecture.md).

Workloads (§4.3) produce ``RequestSpec`` lists; the load generator (§4.2) turns each spec it
sends into exactly one ``RequestRecord`` (§4.2.6: failed requests included); metrics, procedures
and reports consume records. Records are stored as JSON Lines so that a report can be rebuilt
from disk without re-running anything.

All ``*_ns`` times are ``time.perf_counter_ns()`` readings (CLOCK_MONOTONIC on Linux, the clock
the simulator's ``time.monotonic_ns()`` server timestamps use, §4.7.1). They convert to wall-clock
ISO 8601 through the run's anchor (:class:`ClockAnchor`, §4.7.4).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, NamedTuple

__all__ = [
    "ClockAnchor",
    "ErrorType",
    "FAILURE_TYPES",
    "RequestRecord",
    "RequestSpec",
    "REASONING_SOURCES",
    "REASONING_STANDINGS",
    "PhaseTimes",
    "TTFT_RULE",
    "assign_phases",
    "drop_session_defaults",
    "phase_times",
    "prompt_key",
]

#: The rule used for ``first_token_ns`` (§5.1.3.1): the first chunk whose *content* holds a
#: non-whitespace character. Role-only, empty, whitespace-only, reasoning-only and metadata
#: chunks do not count. ``first_chunk_ns`` keeps the first chunk of any kind.
TTFT_RULE = "first-non-whitespace-content"


_PROMPT_HASH = re.compile(r"[0-9a-f]{16}")  # RequestSpec.prompt_hash: 16 hex digits


def prompt_key(h: str) -> int | None:
    """A prompt hash (:attr:`RequestSpec.prompt_hash`) as the 8-byte integer its 16 hex digits spell, for
    compact columns of hashes; None for a string that is not such a hash."""
    return int(h, 16) if _PROMPT_HASH.fullmatch(h) else None


class ErrorType(str, enum.Enum):
    """One error vocabulary for the whole project (§4.2.6, §4.8.1)."""

    TIMEOUT = "timeout"  # connect/read/total timeout expired
    CONNECT = "connect"  # connection refused / DNS / TLS handshake failed
    HTTP_4XX = "http_4xx"  # 4xx other than 429
    RATE_LIMITED = "rate_limited"  # 429
    HTTP_5XX = "http_5xx"
    PARSE = "parse"  # malformed JSON / undecodable bytes in a chunk or body
    PROTOCOL = "protocol"  # stream broken: no [DONE], wrong content type, reset mid-stream
    REFUSED = "refused"  # content filter, policy error, refusal field or declared text (refusals.py), §4.8.1
    CANCELLED = "cancelled"  # stopped by the harness at the end of a window: not an SUT failure

    def __str__(self) -> str:
        return self.value


#: Error types that count as failures of the SUT (everything but ``cancelled``).
FAILURE_TYPES = frozenset(e for e in ErrorType if e is not ErrorType.CANCELLED)


#: Version of the record format (``RequestRecord`` and records.jsonl), stored in each ``run.json``.
#: MAJOR.MINOR: a minor version only adds optional fields, so a reader accepts every file of its
#: major version (missing fields take their defaults, unknown ones are ignored). Files written
#: before the version was recorded are format 1.0.
#: 1.1: optional ``inflight_at_send``, ``oldest_outstanding_ns`` (§4.2.5 evidence).
#: 1.2: optional ``http_trace`` (``--llm-http-trace``: HTTP lifecycle times, httptrace.py) and
#: ``reasoning_tokens_client`` (client count of the streamed reasoning tokens).
#: 1.3: optional ``prompt_hash`` (which prompts were warm-up vs measured, §4.5.1) and
#: ``token_count_method`` (how per-chunk counts were obtained, §4.4).
#: 2.0: ``sent_ns`` is T_submit as App. B.1.1 defines it, the moment the last byte of the request
#: body was written (after any connection set-up); it was the hand-over to the transport before,
#: which is now ``queued_ns``. TTFT and E2E start at ``sent_ns``, so 1.x and 2.x latencies differ by
#: the connection set-up and are not compared (the regression gate keys on the major version).
#: 2.1: optional ``chunk_usage_tokens`` (the server's cumulative output count on every chunk, §4.4).
#: 2.2: optional phase fields (issue 49, reasoning models): ``chunk_tool`` (tool-call arguments per chunk),
#: ``tool_calls``, ``first_any_ns`` (the ttfa point), ``reasoning_first_ns``/``reasoning_last_ns``,
#: ``tool_first_ns``/``tool_last_ns``, ``content_last_ns``, ``tool_tokens_client``, ``reasoning_source``.
#: 2.3: optional ``session_id`` and ``turn`` (issue 50, multi-turn sessions: which conversation a request
#: belongs to and its 1-based turn index; None outside a session run).
RECORDS_FORMAT = "2.3"

#: Where a record's reasoning came from (``RequestRecord.reasoning_source``): a reasoning field of the
#: stream (``reasoning_content``/``reasoning`` on chat deltas, ``choices[0].reasoning_content`` on
#: completions) or ``<think>...</think>`` inside the content, split off by the client when the user says
#: the model writes it so (``--llm-think-tags``).
REASONING_SOURCES = ("field", "tags")

#: Standing of a request's reasoning (:attr:`RequestRecord.reasoning_standing`, issue 49): ``streamed``
#: (reasoning fragments arrived), ``hidden`` (the server counts reasoning tokens, none arrived),
#: ``undetermined`` (no reasoning count from the server and its output count far exceeds the tokens seen:
#: hidden reasoning can be neither shown nor excluded), ``none``.
REASONING_STANDINGS = ("streamed", "hidden", "undetermined", "none")

#: ``undetermined`` when the server's completion_tokens exceed the visible tokens by more than this factor
#: and by more than :data:`UNSEEN_MIN_TOKENS` (tokenizer differences stay below both).
UNSEEN_FACTOR = 1.5
UNSEEN_MIN_TOKENS = 16


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request to send, as a seeded workload generator produced it (§4.3, App. A).

    ``prompt_text`` is always present (chat renders it as the user message); ``prompt_ids`` are
    the same prompt as reference-tokenizer ids, sent to the completions endpoint when the server
    accepts token-id prompts. ``system_prompt`` is the shared prefix of Conversation (A.3).
    ``input_tokens`` is the intended input length in reference-tokenizer tokens, system prompt
    included.
    """

    index: int
    workload: str
    input_tokens: int
    max_tokens: int
    prompt_text: str
    prompt_ids: tuple[int, ...] | None = None
    system_prompt: str | None = None
    request_class: str | None = None
    prefix_id: str | None = None
    prefix_tokens: int = 0
    min_tokens: int | None = None
    ignore_eos: bool = False
    temperature: float = 0.0
    stop: tuple[str, ...] | None = None
    #: further request-body fields the workload asks for, sent as given (``reasoning_effort``, a reasoning
    #: model's ``chat_template_kwargs``; issue 49), in key order
    request_fields: tuple[tuple[str, Any], ...] = ()
    #: a multi-turn session's earlier messages, (role, content) in order, sent between the system prompt and
    #: ``prompt_text`` (workloads/sessions.py; issue 50); empty: a single-turn request
    history: tuple[tuple[str, str], ...] = ()
    session_id: str | None = None  # the session (conversation) this turn belongs to
    turn: int | None = None  # its 1-based turn index within the session
    #: request headers of this request alone (a session's sticky-routing header), added to the client's
    headers: tuple[tuple[str, str], ...] = ()
    #: :attr:`prompt_hash` once computed (not a field of the workload: never serialised or compared)
    _prompt_hash: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def prompt_hash(self) -> str:
        """A short SHA-256 of what is sent as the prompt (system prompt + text or token ids).

        Two specs with the same hash send the same prompt; the records carry it so a run can show
        that warm-up and measured prompts are disjoint (§4.5.1) and that measured prompts do not
        repeat unless the workload defines repetition. Computed once per spec: the warm-up's check
        hashes the measured specs before the run, so a record made at the send finds it (for a
        2,000-token-id prompt the hash costs ~0.2 ms, issue 38).
        """
        h = self._prompt_hash
        if h is None:
            sha = hashlib.sha256()
            sha.update((self.system_prompt or "").encode("utf-8"))
            sha.update(b"\x00")
            for role, content in self.history:  # none outside a session: single-turn hashes as before
                sha.update(f"{role}\x00{content}\x00".encode("utf-8"))
            if self.prompt_ids is not None:
                sha.update(",".join(map(str, self.prompt_ids)).encode("ascii"))
            else:
                sha.update(self.prompt_text.encode("utf-8"))
            h = sha.hexdigest()[:16]
            object.__setattr__(self, "_prompt_hash", h)
        return h

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        del d["_prompt_hash"]  # a cache, not the workload
        if self.prompt_ids is not None:
            d["prompt_ids"] = list(self.prompt_ids)
        if self.stop is not None:
            d["stop"] = list(self.stop)
        if self.request_fields:
            d["request_fields"] = dict(self.request_fields)
        else:
            del d["request_fields"]  # a workload without any is stored as before
        drop_session_defaults(d)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RequestSpec:
        d = dict(d)
        if d.get("prompt_ids") is not None:
            d["prompt_ids"] = tuple(d["prompt_ids"])
        if d.get("stop") is not None:
            d["stop"] = tuple(d["stop"])
        if d.get("request_fields"):
            d["request_fields"] = tuple(sorted(d["request_fields"].items()))
        for key in ("history", "headers"):
            if d.get(key):
                d[key] = tuple(tuple(x) for x in d[key])
        return cls(**d)


#: the session fields of :class:`RequestSpec` and their defaults: left out of a stored spec when they hold
#: them, so that a single-turn workload's request file (and its sequence hash) is as before (issue 50)
_SESSION_DEFAULTS: dict[str, Any] = {"history": (), "session_id": None, "turn": None, "headers": ()}


def drop_session_defaults(d: dict[str, Any]) -> None:
    """Remove a spec dict's session fields that hold their defaults; the others become JSON lists."""
    for key, default in _SESSION_DEFAULTS.items():
        if key not in d:
            continue
        v = d[key]
        if v == default:
            del d[key]
        elif isinstance(v, tuple):
            d[key] = [list(x) for x in v]


@dataclass(slots=True)
class RequestRecord:
    """Everything measured about one request sent (docs/architecture.md "The record is the contract").

    Chunks are stored as parallel lists (one entry per SSE ``data:`` event that carried a
    choice delta), which keeps a long run compact and converts to numpy arrays directly.
    ``chunk_tokens`` is filled after the stream ends by tokenizing the joined output once and
    giving each token to the chunk that holds its first character (§4.6.3, App. B.1.1).
    """

    # --- the spec it came from -------------------------------------------------------------
    index: int
    workload: str
    spec_input_tokens: int
    max_tokens: int
    request_class: str | None = None
    prefix_id: str | None = None
    phase: str = "measure"  # "measure" | "warmup" | "probe"
    prompt_hash: str | None = None  # RequestSpec.prompt_hash (format 1.1)
    # --- times (perf_counter_ns) -----------------------------------------------------------
    intended_ns: int | None = None  # open loop: the scheduled send time (§4.2.3)
    sent_ns: int = 0  # T_submit: last request body byte written (App. B.1.1); see RECORDS_FORMAT 2.0
    queued_ns: int | None = None  # when the request was handed to the transport (before connecting)
    first_chunk_ns: int | None = None  # first SSE data event of any kind
    first_token_ns: int | None = None  # first content token by TTFT_RULE (§5.1.3.1)
    end_ns: int | None = None  # last byte / [DONE] / error
    ttft_rule: str = TTFT_RULE
    # --- chunks -----------------------------------------------------------------------------
    chunk_ns: list[int] = field(default_factory=list)
    chunk_text: list[str] = field(default_factory=list)
    chunk_reasoning: list[str] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    # usage.completion_tokens carried by each chunk (cumulative; vLLM continuous_usage_stats):
    # empty unless the server streams it on every chunk (optional: absent before format 2.1)
    chunk_usage_tokens: list[int] = field(default_factory=list)
    # tool-call arguments each chunk carried (``tool_calls[].function.arguments``): empty unless a tool call
    # streamed, then aligned with chunk_text (format 2.2)
    chunk_tool: list[str] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] | None = None  # assembled: index, id, name, arguments (format 2.2)
    # --- phases (issue 49; format 2.2): first/last arrival of each phase's non-whitespace fragments ----
    first_any_ns: int | None = None  # first non-whitespace fragment of any kind (ttfa; role-only excluded)
    reasoning_first_ns: int | None = None
    reasoning_last_ns: int | None = None
    tool_first_ns: int | None = None
    tool_last_ns: int | None = None
    content_last_ns: int | None = None  # the first is first_token_ns (TTFT_RULE)
    reasoning_source: str | None = None  # REASONING_SOURCES, None: no reasoning text arrived (set by the reader)
    # --- token counts (§4.4.2) ------------------------------------------------------------
    input_tokens_client: int | None = None
    output_tokens_client: int | None = None
    input_tokens_server: int | None = None  # usage.prompt_tokens
    output_tokens_server: int | None = None  # usage.completion_tokens
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
    tokenizer: str | None = None  # name of the tokenizer behind the *_client counts
    token_count_method: str | None = None  # how chunk_tokens were counted (tokencount.py; format 1.1)
    reasoning_tokens_client: int | None = None  # reasoning part of output_tokens_client, when streamed
    tool_tokens_client: int | None = None  # tool-call argument part of output_tokens_client (format 2.2)
    # --- server-side information -----------------------------------------------------------
    usage: dict[str, Any] | None = None
    server_token_ns: list[int] | None = None  # per-token emit times, CLOCK_MONOTONIC (§4.6.3 C)
    server_timing: dict[str, Any] | None = None  # queue_ns, prefill_ns, preemptions, ...
    http_trace: dict[str, Any] | None = None  # opt-in HTTP lifecycle times (httptrace.HttpTraceData)
    finish_reason: str | None = None
    refusal: str | None = None  # OpenAI ``refusal`` text streamed instead of content (refusals.py; optional)
    # --- outcome ------------------------------------------------------------------------------
    status: int | None = None  # HTTP status, None when no response arrived
    error_type: ErrorType | None = None
    error_message: str | None = None
    # --- provenance ----------------------------------------------------------------------------
    shard: int | None = None  # load-generator shard that sent it (shards/); None: unsharded run
    # load generator state when this request was handed to the transport (§4.2.5 isolation
    # evidence; optional: absent in records written before records format 1.1)
    inflight_at_send: int | None = None  # requests outstanding, this one excluded
    oldest_outstanding_ns: int | None = None  # age of the oldest outstanding response (0 when none)
    # multi-turn sessions (issue 50; format 2.3): the session and the 1-based turn; None outside a session run
    session_id: str | None = None
    turn: int | None = None

    @property
    def ok(self) -> bool:
        """True when the request completed without error (refusals are errors, §4.8.1)."""
        return self.error_type is None

    @property
    def failed(self) -> bool:
        """True when the request failed in a way attributable to the SUT (not ``cancelled``)."""
        return self.error_type is not None and self.error_type in FAILURE_TYPES

    @property
    def handoff_ns(self) -> int:
        """When the client handed the request to its transport: ``queued_ns``, or ``sent_ns`` in
        records of format 1.x (where it had that meaning). Send lag is measured to this time."""
        return self.queued_ns if self.queued_ns is not None else self.sent_ns

    @property
    def output_text(self) -> str:
        return "".join(self.chunk_text)

    @property
    def reasoning_tokens_server(self) -> int | None:
        """``usage.completion_tokens_details.reasoning_tokens`` when the server sent it."""
        details = (self.usage or {}).get("completion_tokens_details")
        v = details.get("reasoning_tokens") if isinstance(details, dict) else None
        return v if type(v) is int else None

    @property
    def reasoning_tokens(self) -> int | None:
        """Reasoning tokens: the server's count where sent, else the reference tokenizer's of the streamed
        reasoning (:attr:`reasoning_token_method` names which, §4.4.2); None when neither exists."""
        server = self.reasoning_tokens_server
        return server if server is not None else self.reasoning_tokens_client

    @property
    def reasoning_token_method(self) -> str | None:
        """How :attr:`reasoning_tokens` was counted: ``server usage`` or ``client tokenizer <name>``."""
        if self.reasoning_tokens_server is not None:
            return "server usage (completion_tokens_details.reasoning_tokens)"
        if self.reasoning_tokens_client is not None:
            return f"client tokenizer {self.tokenizer}"
        return None

    @property
    def reasoning_standing(self) -> str:
        """Whether this request's reasoning was seen (:data:`REASONING_STANDINGS`): ``hidden`` when the
        server counts reasoning tokens and no reasoning fragment arrived; ``undetermined`` when it sends no
        such count but its completion_tokens far exceed the tokens seen (:data:`UNSEEN_FACTOR`)."""
        if self.reasoning_first_ns is not None:
            return "streamed"
        server = self.reasoning_tokens_server
        if server is not None:
            return "hidden" if server > 0 else "none"
        out, seen = self.output_tokens_server, self.output_tokens_client
        if out is not None and seen is not None and out > UNSEEN_FACTOR * seen and out - seen > UNSEEN_MIN_TOKENS:
            return "undetermined"
        return "none"

    @property
    def output_tokens(self) -> int | None:
        """Output length: the server's count when reported, else the client's (§4.4.2)."""
        if self.output_tokens_server is not None:
            return self.output_tokens_server
        return self.output_tokens_client

    @property
    def input_tokens(self) -> int:
        """Input length: server count, else client count, else the spec's intended length."""
        for v in (self.input_tokens_server, self.input_tokens_client):
            if v is not None:
                return v
        return self.spec_input_tokens

    @classmethod
    def from_spec(cls, spec: RequestSpec, *, phase: str = "measure") -> RequestRecord:
        return cls(
            index=spec.index,
            workload=spec.workload,
            spec_input_tokens=spec.input_tokens,
            max_tokens=spec.max_tokens,
            request_class=spec.request_class,
            prefix_id=spec.prefix_id,
            phase=phase,
            prompt_hash=spec.prompt_hash,
        )

    def to_json(self, *, keep_text: bool = True) -> dict[str, Any]:
        """A JSON-ready dict. ``keep_text=False`` blanks chunk text (records are data, §7)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["error_type"] = self.error_type.value if self.error_type is not None else None
        if not keep_text:
            d["chunk_text"] = ["" for _ in self.chunk_text]
            d["chunk_reasoning"] = ["" for _ in self.chunk_reasoning]
            d["chunk_tool"] = ["" for _ in self.chunk_tool]
            if self.tool_calls:
                d["tool_calls"] = [{**c, "arguments": ""} for c in self.tool_calls]
            d["refusal"] = "" if self.refusal else None
        return d

    def dumps(self, *, keep_text: bool = True) -> str:
        return json.dumps(self.to_json(keep_text=keep_text), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RequestRecord:
        d = dict(d)
        if d.get("error_type") is not None:
            d["error_type"] = ErrorType(d["error_type"])
        names = cls.__dataclass_fields__
        # interned names match the 40-odd parameters by identity: twice as fast for a run read back
        return cls(**{sys.intern(k): v for k, v in d.items() if k in names})


class PhaseTimes(NamedTuple):
    """The first and last arrival of each phase's non-whitespace fragments (ns; None: the phase is absent)
    and ``first_any`` (ttfa's point: the first of them all, role-only and empty chunks excluded)."""

    first_any: int | None
    reasoning_first: int | None
    reasoning_last: int | None
    tool_first: int | None
    tool_last: int | None
    content_last: int | None


def _first_last(ns: list[int], parts: list[str]) -> tuple[int | None, int | None]:
    """Arrival of the first and the last chunk whose ``parts`` entry has a non-whitespace character."""
    first = next((t for t, p in zip(ns, parts) if p and not p.isspace()), None)
    if first is None:
        return None, None
    last = next(ns[i] for i in range(min(len(ns), len(parts)) - 1, -1, -1) if parts[i] and not parts[i].isspace())
    return first, last


def phase_times(rec: RequestRecord, reasoning: bool | None = None) -> PhaseTimes:
    """Each phase's first and last arrival, from the record's chunks (issue 49). ``reasoning``: whether any
    reasoning text arrived, when the caller knows (the client does: ``reasoning_source``); None looks. Without
    reasoning or a tool call it reads the content from its end back to its last fragment only (a few chunks)."""
    ns, texts = rec.chunk_ns, rec.chunk_text
    content_last = None
    if rec.first_token_ns is not None:
        content_last = next(
            (ns[i] for i in range(min(len(ns), len(texts)) - 1, -1, -1) if texts[i] and not texts[i].isspace()),
            rec.first_token_ns)
    first = rec.first_token_ns
    r_first = r_last = t_first = t_last = None
    if any(rec.chunk_reasoning) if reasoning is None else reasoning:
        r_first, r_last = _first_last(ns, rec.chunk_reasoning)
        if r_first is not None:
            first = r_first if first is None else min(first, r_first)
    if rec.chunk_tool and any(rec.chunk_tool):
        t_first, t_last = _first_last(ns, rec.chunk_tool)
        if t_first is not None:
            first = t_first if first is None else min(first, t_first)
    return PhaseTimes(first, r_first, r_last, t_first, t_last, content_last)


def assign_phases(rec: RequestRecord) -> None:
    """:func:`phase_times` into the record's phase fields (records format 2.2), once its response is read.
    The reader marks a record that received reasoning text (``reasoning_source``), so a record without any
    is not scanned for it; ``reasoning_source`` stays only where a non-whitespace fragment arrived."""
    tool = rec.chunk_tool
    if tool and len(tool) < len(rec.chunk_text):  # a stream that broke off after a tool-call delta
        tool.extend([""] * (len(rec.chunk_text) - len(tool)))
    p = phase_times(rec, rec.reasoning_source is not None)
    rec.first_any_ns, rec.reasoning_first_ns, rec.reasoning_last_ns = p.first_any, p.reasoning_first, p.reasoning_last
    rec.tool_first_ns, rec.tool_last_ns, rec.content_last_ns = p.tool_first, p.tool_last, p.content_last
    if p.reasoning_first is None:
        rec.reasoning_source = None


@dataclass(frozen=True, slots=True)
class ClockAnchor:
    """Pairs one ``perf_counter_ns`` reading with the wall clock, to print ISO 8601 (§4.7.4)."""

    perf_ns: int
    unix_ns: int

    @classmethod
    def now(cls) -> ClockAnchor:
        return cls(perf_ns=time.perf_counter_ns(), unix_ns=time.time_ns())

    def unix_ns_at(self, perf_ns: int) -> int:
        return self.unix_ns + (perf_ns - self.perf_ns)

    def iso(self, perf_ns: int) -> str:
        """ISO 8601 UTC with milliseconds, e.g. ``2026-11-22T06:52:18.123Z`` (§4.7.4)."""
        dt = datetime.fromtimestamp(self.unix_ns_at(perf_ns) / 1e9, tz=timezone.utc)
        return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"
