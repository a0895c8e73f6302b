"""Methodology compliance per test (draft §2): unconditionally / conditionally / not compliant.

The verdict judges the *run* (the benchmark implementation, its configuration and report), not
the SUT's speed; the user's SLO verdict (slo.py) is a separate thing and never mixes with it.

* The registry holds the draft's items from the shipped ``data/requirements.yaml`` (the IDs are the
  contract; see shared/spec/requirements.md).
* ``data/applicability.yaml`` encodes the matrix of requirements.md §2: which items bind which test
  (5.1–5.10, 6), some only under a condition on the run.
* Each applicable item becomes a :class:`Check`: from the procedure (its own measurements), else
  from an evaluator registered here against :class:`RunFacts` (what any run knows), else from the
  tester's :class:`Declarations` (what a client cannot observe). Nothing is assumed: an item with
  no evidence is unmet ("needs tester declaration" / "no evaluator").
* :func:`evaluate_test` applies §2: any unmet MUST -> not compliant; all MUSTs met but a SHOULD
  unmet -> conditionally compliant; all met -> unconditionally compliant. MAY, PARAM and REPORT
  rows are shown but never change the verdict.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .records import ErrorType, RequestRecord

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "CONDITIONS",
    "Check",
    "ClockFacts",
    "ComplianceError",
    "ComplianceResult",
    "DECLARATION_FACTS",
    "Declarations",
    "DeclarationError",
    "LOAD_CAPABILITIES",
    "LoadFacts",
    "RecordAudit",
    "Requirement",
    "RunFacts",
    "STANDARD_WORKLOADS",
    "Status",
    "TESTS",
    "Verdict",
    "WarmupFacts",
    "applicable_items",
    "coverage",
    "evaluate_test",
    "procedure_items",
    "registry",
]

TESTS = ("5.1", "5.2", "5.3", "5.4", "5.5", "5.6", "5.7", "5.8", "5.9", "5.10", "6")
LEVELS = ("MUST", "SHOULD", "MAY", "PARAM", "REPORT")
VERDICT_LEVELS = ("MUST", "SHOULD")
STANDARD_WORKLOADS = ("synthetic-uniform", "synthetic-skewed", "conversation", "code-completion", "long-context")
#: Boundary names as settings.py/sut.py spell them (§4.1).
BOUNDARIES = ("model-engine", "gateway", "compound")
_BOUNDARY_ALIASES = {
    "model-engine": "model-engine", "model_engine": "model-engine", "engine": "model-engine",
    "gateway": "gateway", "application-gateway": "gateway", "application_gateway": "gateway",
    "compound": "compound", "compound-system": "compound", "compound_system": "compound",
}
PROTOCOLS = ("sse", "websocket", "grpc")
ITL_METHODS = ("chunk", "distributed", "server")  # §4.6.3 options A, B, C
#: Largest acceptable P99 send lag / closed-loop resubmit gap (requirements.md 4.2.4/4.2.5 checks).
LAG_LIMIT_S = 1e-3
#: Largest NTP offset for load generator and SUT on different hosts (§4.7.2).
NTP_LIMIT_S = 10e-3
WARMUP_MIN_REQUESTS = 100  # §4.5.1 (conservative reading: both minimums, requirements.md ambiguity 11)
WARMUP_MIN_OUTPUT_TOKENS = 10_000
PROBE_STABILITY = 0.10  # §4.5.2: consecutive probes vary by < 10 %
#: Capabilities a load generator declares in LoadFacts.capabilities (§4.2.3–§4.2.5):
#: absolute_schedule = open-loop sends scheduled against absolute times, never after responses;
#: async = asynchronous / multi-threaded implementation (§4.2.5-MUST-2).
LOAD_CAPABILITIES = ("open_loop", "closed_loop", "poisson", "uniform", "bursty", "absolute_schedule", "async")


class ComplianceError(ValueError):
    """Bad test id, unknown requirement id or inconsistent registry data."""


class DeclarationError(ValueError):
    """A declarations file or table that cannot be used (names the file and the key)."""


# ============================================================================================
# Registry
# ============================================================================================


@dataclass(frozen=True)
class Requirement:
    """One item of the draft (shared/spec/requirements.yaml)."""

    id: str
    level: str  # MUST | SHOULD | MAY | PARAM | REPORT
    section: str
    applies_to: str  # general | 5.1 .. 5.10 | 6
    summary: str
    check: str

    @property
    def in_verdict(self) -> bool:
        return self.level in VERDICT_LEVELS


@dataclass(frozen=True)
class _Row:
    items: tuple[str, ...]
    cells: dict[str, str | None]  # test -> None (always) | condition name
    note: str = ""


@dataclass(frozen=True)
class _Registry:
    items: dict[str, Requirement]
    rows: tuple[_Row, ...]

    def __getitem__(self, rid: str) -> Requirement:
        try:
            return self.items[rid]
        except KeyError:
            raise ComplianceError(f"unknown requirement id {rid!r} (see shared/spec/requirements.md)") from None

    def __contains__(self, rid: object) -> bool:
        return rid in self.items

    def __iter__(self) -> Iterator[Requirement]:
        return iter(self.items.values())

    def __len__(self) -> int:
        return len(self.items)


def _load_yaml(name: str) -> Any:
    return yaml.safe_load(resources.files("pytest_llmbench").joinpath("data", name).read_text(encoding="utf-8"))


@functools.cache
def registry() -> _Registry:
    """The draft's 325 items plus the applicability matrix, loaded once from package data."""
    raw = _load_yaml("requirements.yaml")
    items: dict[str, Requirement] = {}
    for d in raw:
        req = Requirement(id=str(d["id"]), level=str(d["level"]), section=str(d["section"]),
                          applies_to=str(d["applies_to"]), summary=str(d["summary"]), check=str(d["check"]))
        if req.id in items:
            raise ComplianceError(f"requirements.yaml: duplicate id {req.id}")
        if req.level not in LEVELS:
            raise ComplianceError(f"requirements.yaml: {req.id} has unknown level {req.level}")
        items[req.id] = req
    matrix = _load_yaml("applicability.yaml")
    tests = tuple(str(t) for t in matrix["tests"])
    if tests != TESTS:
        raise ComplianceError(f"applicability.yaml: tests {tests} != {TESTS}")
    rows = []
    for n, r in enumerate(matrix["rows"]):
        ids: list[str] = []
        for pat in r["items"]:
            pat = str(pat)
            if pat.startswith("@"):
                ids.extend(i.id for i in items.values() if i.applies_to == pat[1:])
            elif pat in items:
                ids.append(pat)
            else:
                raise ComplianceError(f"applicability.yaml row {n}: unknown requirement id {pat!r}")
        cells: dict[str, str | None] = {}
        for t in _tests_of(r.get("always", []), n):
            cells[t] = None
        for cond, ts in (r.get("when") or {}).items():
            if _condition(str(cond)) is None:
                raise ComplianceError(f"applicability.yaml row {n}: unknown condition {cond!r}")
            for t in _tests_of(ts, n):
                if t in cells:
                    raise ComplianceError(f"applicability.yaml row {n}: test {t} listed twice")
                cells[t] = str(cond)
        rows.append(_Row(tuple(ids), cells, str(r.get("note", ""))))
    reg = _Registry(items, tuple(rows))
    for rid in list(EVALUATORS) + list(DECLARATION_HOOKS):
        if rid not in items:
            raise ComplianceError(f"compliance.py registers {rid!r}, which is not a requirement id")
    return reg


def _tests_of(value: Any, n: int) -> list[str]:
    if value == "all":
        return list(TESTS)
    out = [str(v) for v in value]
    for t in out:
        if t not in TESTS:
            raise ComplianceError(f"applicability.yaml row {n}: unknown test {t!r}")
    return out


def _check_test_id(test_id: str) -> str:
    t = str(test_id).strip()
    if t.startswith("§"):
        t = t[1:]
    if t not in TESTS:
        raise ComplianceError(f"unknown test {test_id!r}; tests are {', '.join(TESTS)}")
    return t


def applicable_items(test_id: str) -> list[tuple[Requirement, str | None]]:
    """Every item that may bind ``test_id``, in draft order, with its condition (None = always)."""
    test_id = _check_test_id(test_id)
    reg = registry()
    cond: dict[str, str | None] = {}
    for req in reg:
        if req.applies_to == test_id:
            cond[req.id] = None
    for row in reg.rows:
        if test_id in row.cells:
            cell = row.cells[test_id]
            for rid in row.items:
                if rid not in cond:
                    cond[rid] = cell
                elif cell is None:  # "always" wins over a condition from another row
                    cond[rid] = None
    return [(req, cond[req.id]) for req in reg if req.id in cond]


# ============================================================================================
# Checks and results
# ============================================================================================


class Status(str, enum.Enum):
    """How one item came out. ``needs-declaration`` counts as unmet: nothing is assumed."""

    MET = "met"
    UNMET = "unmet"
    NEEDS_DECLARATION = "needs-declaration"
    NOT_APPLICABLE = "not-applicable"

    def __str__(self) -> str:
        return self.value


@dataclass
class Check:
    """The outcome of one requirement for one test: status, why, and the evidence behind it."""

    id: str
    status: Status
    reason: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # procedure | evaluator | declaration | none

    def __post_init__(self) -> None:
        self.status = Status(self.status)

    @property
    def holds(self) -> bool:
        return self.status is Status.MET

    @property
    def fails(self) -> bool:
        return self.status in (Status.UNMET, Status.NEEDS_DECLARATION)

    @classmethod
    def met(cls, id: str, reason: str = "", **evidence: Any) -> Check:
        return cls(id, Status.MET, reason, evidence)

    @classmethod
    def unmet(cls, id: str, reason: str, **evidence: Any) -> Check:
        return cls(id, Status.UNMET, reason, evidence)

    @classmethod
    def not_applicable(cls, id: str, reason: str, **evidence: Any) -> Check:
        return cls(id, Status.NOT_APPLICABLE, reason, evidence)

    @classmethod
    def needs_declaration(cls, id: str, reason: str, **evidence: Any) -> Check:
        return cls(id, Status.NEEDS_DECLARATION, reason, evidence)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status.value, "reason": self.reason,
                "evidence": _jsonable(self.evidence), "source": self.source}


class Verdict(str, enum.Enum):
    """The three outcomes of draft §2."""

    UNCONDITIONAL = "unconditionally compliant"
    CONDITIONAL = "conditionally compliant"
    NOT_COMPLIANT = "not compliant"

    def __str__(self) -> str:
        return self.value


@dataclass
class ComplianceResult:
    """Every applicable item's :class:`Check` for one test, and the §2 verdict."""

    test_id: str
    verdict: Verdict
    checks: list[Check]
    notes: list[str] = field(default_factory=list)

    def level(self, rid: str) -> str:
        return registry()[rid].level

    def __getitem__(self, rid: str) -> Check:
        for c in self.checks:
            if c.id == rid:
                return c
        raise KeyError(rid)

    def failing(self, level: str | None = None) -> list[Check]:
        """Unmet (or undeclared) items, optionally of one level."""
        return [c for c in self.checks if c.fails and (level is None or self.level(c.id) == level)]

    @property
    def unmet_must(self) -> list[Check]:
        return self.failing("MUST")

    @property
    def unmet_should(self) -> list[Check]:
        return self.failing("SHOULD")

    def rows(self, *, hide_not_applicable: bool = False) -> list[tuple[str, str, str, str]]:
        """The compact table: (id, level, status, reason), in draft order.

        ``hide_not_applicable`` drops not-applicable MAY/PARAM/REPORT rows (never MUST/SHOULD).
        """
        return [(c.id, self.level(c.id), c.status.value, c.reason) for c in self.checks
                if not (hide_not_applicable and c.status is Status.NOT_APPLICABLE
                        and self.level(c.id) not in VERDICT_LEVELS)]

    def counts(self) -> dict[str, dict[str, int]]:
        """Per level: how many items are met / unmet / needs-declaration / not-applicable."""
        out: dict[str, dict[str, int]] = {lvl: {s.value: 0 for s in Status} for lvl in LEVELS}
        for c in self.checks:
            out[self.level(c.id)][c.status.value] += 1
        return out

    def summary(self) -> str:
        """``5.1: not compliant (3 MUST unmet, 1 SHOULD unmet)``."""
        m, s = len(self.unmet_must), len(self.unmet_should)
        return f"{self.test_id}: {self.verdict.value} ({m} MUST unmet, {s} SHOULD unmet)"

    def format_table(self, *, levels: Iterable[str] = LEVELS, width: int = 100,
                     hide_not_applicable: bool = False) -> str:
        """A plain-text table for the terminal: ID | Level | Status | Reason."""
        wanted = set(levels)
        rows = [r for r in self.rows(hide_not_applicable=hide_not_applicable) if r[1] in wanted]
        w0 = max([len("ID")] + [len(r[0]) for r in rows])
        w2 = max([len("Status")] + [len(r[2]) for r in rows])
        lines = [self.summary(), f"{'ID':<{w0}}  {'Level':<6}  {'Status':<{w2}}  Reason"]
        for rid, lvl, st, reason in rows:
            text = reason if len(reason) <= width else reason[: width - 1] + "…"
            lines.append(f"{rid:<{w0}}  {lvl:<6}  {st:<{w2}}  {text}")
        return "\n".join(lines)

    def to_markdown(self, *, hide_not_applicable: bool = False) -> str:
        lines = [f"**{self.test_id}: {self.verdict.value}**", "", "| ID | Level | Status | Reason |",
                 "|---|---|---|---|"]
        for rid, lvl, st, reason in self.rows(hide_not_applicable=hide_not_applicable):
            lines.append(f"| `{rid}` | {lvl} | {st} | {reason.replace('|', '/')} |")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.test_id,
            "verdict": self.verdict.value,
            "unmet_must": [c.id for c in self.unmet_must],
            "unmet_should": [c.id for c in self.unmet_should],
            "counts": self.counts(),
            "notes": list(self.notes),
            "checks": [dict(c.to_json(), level=self.level(c.id)) for c in self.checks],
        }


def verdict_of(checks: Iterable[Check]) -> Verdict:
    """Draft §2 on a set of checks (levels looked up in the registry; MAY/PARAM/REPORT ignored)."""
    reg = registry()
    must_fail = should_fail = False
    for c in checks:
        lvl = reg[c.id].level
        if c.fails and lvl == "MUST":
            must_fail = True
        elif c.fails and lvl == "SHOULD":
            should_fail = True
    if must_fail:
        return Verdict.NOT_COMPLIANT
    return Verdict.CONDITIONAL if should_fail else Verdict.UNCONDITIONAL


# ============================================================================================
# Run facts: what a run knows about itself
# ============================================================================================


@dataclass
class LoadFacts:
    """Load model of the run and the load generator's capabilities (§4.2.3–§4.2.5)."""

    model: str | None = None  # "open" | "closed"
    arrival: str | None = None  # open loop: "poisson" | "uniform" | "bursty"
    rate: float | None = None  # open loop: req/s
    concurrency: int | None = None  # closed loop
    send_lag_p99_s: float | None = None  # open loop: P99 of actual - planned send time
    send_lag_inflight_corr: float | None = None  # correlation of send lag with in-flight count
    resubmit_gap_p99_s: float | None = None  # closed loop: P99 completion-to-resubmit gap
    #: what the load generator offers, from :data:`LOAD_CAPABILITIES`
    capabilities: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.capabilities) - set(LOAD_CAPABILITIES))
        if unknown:
            raise ComplianceError(f"unknown load capabilities {unknown}; known: {', '.join(LOAD_CAPABILITIES)}")


@dataclass
class ClockFacts:
    """Timing resolution, clock synchronisation and timestamp format (§4.2.1, §4.7)."""

    resolution_ns: float | None = None  # of the interval clock (time.get_clock_info("perf_counter"))
    single_host: bool | None = None  # load generator and SUT on one machine (loopback endpoint)
    sync_method: str | None = None  # "single-host" | "ntp" | "ptp" | "chrony" ...
    sync_accuracy_s: float | None = None  # measured offset/accuracy when not single host
    cross_host_intervals: bool | None = None  # intervals combine timestamps of two hosts (sub-ms sync)
    timestamp_format: str | None = None  # "iso8601_ms" | "iso8601_us" | "unix_ms" | "unix_us" | "unix_ns"
    timestamp_sample: str | None = None  # one serialized timestamp, checked against the format

    @classmethod
    def local(cls, **kw: Any) -> ClockFacts:
        """This process's interval clock (``perf_counter``, §4.2.1) plus any other fields given."""
        info = time.get_clock_info("perf_counter")
        kw.setdefault("resolution_ns", info.resolution * 1e9)
        return cls(**kw)


@dataclass
class WarmupFacts:
    """What the warm-up did (§4.5)."""

    requests: int = 0  # completed warm-up requests
    output_tokens: int = 0  # output tokens of the warm-up
    drained: bool | None = None  # client in-flight count 0 before the first measured request
    server_queue_drained: bool | None = None  # server queue depth 0 (needs server metrics)
    probes_before: tuple[float, ...] = ()  # probe latencies (s) before warm-up (§4.5.2)
    probes_after: tuple[float, ...] = ()  # consecutive probe latencies (s) after warm-up
    reduced: bool = False  # the profile set the warm-up below the §4.5.1 minimum
    cold_start: bool = False  # run measures cold start: warm-up skipped on purpose (§4.5.3)
    prefix_populated: bool | None = None  # warm-up sent the workload's shared prefixes (§4.5.1)


@dataclass
class RecordAudit:
    """Per-request record completeness (§4.2.2, §4.2.6, §4.8.1) over the measured records."""

    n: int = 0
    n_ok: int = 0
    n_failed: int = 0
    refused: int = 0
    missing_submit: int = 0
    missing_first_token: int = 0
    missing_chunk_times: int = 0
    missing_final: int = 0
    missing_input_tokens: int = 0
    missing_output_tokens: int = 0
    missing_status: int = 0

    @classmethod
    def from_records(cls, records: Iterable[RequestRecord], *, phase: str = "measure") -> RecordAudit:
        a = cls()
        for r in records:
            if phase and r.phase != phase:
                continue
            a.n += 1
            a.n_ok += r.ok
            a.n_failed += r.failed
            a.refused += r.error_type is ErrorType.REFUSED
            a.missing_submit += not r.sent_ns
            has_content = any(t.strip() for t in r.chunk_text)
            a.missing_first_token += bool(r.ok and has_content and r.first_token_ns is None)
            a.missing_chunk_times += bool(len(r.chunk_ns) != len(r.chunk_text) or (has_content and not r.chunk_ns))
            a.missing_final += r.end_ns is None
            a.missing_input_tokens += bool(r.ok and r.input_tokens_server is None and r.input_tokens_client is None)
            a.missing_output_tokens += bool(r.ok and r.output_tokens is None)
            a.missing_status += bool(r.ok and r.status is None)
        return a


@dataclass
class RunFacts:
    """The general facts a run knows about itself, evaluated against the general items.

    Everything defaults to "unknown"; an unknown fact never makes an item pass.
    """

    sut_boundary: str | None = None  # model-engine | gateway | compound (§4.1)
    boundary_declared_before_start: bool | None = None
    load: LoadFacts = field(default_factory=LoadFacts)
    clock: ClockFacts = field(default_factory=ClockFacts)
    streaming: bool | None = None
    protocol: str | None = None  # sse | websocket | grpc
    single_token_chunk_fraction: float | None = None  # measured share of one-token chunks (§4.6.2)
    itl_method: str | None = None  # chunk | distributed | server (§4.6.3 A/B/C)
    itl_reported: bool | None = None  # the test reports ITL/TPOT from token timestamps
    server_token_timestamps: bool | None = None  # server sent per-token timestamps (option C possible)
    warmup: WarmupFacts = field(default_factory=WarmupFacts)
    tokenizer: Any = None  # tokenizer.TokenizerDeclaration or a mapping with the same keys
    special_tokens: Any = None  # {"bos_eos", "system_prompt", "tool_call_format"} or one statement
    workload: dict[str, Any] = field(default_factory=dict)  # name, custom, base, 4.3.1 fields, dataset
    session_workloads: tuple[str, ...] = ()  # workloads of every run in the report (§4.3.2.1)
    seed: int | None = None
    sequence_hash: str | None = None  # hash of the request sequence (§4.3.3)
    generator: str | None = None  # generator name + version that rebuilds the sequence from the seed
    records: RecordAudit | None = None
    guardrails: dict[str, Any] | None = None  # input_filter, output_filter (on/off/unknown), systems
    production_representative: bool | None = None  # run meant to represent production (§4.8.2)
    prefix_caching: str | None = None  # enabled | disabled (§5.1.2)
    prefix_cache_under_test: bool = False
    network_rtt_s: float | None = None  # measured separately (§4.7.3)
    latency_adjustment: dict[str, Any] | None = None  # {"method", "value"} when TTFT was adjusted
    endpoint_scheme: str | None = None  # http | https
    tls_verified: bool | None = None
    secrets_redacted: bool | None = None  # API key read from env, never written (§7)
    compared: bool = False  # results are compared across SUTs (§6)
    exceeds_capacity: bool = False  # the test drives load beyond capacity (§7.4)
    session_tests: tuple[str, ...] = ()  # tests run in the same session/report

    def to_json(self) -> dict[str, Any]:
        return _jsonable(dataclasses.asdict(self))

    @property
    def boundary(self) -> str | None:
        if self.sut_boundary is None:
            return None
        return _BOUNDARY_ALIASES.get(str(self.sut_boundary).lower())

    @property
    def workload_name(self) -> str | None:
        name = self.workload.get("name") if self.workload else None
        return _norm_workload(name) if name else None

    @property
    def workload_base(self) -> str | None:
        base = self.workload.get("base") if self.workload else None
        return _norm_workload(base) if base else self.workload_name


def _norm_workload(name: Any) -> str:
    return str(name).strip().lower().replace("_", "-").replace(" ", "-")


def _jsonable(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return _jsonable(dataclasses.asdict(x))
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in x]
    if isinstance(x, enum.Enum):
        return x.value
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


# ============================================================================================
# Declarations: what the tester states and a client cannot observe
# ============================================================================================

#: Named facts a tester can declare, the items they answer, and the keys a table must hold.
DECLARATION_FACTS: dict[str, dict[str, Any]] = {
    "model": {"items": ["5.1.2-MUST-11"], "keys": ("name", "version", "quantization"),
              "help": "model name, version and quantization ('none' allowed)"},
    "hardware": {"items": ["5.1.2-MUST-12"], "keys": ("accelerator", "count", "memory"),
                 "help": "accelerator type, count and memory"},
    "engine": {"items": [], "keys": ("name", "version"), "help": "inference engine and version (App. C.1)"},
    "model_loaded": {"items": ["4.5.1-MUST-1"], "keys": (), "help": "the model was fully loaded before warm-up"},
    "server_queue_drained": {"items": ["4.5.1-MUST-3"], "keys": (),
                             "help": "the server queue was empty when measuring started"},
    "prefix_cache_populated": {"items": ["4.5.1-MUST-4"], "keys": (),
                               "help": "the prefix cache held the workload's prefixes after warm-up"},
    "guardrails": {"items": ["4.8.1-MUST-1", "4.8.1-MUST-2", "4.8.1-MUST-3"],
                   "keys": ("input_filter", "output_filter", "systems"),
                   "help": "input_filter/output_filter: on|off|unknown; systems: list of names or 'unknown'"},
    "guardrails_default": {"items": ["4.8.2-SHOULD-1"], "keys": (),
                           "help": "safety systems ran in their default production configuration"},
    "production_representative": {"items": [], "keys": (),
                                  "help": "the run is meant to represent production (turns on §4.8.2)"},
    "clock_sync": {"items": ["4.7.2-MUST-1", "4.7.2-MUST-2"], "keys": ("method", "accuracy_ms"),
                   "help": "method (ntp|ptp|chrony|...) and accuracy in ms of the host clock sync"},
    "dataset": {"items": ["4.3.3-MUST-3"], "keys": ("version", "subset_selection", "preprocessing"),
                "help": "dataset version, subset selection and preprocessing of a dataset workload"},
    "terminology": {"items": ["abstract-SHOULD-1", "1-SHOULD-1"], "keys": (),
                    "help": "the [LLM-TERMS] revision consulted, e.g. 'draft-gaikwad-llm-benchmarking-terminology-00'"},
    "publication_review": {"items": ["7.1-SHOULD-1"], "keys": (),
                           "help": "how publishing detailed capacity results was weighed"},
    "production_cross_check": {"items": ["7.2-SHOULD-1"], "keys": (),
                               "help": "how workloads were varied / cross-checked with production samples"},
    "isolated_system": {"items": ["7.4-SHOULD-1"], "keys": (), "help": "memory-pressure tests ran on an isolated system"},
    "recovery_procedure": {"items": ["7.4-SHOULD-2"], "keys": (), "help": "the recovery procedure prepared"},
}


class Declarations(Mapping[str, Any]):
    """Tester declarations: requirement IDs or named facts (:data:`DECLARATION_FACTS`) -> value.

    A requirement-ID value is ``true``/``false``, a statement string (counts as met, kept as
    evidence) or a table ``{met = true, note = "..."}``. Unknown keys are an error (typos must not
    silently leave an item undeclared).
    """

    def __init__(self, data: Mapping[str, Any] | None = None, *, source: str = "(inline)") -> None:
        self.source = source
        self._data: dict[str, Any] = {}
        reg = registry()
        for key, value in (data or {}).items():
            k = str(key)
            if k not in reg and k not in DECLARATION_FACTS:
                raise DeclarationError(
                    f"{source}: unknown declaration {k!r}; use a requirement id (e.g. '4.5.1-MUST-1') or one of: "
                    f"{', '.join(sorted(DECLARATION_FACTS))}")
            if k in DECLARATION_FACTS:
                keys = DECLARATION_FACTS[k]["keys"]
                if keys and not isinstance(value, Mapping):
                    raise DeclarationError(f"{source}: {k} must be a table with {', '.join(keys)}")
            elif not isinstance(value, (bool, str, Mapping)):
                raise DeclarationError(f"{source}: {k} must be true/false, a statement or {{met=..., note=...}}")
            self._data[k] = value

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"Declarations({self._data!r}, source={self.source!r})"

    @classmethod
    def from_file(cls, path: str | Path) -> Declarations:
        """A TOML or YAML file. TOML: top-level keys, or ``[tool.llmbench.declarations]``."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as exc:
            raise DeclarationError(f"declarations file {p}: {exc.strerror or exc}") from None
        try:
            if p.suffix.lower() in (".yaml", ".yml"):
                data = yaml.safe_load(text) or {}
            else:
                data = tomllib.loads(text)
        except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
            raise DeclarationError(f"declarations file {p}: {exc}") from None
        if not isinstance(data, Mapping):
            raise DeclarationError(f"declarations file {p}: expected a table of declarations")
        nested = data.get("tool", {}).get("llmbench", {}).get("declarations") if "tool" in data else None
        if nested is not None:
            data = nested
        return cls(data, source=str(p))

    @classmethod
    def from_pyproject(cls, path: str | Path) -> Declarations:
        """``[tool.llmbench.declarations]`` of a pyproject.toml (empty if absent)."""
        p = Path(path)
        try:
            data = tomllib.loads(p.read_text(encoding="utf-8"))
        except OSError as exc:
            raise DeclarationError(f"{p}: {exc.strerror or exc}") from None
        except tomllib.TOMLDecodeError as exc:
            raise DeclarationError(f"{p}: {exc}") from None
        table = data.get("tool", {}).get("llmbench", {}).get("declarations", {})
        return cls(table, source=f"{p} [tool.llmbench.declarations]")

    @classmethod
    def load(cls, path: str | Path | None = None, *, rootdir: str | Path | None = None) -> Declarations:
        """The declarations file if given, merged over ``rootdir/pyproject.toml``'s table (file wins)."""
        base: dict[str, Any] = {}
        sources = []
        if rootdir is not None and (Path(rootdir) / "pyproject.toml").is_file():
            py = cls.from_pyproject(Path(rootdir) / "pyproject.toml")
            if py:
                base.update(py._data)
                sources.append(py.source)
        if path is not None:
            f = cls.from_file(path)
            base.update(f._data)
            sources.append(f.source)
        return cls(base, source=" + ".join(sources) or "(none)")


def _as_declarations(d: Declarations | Mapping[str, Any] | None) -> Declarations:
    if isinstance(d, Declarations):
        return d
    return Declarations(d or {}, source="(inline)")


# ============================================================================================
# Evaluation context, evaluators, conditions
# ============================================================================================


class _Ctx:
    """What an evaluator sees: the facts, the declarations and (memoised) other items' checks."""

    def __init__(self, facts: RunFacts, decl: Declarations, procedure_checks: Mapping[str, Check]) -> None:
        self.facts = facts
        self.decl = decl
        self.procedure_checks = procedure_checks
        self._memo: dict[str, Check] = {}

    def check(self, rid: str) -> Check:
        """The check of any item (procedure > evaluator > declaration), ignoring applicability."""
        if rid not in self._memo:
            self._memo[rid] = _resolve(rid, self)
        return self._memo[rid]

    def declared(self, rid: str, fact: str | None = None) -> Check:
        """Answer ``rid`` from a named fact or an ID declaration; needs-declaration otherwise."""
        if fact is not None and fact in self.decl:
            value = self.decl[fact]
            keys = DECLARATION_FACTS[fact]["keys"]
            if keys:
                missing = [k for k in keys if _blank(value.get(k))]
                if missing:
                    return Check.unmet(rid, f"declaration {fact!r} ({self.decl.source}) lacks {', '.join(missing)}",
                                       declared=dict(value))
                return Check.met(rid, f"declared by tester: {fact} = {_short(value)}", declared=dict(value))
            if value is False:
                return Check.unmet(rid, f"tester declares {fact} = false")
            return Check.met(rid, f"declared by tester: {fact} = {_short(value)}", declared=value)
        id_check = self.id_declaration(rid)
        if id_check is not None:
            return id_check
        key = f"{fact}' or '{rid}" if fact else rid
        return Check.needs_declaration(rid, f"needs tester declaration: set '{key}' in [tool.llmbench.declarations]")

    def id_declaration(self, rid: str) -> Check | None:
        if rid not in self.decl:
            return None
        v = self.decl[rid]
        if isinstance(v, Mapping):
            met, note = bool(v.get("met", False)), str(v.get("note", ""))
        elif isinstance(v, bool):
            met, note = v, ""
        else:
            met, note = bool(str(v).strip()), str(v)
        text = f"declared by tester{': ' + note if note else ''}"
        c = Check(rid, Status.MET if met else Status.UNMET, text if met else f"tester declares not met{': ' + note if note else ''}",
                  {"declared": v}, "declaration")
        return c


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip()) or (isinstance(v, (list, tuple, dict)) and not v)


def _short(v: Any, n: int = 80) -> str:
    s = ", ".join(f"{k}={v2}" for k, v2 in v.items()) if isinstance(v, Mapping) else str(v)
    return s if len(s) <= n else s[: n - 1] + "…"


Evaluator = Callable[[_Ctx, str], Check]
#: requirement id -> evaluator over RunFacts (+ declarations, + other items' checks)
EVALUATORS: dict[str, Evaluator] = {}
#: requirement id -> named declaration fact (or the id itself) that answers it
DECLARATION_HOOKS: dict[str, str] = {}


def evaluator(*ids: str) -> Callable[[Evaluator], Evaluator]:
    """Register a general evaluator for one or more requirement ids."""

    def deco(fn: Evaluator) -> Evaluator:
        for rid in ids:
            if rid in EVALUATORS:
                raise ComplianceError(f"two evaluators for {rid}")
            EVALUATORS[rid] = fn
        return fn

    return deco


def declaration_hook(rid: str, fact: str | None = None) -> None:
    """``rid`` is answered by a tester declaration (named ``fact``, or the id itself)."""
    DECLARATION_HOOKS[rid] = fact or rid
    EVALUATORS.setdefault(rid, lambda ctx, r, _f=fact: ctx.declared(r, _f))


def _resolve(rid: str, ctx: _Ctx) -> Check:
    if rid in ctx.procedure_checks:
        c = ctx.procedure_checks[rid]
        if c.id != rid:
            raise ComplianceError(f"procedure check for {rid} carries id {c.id}")
        if not c.source:
            c = dataclasses.replace(c, source="procedure")
        return c
    fn = EVALUATORS.get(rid)
    if fn is not None:
        c = fn(ctx, rid)
        if c.status is Status.NEEDS_DECLARATION:
            declared = ctx.id_declaration(rid)
            if declared is not None:
                return declared
        if not c.source:
            c.source = "declaration" if (rid in DECLARATION_HOOKS and c.evidence.get("declared") is not None) \
                else "evaluator"
        return c
    declared = ctx.id_declaration(rid)
    if declared is not None:
        return declared
    req = registry()[rid]
    who = "the procedure did not supply this check" if req.applies_to != "general" else \
        "no general evaluator; the procedure or workload generator did not supply this check"
    return Check(rid, Status.UNMET, f"no evaluator: {who}", {}, "none")


# -------------------------------------------------------------------------------- conditions

Condition = Callable[[RunFacts, Declarations], "bool | None"]


def _bool_decl(decl: Declarations, key: str) -> bool | None:
    v = decl.get(key)
    return None if v is None else bool(v)


def _is_custom(f: RunFacts) -> bool | None:
    if not f.workload or not f.workload.get("name"):
        return None
    return bool(f.workload.get("custom")) or f.workload_name not in STANDARD_WORKLOADS


def _is_dataset(f: RunFacts) -> bool | None:
    if not f.workload:
        return None
    return bool(f.workload.get("dataset")) or f.workload_base in ("conversation", "code-completion")


def _remote(f: RunFacts) -> bool | None:
    return None if f.clock.single_host is None else not f.clock.single_host


def _and(*vals: bool | None) -> bool | None:
    if any(v is False for v in vals):
        return False
    return None if any(v is None for v in vals) else True


def _boundary_is(name: str) -> Condition:
    return lambda f, d: None if f.boundary is None else f.boundary == name


CONDITIONS: dict[str, tuple[Condition, str]] = {
    "itl_reported": (lambda f, d: f.itl_reported, "ITL/TPOT is reported from token timestamps"),
    "custom_workload": (lambda f, d: _is_custom(f), "the workload is custom (not a standard one as defined)"),
    "dataset_workload": (lambda f, d: _is_dataset(f), "the workload is built from a dataset"),
    "model_engine": (_boundary_is("model-engine"), "the SUT boundary is Model Engine"),
    "application_gateway": (_boundary_is("gateway"), "the SUT boundary is Application Gateway"),
    "compound_system": (_boundary_is("compound"), "the SUT boundary is Compound System"),
    "prefix_cache_tested": (lambda f, d: None if f.prefix_caching is None
                            else (f.prefix_caching == "enabled" and f.prefix_cache_under_test),
                            "prefix caching is enabled and under test"),
    "cold_start": (lambda f, d: f.warmup.cold_start, "the run measures cold start"),
    "remote_sut": (lambda f, d: _remote(f), "load generator and SUT are on different machines"),
    "single_host": (lambda f, d: f.clock.single_host, "load generator and SUT share one machine"),
    "gateway_network": (lambda f, d: _and(_boundary_is("gateway")(f, d), _remote(f)),
                        "Application Gateway reached over a network"),
    "production_gateway": (lambda f, d: _and(_boundary_is("gateway")(f, d),
                                             f.production_representative if f.production_representative is not None
                                             else _bool_decl(d, "production_representative")),
                           "an Application Gateway run meant to represent production"),
    "server_timing": (lambda f, d: f.itl_method == "server" if f.itl_method else f.server_token_timestamps,
                      "server-side timestamps are used"),
    "compared": (lambda f, d: f.compared, "results are compared across SUTs"),
    "beyond_capacity": (lambda f, d: f.exceeds_capacity, "the test drives load beyond capacity"),
}

_FACT_GETTERS: dict[str, Callable[[RunFacts], Any]] = {
    "workload": lambda f: f.workload_base,
    "boundary": lambda f: f.boundary,
    "protocol": lambda f: (f.protocol or "").lower() or None,
    "itl_method": lambda f: f.itl_method,
    "counting": lambda f: _tok(f, "counting_option"),
    "clock": lambda f: (f.clock.sync_method or "").lower() or None,
}


def _condition(name: str) -> tuple[Condition, str] | None:
    if name in CONDITIONS:
        return CONDITIONS[name]
    if "=" in name:
        key, _, want = name.partition("=")
        getter = _FACT_GETTERS.get(key)
        if getter is None:
            return None

        def cond(f: RunFacts, d: Declarations, _g: Callable[[RunFacts], Any] = getter, _w: str = want) -> bool | None:
            v = _g(f)
            return None if v is None else str(v) == _w

        return cond, f"{key} is {want}"
    return None


# -------------------------------------------------------------------------------- helpers


def _tok(f: RunFacts, key: str) -> Any:
    t = f.tokenizer
    if t is None:
        return None
    if isinstance(t, Mapping):
        return t.get(key)
    return getattr(t, key, None)


def _need(rid: str, what: str) -> Check:
    return Check.unmet(rid, f"not recorded: {what}")


# ============================================================================================
# General evaluators (§4, §7): one per general MUST/SHOULD a client can evaluate from RunFacts
# ============================================================================================


@evaluator("4.1-MUST-1", "5.1.2-MUST-10")
def _boundary(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.sut_boundary is None:
        return Check.unmet(rid, "SUT boundary not declared (--llm-boundary: model-engine, gateway or compound)")
    if f.boundary is None:
        return Check.unmet(rid, f"SUT boundary {f.sut_boundary!r} is not one of {', '.join(BOUNDARIES)}")
    if rid == "4.1-MUST-1" and f.boundary_declared_before_start is not True:
        why = "after" if f.boundary_declared_before_start is False else "not known to be before"
        return Check.unmet(rid, f"SUT boundary {f.boundary} declared {why} the first request", boundary=f.boundary)
    return Check.met(rid, f"SUT boundary: {f.boundary}", boundary=f.boundary)


@evaluator("4.2-MUST-1")
def _load_generator_umbrella(ctx: _Ctx, rid: str) -> Check:
    parts = [r.id for r in registry() if r.level == "MUST" and re.match(r"^4\.2\.[1-6]-", r.id)]
    failing = [p for p in parts if ctx.check(p).fails]
    if failing:
        return Check.unmet(rid, f"load generator requirements unmet: {', '.join(failing)}", unmet=failing)
    return Check.met(rid, f"all {len(parts)} MUSTs of 4.2.1-4.2.6 met", items=parts)


@evaluator("4.2.1-MUST-1", "4.2.1-SHOULD-1")
def _resolution(ctx: _Ctx, rid: str) -> Check:
    res = ctx.facts.clock.resolution_ns
    if res is None:
        return _need(rid, "timer resolution")
    limit = 1e6 if rid == "4.2.1-MUST-1" else 1e3
    label = "1 ms" if rid == "4.2.1-MUST-1" else "1 µs"
    if res <= limit:
        return Check.met(rid, f"timer resolution {res:g} ns <= {label}", resolution_ns=res)
    return Check.unmet(rid, f"timer resolution {res:g} ns > {label}", resolution_ns=res)


@evaluator("4.2.2-MUST-1")
def _streaming(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.streaming is False:
        return Check.unmet(rid, "responses were not streamed")
    if f.protocol is None or f.streaming is None:
        return _need(rid, "streaming protocol")
    if f.protocol.lower() not in PROTOCOLS:
        return Check.unmet(rid, f"protocol {f.protocol!r} is not one of {', '.join(PROTOCOLS)}")
    return Check.met(rid, f"streaming over {f.protocol.lower()}", protocol=f.protocol.lower())


_AUDIT_FIELDS = {
    "4.2.2-MUST-2": ("missing_chunk_times", "per-chunk arrival times"),
    "4.2.6-MUST-1": ("missing_submit", "submission timestamp"),
    "4.2.6-MUST-2": ("missing_first_token", "first-token timestamp"),
    "4.2.6-MUST-3": ("missing_chunk_times", "arrival time of every later token/chunk"),
    "4.2.6-MUST-4": ("missing_final", "final-token timestamp"),
    "4.2.6-MUST-5": ("missing_input_tokens", "input token count"),
    "4.2.6-MUST-6": ("missing_output_tokens", "output token count"),
    "4.2.6-MUST-7": ("missing_status", "success/failure status"),
}


@evaluator(*_AUDIT_FIELDS)
def _record_field(ctx: _Ctx, rid: str) -> Check:
    audit = ctx.facts.records
    attr, what = _AUDIT_FIELDS[rid]
    if audit is None:
        return _need(rid, "per-request record audit (RecordAudit.from_records)")
    if audit.n == 0:
        return Check.unmet(rid, "no measured requests were recorded")
    missing = getattr(audit, attr)
    if missing:
        return Check.unmet(rid, f"{missing} of {audit.n} records lack the {what}", missing=missing, n=audit.n)
    return Check.met(rid, f"all {audit.n} records hold the {what}", n=audit.n)


def _has_cap(f: RunFacts, cap: str) -> bool:
    return cap in f.load.capabilities


@evaluator("4.2.3-MUST-1")
def _open_loop(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if not _has_cap(f, "open_loop") or not _has_cap(f, "absolute_schedule"):
        return Check.unmet(rid, "load generator does not declare an open-loop schedule independent of responses")
    if f.load.model == "open" and f.load.send_lag_p99_s is None:
        return Check.unmet(rid, "open-loop run did not record planned vs actual send times")
    return Check.met(rid, "open-loop schedule computed from (distribution, rate, seed) against absolute times")


@evaluator("4.2.3-MUST-2", "4.2.3-SHOULD-1")
def _arrivals(ctx: _Ctx, rid: str) -> Check:
    want = ("poisson",) if rid == "4.2.3-MUST-2" else ("uniform", "bursty")
    missing = [w for w in want if not _has_cap(ctx.facts, w)]
    if missing:
        return Check.unmet(rid, f"arrival pattern(s) not offered: {', '.join(missing)}")
    return Check.met(rid, f"arrival pattern(s) offered: {', '.join(want)}")


@evaluator("4.2.4-MUST-1")
def _closed_loop(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if not _has_cap(f, "closed_loop"):
        return Check.unmet(rid, "load generator does not offer closed-loop load")
    gap = f.load.resubmit_gap_p99_s
    if f.load.model == "closed" and gap is not None and gap > LAG_LIMIT_S:
        return Check.unmet(rid, f"completion-to-resubmit gap P99 {gap * 1e3:.2f} ms > {LAG_LIMIT_S * 1e3:g} ms",
                           resubmit_gap_p99_s=gap)
    if f.load.model == "closed" and gap is not None:
        return Check.met(rid, f"closed loop held; resubmit gap P99 {gap * 1e3:.3f} ms", resubmit_gap_p99_s=gap)
    return Check.met(rid, "closed-loop load offered (each finished request replaced at once)")


@evaluator("4.2.5-MUST-1")
def _isolation(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.load.model != "open":
        if _has_cap(f, "absolute_schedule"):
            return Check.met(rid, "not exercised (closed loop); open-loop sends are scheduled on absolute times")
        return Check.unmet(rid, "load generator does not declare absolute-time open-loop scheduling")
    lag = f.load.send_lag_p99_s
    if lag is None:
        return _need(rid, "open-loop send lag")
    if lag <= LAG_LIMIT_S:
        return Check.met(rid, f"send lag P99 {lag * 1e3:.3f} ms <= {LAG_LIMIT_S * 1e3:g} ms", send_lag_p99_s=lag)
    corr = f.load.send_lag_inflight_corr
    if corr is not None and abs(corr) < 0.2:
        return Check.met(rid, f"send lag P99 {lag * 1e3:.2f} ms but uncorrelated with in-flight count (r={corr:.2f})",
                         send_lag_p99_s=lag, corr=corr)
    return Check.unmet(rid, f"send lag P99 {lag * 1e3:.2f} ms > {LAG_LIMIT_S * 1e3:g} ms: sends were delayed",
                       send_lag_p99_s=lag, corr=corr)


@evaluator("4.2.5-MUST-2")
def _async(ctx: _Ctx, rid: str) -> Check:
    if _has_cap(ctx.facts, "async"):
        return Check.met(rid, "asynchronous load generator (asyncio)")
    return Check.unmet(rid, "load generator does not declare an asynchronous implementation")


# ---- 4.3 workloads

_WORKLOAD_FIELDS = {
    "4.3.1-MUST-1": ("input_length", ("type", "params", "unit", "tokenizer")),
    "4.3.1-MUST-2": ("output_length", ("type", "params", "control", "unit")),
    "4.3.1-MUST-3": ("content", ("domain", "language", "system_prompt", "system_prompt_len")),
    "4.3.1-MUST-4": ("prefix_sharing", ("fraction", "length_distribution")),
}


def _workload_gaps(w: Mapping[str, Any], rid: str) -> list[str]:
    section, keys = _WORKLOAD_FIELDS[rid]
    block = w.get(section)
    if not isinstance(block, Mapping):
        return [section]
    return [f"{section}.{k}" for k in keys if k not in block or block[k] is None or block[k] == ""]


@evaluator(*_WORKLOAD_FIELDS)
def _workload_field(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if not f.workload or not f.workload.get("name"):
        return _need(rid, "workload declaration")
    gaps = _workload_gaps(f.workload, rid)
    if not gaps:
        return Check.met(rid, f"workload {f.workload['name']} states {_WORKLOAD_FIELDS[rid][0]}")
    if not _is_custom(f):
        return Check.met(rid, f"standard workload {f.workload_name}: specified in App. A")
    return Check.unmet(rid, f"custom workload {f.workload['name']} lacks {', '.join(gaps)}", missing=gaps)


@evaluator("4.3-MUST-1", "5.1.2-MUST-1", "5.2.2-MUST-1")
def _workload_complete(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if not f.workload or not f.workload.get("name"):
        return _need(rid, "workload declaration")
    if not _is_custom(f):
        return Check.met(rid, f"standard workload {f.workload_name} (App. A)")
    gaps = [g for r in _WORKLOAD_FIELDS for g in _workload_gaps(f.workload, r)]
    if gaps:
        return Check.unmet(rid, f"custom workload {f.workload['name']} not fully specified: lacks {', '.join(gaps)}",
                           missing=gaps)
    return Check.met(rid, f"custom workload {f.workload['name']} fully specified (4.3.1)")


@evaluator("4.3-MAY-1")
def _custom_permission(ctx: _Ctx, rid: str) -> Check:
    if _is_custom(ctx.facts):
        return Check.met(rid, f"permission used: custom workload {ctx.facts.workload.get('name')}")
    return Check.not_applicable(rid, "permission not used: standard workload")


def _session_has(f: RunFacts, name: str) -> bool:
    names = {_norm_workload(w) for w in f.session_workloads}
    return name in names or f.workload_base == name


@evaluator("4.3.2-MUST-1", "4.3.2-SHOULD-1")
def _boundary_workload(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    want = "synthetic-uniform" if rid == "4.3.2-MUST-1" else "conversation"
    if f.workload_base is None and not f.session_workloads:
        return _need(rid, "workload declaration")
    if _session_has(f, want):
        return Check.met(rid, f"the report includes a {want} run")
    return Check.unmet(rid, f"no {want} run in this report (workload: {f.workload_base})")


@evaluator("4.3.2-PARAM-1")
def _standard_or_custom(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.workload_name is None:
        return _need(rid, "workload declaration")
    if _is_custom(f):
        c = ctx.check("4.3-MUST-1")
        return Check(rid, c.status, f"custom workload: {c.reason}")
    return Check.met(rid, f"standard workload {f.workload_name}")


@evaluator("4.3.3-MUST-1", "4.3.3-MUST-2")
def _seed(ctx: _Ctx, rid: str) -> Check:
    seed = ctx.facts.seed
    if seed is None or isinstance(seed, bool) or not isinstance(seed, int):
        return Check.unmet(rid, "no integer workload seed recorded")
    return Check.met(rid, f"workload seed {seed}", seed=seed)


@evaluator("4.3.3-SHOULD-1")
def _sequence_published(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.seed is not None and f.sequence_hash and f.generator:
        return Check.met(rid, f"generator {f.generator} + seed {f.seed}; sequence hash {f.sequence_hash[:16]}",
                         sequence_hash=f.sequence_hash)
    missing = [n for n, v in (("seed", f.seed), ("sequence hash", f.sequence_hash), ("generator", f.generator)) if not v
               and v != 0]
    return Check.unmet(rid, f"request sequence not reproducible from the report: lacks {', '.join(missing)}")


@evaluator("4.3.3-MUST-3")
def _dataset(ctx: _Ctx, rid: str) -> Check:
    ds = dict(ctx.facts.workload.get("dataset") or {}) if ctx.facts.workload else {}
    declared = ctx.decl.get("dataset")
    if isinstance(declared, Mapping):
        ds.update({k: v for k, v in declared.items() if not _blank(v)})
    keys = DECLARATION_FACTS["dataset"]["keys"]
    missing = [k for k in keys if _blank(ds.get(k))]
    if not missing:
        return Check.met(rid, f"dataset {_short(ds)}", dataset=ds)
    if not ds:
        return ctx.declared(rid, "dataset")
    return Check.needs_declaration(rid, f"dataset lacks {', '.join(missing)}: declare 'dataset' in "
                                        f"[tool.llmbench.declarations]", dataset=ds)


# ---- 4.4 tokenization


@evaluator("4.4.1-MUST-1", "4.4.1-MUST-2", "4.4.1-MUST-3")
def _tokenizer(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.tokenizer is None:
        return _need(rid, "tokenizer declaration")
    if rid == "4.4.1-MUST-1":
        name, version = _tok(f, "name"), _tok(f, "version")
        if _blank(name) or _blank(version):
            return Check.unmet(rid, "tokenizer name or version missing", name=name, version=version)
        return Check.met(rid, f"tokenizer {name} {version}")
    if rid == "4.4.1-MUST-2":
        vs = _tok(f, "vocab_size")
        if not isinstance(vs, int) or isinstance(vs, bool) or vs <= 0:
            return Check.unmet(rid, f"tokenizer vocabulary size not stated ({vs!r})")
        return Check.met(rid, f"vocabulary size {vs}")
    src = _tok(f, "source")
    if _blank(src):
        return Check.unmet(rid, "tokenizer source not stated")
    return Check.met(rid, f"tokenizer source {src}")


@evaluator("4.4.2-MUST-1")
def _counting(ctx: _Ctx, rid: str) -> Check:
    opt = _tok(ctx.facts, "counting_option")
    if opt in ("A", "B"):
        return Check.met(rid, f"counting option {opt} ({'native' if opt == 'A' else 'reference'} tokenizer)")
    return Check.unmet(rid, f"token counting option (A native / B reference) not declared ({opt!r})")


@evaluator("4.4.2-SHOULD-1")
def _cross_system_tokenizer(ctx: _Ctx, rid: str) -> Check:
    opt, name = _tok(ctx.facts, "counting_option"), _tok(ctx.facts, "name")
    if opt == "B" and name == "cl100k_base":
        return Check.met(rid, "reference tokenizer cl100k_base (option B)")
    return Check.unmet(rid, f"counting option {opt!r} with tokenizer {name!r}; cl100k_base reference recommended")


@evaluator("4.4.2-PARAM-1", "4.4.2-REPORT-1")
def _counting_detail(ctx: _Ctx, rid: str) -> Check:
    name = _tok(ctx.facts, "name")
    if _blank(name):
        return Check.unmet(rid, "tokenizer not named")
    return Check.met(rid, f"counts labelled with tokenizer {name}")


_SPECIAL_KEYS = {
    "4.4.3-MUST-1": ("bos_eos", ("bos", "eos"), "BOS/EOS counting"),
    "4.4.3-MUST-2": ("system_prompt", ("system",), "system-prompt token counting"),
    "4.4.3-MUST-3": ("tool_call_format", ("tool", "function"), "tool/function-call token counting"),
}


@evaluator(*_SPECIAL_KEYS)
def _special_tokens(ctx: _Ctx, rid: str) -> Check:
    key, words, what = _SPECIAL_KEYS[rid]
    st = ctx.facts.special_tokens
    if st is None:
        st = _tok(ctx.facts, "special_tokens")
    if isinstance(st, Mapping):
        v = st.get(key)
        if _blank(v):
            return Check.unmet(rid, f"{what} not stated (special_tokens.{key})")
        return Check.met(rid, f"{what}: {v}")
    if isinstance(st, str) and any(w in st.lower() for w in words):
        return Check.met(rid, f"{what} stated: {_short(st, 120)}")
    return Check.unmet(rid, f"{what} not stated")


# ---- 4.5 warm-up


@evaluator("4.5.1-MUST-1")
def _model_loaded(ctx: _Ctx, rid: str) -> Check:
    return ctx.declared(rid, "model_loaded")


declaration_hook("4.5.1-MUST-1", "model_loaded")


@evaluator("4.5.1-MUST-2")
def _warmup_size(ctx: _Ctx, rid: str) -> Check:
    w = ctx.facts.warmup
    if w.cold_start:
        return Check.not_applicable(rid, "cold-start measurement: warm-up skipped on purpose (4.5.3)")
    ev = {"requests": w.requests, "output_tokens": w.output_tokens}
    short = []
    if w.requests < WARMUP_MIN_REQUESTS:
        short.append(f"{w.requests} requests < {WARMUP_MIN_REQUESTS}")
    if w.output_tokens < WARMUP_MIN_OUTPUT_TOKENS:
        short.append(f"{w.output_tokens} output tokens < {WARMUP_MIN_OUTPUT_TOKENS}")
    if short:
        why = " (reduced by the profile)" if w.reduced else ""
        return Check.unmet(rid, f"warm-up too small{why}: {'; '.join(short)}", **ev)
    return Check.met(rid, f"warm-up: {w.requests} requests, {w.output_tokens} output tokens", **ev)


@evaluator("4.5.1-MUST-3")
def _drained(ctx: _Ctx, rid: str) -> Check:
    w = ctx.facts.warmup
    if w.cold_start:
        return Check.not_applicable(rid, "cold-start measurement: no warm-up to drain")
    if w.drained is not True:
        return Check.unmet(rid, "client in-flight count not confirmed 0 before the first measured request")
    if w.server_queue_drained is True:
        return Check.met(rid, "client in-flight 0 and server queue empty before measuring")
    if w.server_queue_drained is False:
        return Check.unmet(rid, "server queue not empty when measuring started")
    d = ctx.declared(rid, "server_queue_drained")
    if d.status is Status.NEEDS_DECLARATION:
        d.reason = "client in-flight was 0; server queue depth not observable: " + d.reason
    elif d.holds:
        d.reason = "client in-flight 0; server queue " + d.reason
    return d


declaration_hook("4.5.1-MUST-3", "server_queue_drained")


@evaluator("4.5.1-MUST-4")
def _prefix_warm(ctx: _Ctx, rid: str) -> Check:
    w = ctx.facts.warmup
    if w.prefix_populated is False:
        return Check.unmet(rid, "warm-up did not send the workload's shared prefixes")
    if w.prefix_populated is None:
        return Check.unmet(rid, "not recorded whether warm-up populated the prefix cache")
    d = ctx.declared(rid, "prefix_cache_populated")
    if d.holds:
        return Check.met(rid, "warm-up sent the shared prefixes; cache state " + d.reason)
    return Check.met(rid, "warm-up sent the workload's shared prefixes (cache state itself needs server metrics)")


def _probe_variation(probes: tuple[float, ...], window: int = 3) -> float | None:
    """Largest relative change between the last ``window`` consecutive probes (§4.5.2).

    The warm-up keeps probing until ``window`` consecutive probes agree; earlier probes are the
    ones that had not stabilised yet, so only the final window is judged.
    """
    if len(probes) < window:
        return None
    last = probes[-window:]
    return max(abs(b - a) / a for a, b in zip(last, last[1:]) if a > 0)


@evaluator("4.5.2-SHOULD-1")
def _probes(ctx: _Ctx, rid: str) -> Check:
    w = ctx.facts.warmup
    if w.cold_start:
        return Check.not_applicable(rid, "cold-start measurement: no warm-up")
    if w.probes_before and w.probes_after:
        return Check.met(rid, f"probe latency before {w.probes_before[0] * 1e3:.1f} ms, after "
                              f"{w.probes_after[-1] * 1e3:.1f} ms")
    return Check.unmet(rid, "no probe latency recorded before and after warm-up")


@evaluator("4.5.2-SHOULD-2")
def _probe_stability(ctx: _Ctx, rid: str) -> Check:
    w = ctx.facts.warmup
    if w.cold_start:
        return Check.not_applicable(rid, "cold-start measurement: no warm-up")
    var = _probe_variation(tuple(w.probes_after))
    if var is None:
        return Check.unmet(rid, f"{len(w.probes_after)} post-warm-up probes; need >= 3 consecutive probes")
    if var < PROBE_STABILITY:
        return Check.met(rid, f"consecutive probes vary by at most {var:.1%} (< 10%)", variation=var)
    return Check.unmet(rid, f"consecutive probes vary by up to {var:.1%} (>= 10%): not stabilised", variation=var)


@evaluator("4.5.3-MUST-1")
def _cold_no_warmup(ctx: _Ctx, rid: str) -> Check:
    w = ctx.facts.warmup
    if w.requests == 0:
        return Check.met(rid, "cold start: no warm-up requests sent")
    return Check.unmet(rid, f"cold-start run sent {w.requests} warm-up requests")


@evaluator("4.5.3-MUST-2")
def _cold_label(ctx: _Ctx, rid: str) -> Check:
    if ctx.facts.warmup.cold_start:
        return Check.met(rid, "run labelled cold start in the report header")
    return Check.unmet(rid, "cold-start run not labelled")


# ---- 4.6 streaming protocol and ITL


@evaluator("4.6.1-SHOULD-1", "4.6.1-SHOULD-2")
def _protocol_for_boundary(ctx: _Ctx, rid: str) -> Check:
    want = "sse" if rid == "4.6.1-SHOULD-1" else "grpc"
    p = (ctx.facts.protocol or "").lower()
    if not p:
        return _need(rid, "streaming protocol")
    if p == want:
        return Check.met(rid, f"protocol {p}")
    return Check.unmet(rid, f"protocol {p}; {want} recommended for this boundary")


@evaluator("4.6.2-MUST-1")
def _protocol_named(ctx: _Ctx, rid: str) -> Check:
    p = (ctx.facts.protocol or "").lower()
    if p in PROTOCOLS:
        return Check.met(rid, f"protocol {p}")
    return Check.unmet(rid, f"streaming protocol not named ({ctx.facts.protocol!r})")


@evaluator("4.6.2-MUST-2")
def _chunking(ctx: _Ctx, rid: str) -> Check:
    frac = ctx.facts.single_token_chunk_fraction
    if frac is None:
        return _need(rid, "tokens-per-chunk measurement")
    kind = "one token per chunk" if frac >= 1.0 else f"multi-token chunks occur ({frac:.1%} single-token)"
    return Check.met(rid, kind, single_token_chunk_fraction=frac)


@evaluator("4.6.2-MUST-3", "4.6.3-MUST-1")
def _itl_method(ctx: _Ctx, rid: str) -> Check:
    m = ctx.facts.itl_method
    if m in ITL_METHODS:
        return Check.met(rid, f"ITL option {'ABC'[ITL_METHODS.index(m)]} ({m})")
    return Check.unmet(rid, f"ITL calculation option not declared ({m!r})")


@evaluator("4.6.3-SHOULD-1")
def _prefer_server(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if f.server_token_timestamps is None:
        return _need(rid, "whether the server sends per-token timestamps")
    if not f.server_token_timestamps:
        return Check.met(rid, "server provides no per-token timestamps: option C unavailable")
    if f.itl_method == "server":
        return Check.met(rid, "server-side per-token timestamps used (option C)")
    return Check.unmet(rid, f"server timestamps available but ITL option {f.itl_method!r} used")


@evaluator("4.6.3-REPORT-1", "4.6.3-PARAM-1", "4.6.3-PARAM-2")
def _itl_option_detail(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if rid == "4.6.3-PARAM-2" and f.server_token_timestamps is False:
        return Check.unmet(rid, "option C declared but the server sent no per-token timestamps")
    if rid == "4.6.3-REPORT-1" and f.single_token_chunk_fraction is None:
        return Check.unmet(rid, "chunk timing used but no chunk-size distribution recorded")
    return Check.met(rid, f"ITL option {f.itl_method}")


# ---- 4.7 clocks


@evaluator("4.7.1-SHOULD-1", "B.3.3-PARAM-1")
def _single_machine(ctx: _Ctx, rid: str) -> Check:
    sh = ctx.facts.clock.single_host
    if sh is None:
        return _need(rid, "whether load generator and SUT share a host")
    return Check.met(rid, "load generator and SUT on one machine (loopback)") if sh else \
        Check.unmet(rid, "load generator and SUT on different machines")


def _sync(ctx: _Ctx) -> tuple[str | None, float | None, str]:
    c = ctx.facts.clock
    method, acc, src = c.sync_method, c.sync_accuracy_s, "measured"
    d = ctx.decl.get("clock_sync")
    if isinstance(d, Mapping):
        method = method or d.get("method")
        if acc is None and d.get("accuracy_ms") is not None:
            acc, src = float(d["accuracy_ms"]) / 1e3, f"declared ({ctx.decl.source})"
    return method, acc, src


@evaluator("4.7.2-MUST-1")
def _ntp(ctx: _Ctx, rid: str) -> Check:
    if ctx.facts.clock.single_host:
        return Check.not_applicable(rid, "single machine: no clock synchronisation needed")
    method, acc, src = _sync(ctx)
    if acc is None:
        return Check.needs_declaration(rid, "clock sync accuracy unknown: declare 'clock_sync' "
                                            "{method, accuracy_ms} in [tool.llmbench.declarations]")
    if acc <= NTP_LIMIT_S:
        return Check.met(rid, f"clock sync {method or '?'} accuracy {acc * 1e3:g} ms <= 10 ms ({src})", accuracy_s=acc)
    return Check.unmet(rid, f"clock sync accuracy {acc * 1e3:g} ms > 10 ms ({src})", accuracy_s=acc)


declaration_hook("4.7.2-MUST-1", "clock_sync")


@evaluator("4.7.2-SHOULD-1")
def _ptp(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    method, _, _ = _sync(ctx)
    if f.clock.single_host:
        return Check.not_applicable(rid, "single machine")
    if f.clock.cross_host_intervals is None:
        return _need(rid, "whether any interval combines timestamps of two hosts")
    if not f.clock.cross_host_intervals:
        return Check.met(rid, "no interval combines timestamps of two hosts: sub-ms sync not needed")
    if (method or "").lower() == "ptp":
        return Check.met(rid, "PTP used for cross-host intervals")
    return Check.unmet(rid, f"cross-host intervals measured with {method or 'unknown'} sync; PTP recommended")


@evaluator("4.7.2-MUST-2")
def _sync_statement(ctx: _Ctx, rid: str) -> Check:
    if ctx.facts.clock.single_host:
        return Check.met(rid, "clock sync: single machine (one clock)")
    method, acc, src = _sync(ctx)
    if method and acc is not None:
        return Check.met(rid, f"clock sync {method}, accuracy {acc * 1e3:g} ms ({src})")
    if ctx.facts.clock.single_host is None and not method:
        return Check.unmet(rid, "neither single machine nor a clock synchronisation method recorded")
    return Check.needs_declaration(rid, "clock sync method/accuracy unknown: declare 'clock_sync' "
                                        "{method, accuracy_ms} in [tool.llmbench.declarations]")


declaration_hook("4.7.2-MUST-2", "clock_sync")


@evaluator("4.7.3-SHOULD-1")
def _rtt(ctx: _Ctx, rid: str) -> Check:
    rtt = ctx.facts.network_rtt_s
    if rtt is None:
        return Check.unmet(rid, "network RTT not measured separately")
    return Check.met(rid, f"network RTT {rtt * 1e3:.2f} ms measured separately", network_rtt_s=rtt)


@evaluator("4.7.3-MAY-1")
def _adjust_permission(ctx: _Ctx, rid: str) -> Check:
    if ctx.facts.latency_adjustment:
        return Check.met(rid, "permission used: network latency subtracted (raw TTFT kept)")
    return Check.not_applicable(rid, "permission not used: no latency adjustment")


@evaluator("4.7.3-MUST-1")
def _adjust_documented(ctx: _Ctx, rid: str) -> Check:
    adj = ctx.facts.latency_adjustment
    if not adj:
        return Check.met(rid, "no latency adjustment applied")
    missing = [k for k in ("method", "value") if _blank(adj.get(k))]
    if missing:
        return Check.unmet(rid, f"latency adjustment lacks {', '.join(missing)}")
    return Check.met(rid, f"latency adjustment documented: {_short(adj)}")


_TS_PATTERNS = {
    "iso8601_ms": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$",
    "iso8601_us": r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$",
    "unix_ms": r"^\d{13}$",
    "unix_us": r"^\d{16}$",
    "unix_ns": r"^\d{19}$",
}
_TS_RECOMMENDED = ("iso8601_ms", "unix_ms")


@evaluator("4.7.4-MUST-1", "4.7.4-SHOULD-1")
def _timestamps(ctx: _Ctx, rid: str) -> Check:
    c = ctx.facts.clock
    fmt = c.timestamp_format
    if fmt is None:
        return _need(rid, "timestamp format")
    if fmt not in _TS_PATTERNS:
        return Check.unmet(rid, f"timestamp format {fmt!r} not one of {', '.join(_TS_PATTERNS)}")
    if c.timestamp_sample is not None and not re.match(_TS_PATTERNS[fmt], str(c.timestamp_sample)):
        return Check.unmet(rid, f"timestamp {c.timestamp_sample!r} does not match format {fmt}")
    if rid == "4.7.4-SHOULD-1" and fmt not in _TS_RECOMMENDED:
        return Check.unmet(rid, f"timestamps as {fmt}; ISO 8601 with ms or Unix ms recommended")
    return Check.met(rid, f"timestamps as {fmt}" + (f", e.g. {c.timestamp_sample}" if c.timestamp_sample else ""))


@evaluator("B.1.1-PARAM-1", "B.1.2-PARAM-1")
def _client_timing_points(ctx: _Ctx, rid: str) -> Check:
    audit = ctx.facts.records
    if audit is None or audit.n == 0:
        return _need(rid, "per-request records")
    return Check.met(rid, "T_submit at send, T_first at the first content-bearing event parsed (records.TTFT_RULE)")


@evaluator("B.3.1-PARAM-1", "B.3.2-PARAM-1")
def _sync_params(ctx: _Ctx, rid: str) -> Check:
    method, acc, src = _sync(ctx)
    limit = 10e-3 if rid == "B.3.1-PARAM-1" else 1e-6
    if acc is None:
        return Check.needs_declaration(rid, "offset unknown: declare 'clock_sync' {method, accuracy_ms}")
    if acc < limit:
        return Check.met(rid, f"{method} offset {acc * 1e3:g} ms ({src})")
    return Check.unmet(rid, f"{method} offset {acc * 1e3:g} ms >= {limit * 1e3:g} ms ({src})")


# ---- 4.1.x boundary definitions (informational PARAM rows)


@evaluator("4.1.1-PARAM-1", "4.1.2-PARAM-1", "4.1.3-PARAM-1")
def _boundary_definition(ctx: _Ctx, rid: str) -> Check:
    f = ctx.facts
    if rid == "4.1.2-PARAM-1" and f.endpoint_scheme is not None and f.endpoint_scheme != "https":
        return Check.unmet(rid, f"Application Gateway reached over {f.endpoint_scheme}, not its external HTTPS API")
    if rid == "4.1.1-PARAM-1" and f.guardrails and any(
            _onoff(f.guardrails.get(k)) == "on" for k in ("input_filter", "output_filter")):
        return Check.unmet(rid, "Model Engine boundary but guardrails are on (outside that boundary)")
    return Check.met(rid, f"boundary {f.boundary}")


# ---- 4.8 guardrails


def _guardrails(ctx: _Ctx) -> tuple[Mapping[str, Any] | None, str]:
    g = ctx.facts.guardrails
    if g:
        return g, "reported by the SUT configuration"
    d = ctx.decl.get("guardrails")
    if isinstance(d, Mapping):
        return d, f"declared ({ctx.decl.source})"
    return None, ""


_GUARD_KEYS = {"4.8.1-MUST-1": "input_filter", "4.8.1-MUST-2": "output_filter", "4.8.1-MUST-3": "systems"}


@evaluator(*_GUARD_KEYS)
def _guardrail_disclosure(ctx: _Ctx, rid: str) -> Check:
    g, src = _guardrails(ctx)
    key = _GUARD_KEYS[rid]
    if g is None:
        c = ctx.declared(rid, "guardrails")
        return c
    ev = {"declared": dict(g)} if src.startswith("declared") else {}
    v = _onoff(g.get(key))
    if key == "systems":
        if _blank(v):
            return Check.unmet(rid, f"guardrails.systems not disclosed ({src}); 'unknown' is allowed", **ev)
        return Check.met(rid, f"safety systems: {_short(v)} ({src})", **ev)
    if v not in ("on", "off", "unknown"):
        return Check.unmet(rid, f"guardrails.{key} = {v!r}; expected on, off or unknown ({src})", **ev)
    return Check.met(rid, f"{key.replace('_', ' ')}: {v} ({src})", **ev)


def _onoff(v: Any) -> Any:
    """YAML 1.1 reads ``off``/``on`` as booleans: map them back; lower-case strings."""
    if isinstance(v, bool):
        return "on" if v else "off"
    return v.lower() if isinstance(v, str) else v


declaration_hook("4.8.1-MUST-1", "guardrails")
declaration_hook("4.8.1-MUST-2", "guardrails")
declaration_hook("4.8.1-MUST-3", "guardrails")


@evaluator("4.8-MUST-1")
def _safety_accounted(ctx: _Ctx, rid: str) -> Check:
    parts = ["4.8.1-MUST-1", "4.8.1-MUST-2", "4.8.1-MUST-3", "4.8.1-MUST-4"]
    failing = [p for p in parts if ctx.check(p).fails]
    if not failing:
        return Check.met(rid, "safety systems disclosed and refusals counted (4.8.1)")
    declared = ctx.id_declaration(rid)
    if declared is not None:
        return declared
    return Check.unmet(rid, f"safety systems not accounted for: {', '.join(failing)} unmet", unmet=failing)


@evaluator("4.8.1-MUST-4")
def _refusals(ctx: _Ctx, rid: str) -> Check:
    audit = ctx.facts.records
    if audit is None:
        return _need(rid, "per-request records (refusal count)")
    return Check.met(rid, f"{audit.refused} of {audit.n} requests refused", refused=audit.refused, n=audit.n)


@evaluator("4.8.2-SHOULD-1")
def _default_guardrails(ctx: _Ctx, rid: str) -> Check:
    g, _ = _guardrails(ctx)
    if g and any(_onoff(g.get(k)) == "off" for k in ("input_filter", "output_filter")):
        return Check.unmet(rid, "safety systems were (partly) off in a production-representative run")
    return ctx.declared(rid, "guardrails_default")


declaration_hook("4.8.2-SHOULD-1", "guardrails_default")


@evaluator("4.8.2-MUST-1")
def _safety_disabled_note(ctx: _Ctx, rid: str) -> Check:
    g, src = _guardrails(ctx)
    if g is None:
        return Check.unmet(rid, "guardrail configuration unknown: cannot tell whether safety was disabled")
    off = [k for k in ("input_filter", "output_filter") if _onoff(g.get(k)) == "off"]
    if off:
        return Check.met(rid, f"report notes: safety systems disabled ({', '.join(off)})", disabled=off)
    return Check.met(rid, "no safety system disabled")


@evaluator("4.8.2-SHOULD-2")
def _guardrail_comparison(ctx: _Ctx, rid: str) -> Check:
    if "5.10" in ctx.facts.session_tests:
        return Check.met(rid, "a 5.10 guardrail-overhead result is part of this report")
    return Check.unmet(rid, "no paired guardrails on/off runs (5.10) in this report")


# ---- terminology and security: tester declarations

for _rid, _fact in (("abstract-SHOULD-1", "terminology"), ("1-SHOULD-1", "terminology"),
                    ("7.1-SHOULD-1", "publication_review"), ("7.2-SHOULD-1", "production_cross_check"),
                    ("7.4-SHOULD-1", "isolated_system"), ("7.4-SHOULD-2", "recovery_procedure"),
                    ("5.1.2-MUST-11", "model"), ("5.1.2-MUST-12", "hardware")):
    declaration_hook(_rid, _fact)


# ============================================================================================
# Test-specific items a run's facts answer (procedures may still override with their own check)
# ============================================================================================


@evaluator("5.1.2-MUST-5", "5.2.2-MUST-3")
def _load_model(ctx: _Ctx, rid: str) -> Check:
    m = ctx.facts.load.model
    if m in ("open", "closed"):
        return Check.met(rid, f"{m}-loop load")
    return Check.unmet(rid, f"load model not defined ({m!r})")


@evaluator("5.1.2-MUST-6", "5.1.2-MUST-7", "5.1.2-MUST-8")
def _open_params(ctx: _Ctx, rid: str) -> Check:
    ld = ctx.facts.load
    if ld.model is None:
        return Check.unmet(rid, "load model not defined (open or closed)")
    if ld.model != "open":
        return Check.not_applicable(rid, f"{ld.model} loop: open-loop parameter")
    if rid == "5.1.2-MUST-6":
        if ld.rate is not None and ld.rate > 0:
            return Check.met(rid, f"arrival rate {ld.rate:g} req/s")
        return Check.unmet(rid, f"arrival rate not defined ({ld.rate!r})")
    if rid == "5.1.2-MUST-7":
        if ld.arrival in ("poisson", "uniform", "bursty"):
            return Check.met(rid, f"{ld.arrival} arrivals")
        return Check.unmet(rid, f"arrival distribution not defined ({ld.arrival!r})")
    if ld.arrival == "poisson":
        return Check.met(rid, "Poisson arrivals")
    return Check.unmet(rid, f"open-loop TTFT run with {ld.arrival!r} arrivals; Poisson is REQUIRED")


@evaluator("5.1.2-MUST-9")
def _closed_params(ctx: _Ctx, rid: str) -> Check:
    ld = ctx.facts.load
    if ld.model is None:
        return Check.unmet(rid, "load model not defined (open or closed)")
    if ld.model != "closed":
        return Check.not_applicable(rid, f"{ld.model} loop: closed-loop parameter")
    if ld.concurrency is not None and ld.concurrency >= 1:
        return Check.met(rid, f"concurrency {ld.concurrency}")
    return Check.unmet(rid, f"concurrency not defined ({ld.concurrency!r})")


@evaluator("5.1.2-MUST-13")
def _prefix_state(ctx: _Ctx, rid: str) -> Check:
    pc = ctx.facts.prefix_caching
    if pc in ("enabled", "disabled"):
        return Check.met(rid, f"prefix caching {pc}")
    return Check.unmet(rid, f"prefix caching state not defined ({pc!r})")


@evaluator("5.3.2-MUST-1")
def _open_required(ctx: _Ctx, rid: str) -> Check:
    m = ctx.facts.load.model
    if m == "open":
        return Check.met(rid, "open-loop load")
    return Check.unmet(rid, f"{m or 'unknown'}-loop load; 5.3 REQUIRES open loop")


_REQUIRED_WORKLOAD = {"4.3.2-MUST-2": ("long-context",), "5.9.2-MUST-1": ("long-context",),
                      "5.6.2-MUST-1": ("synthetic-skewed",)}
_RECOMMENDED_WORKLOAD = {"5.4.2-SHOULD-1": ("synthetic-uniform", "conversation"),
                         "5.5.2-SHOULD-1": ("synthetic-uniform",), "5.7.2-SHOULD-1": ("code-completion",),
                         "5.8.2-SHOULD-1": ("long-context",), "5.10.2-SHOULD-1": ("conversation",)}


@evaluator(*_REQUIRED_WORKLOAD, *_RECOMMENDED_WORKLOAD)
def _named_workload(ctx: _Ctx, rid: str) -> Check:
    want = _REQUIRED_WORKLOAD.get(rid) or _RECOMMENDED_WORKLOAD[rid]
    base = ctx.facts.workload_base
    if base is None:
        return _need(rid, "workload declaration")
    if base in want:
        derived = f" (derived: {ctx.facts.workload_name})" if ctx.facts.workload_name != base else ""
        return Check.met(rid, f"workload {base}{derived}")
    return Check.unmet(rid, f"workload {base}; expected {' or '.join(want)}")


# ============================================================================================
# The engine
# ============================================================================================


def evaluate_test(test_id: str, procedure_checks: Mapping[str, Check] | None = None,
                  facts: RunFacts | None = None,
                  declarations: Declarations | Mapping[str, Any] | None = None) -> ComplianceResult:
    """Every applicable item of ``test_id`` as a :class:`Check`, and the §2 verdict.

    ``procedure_checks`` (id -> Check) win over evaluators; evaluators answer from ``facts``;
    declarations fill what neither can observe. Unknown ids in ``procedure_checks`` are an error.
    """
    test_id = _check_test_id(test_id)
    reg = registry()
    procedure_checks = dict(procedure_checks or {})
    for rid in procedure_checks:
        reg[rid]  # raises ComplianceError on an invented id
    facts = facts or RunFacts()
    decl = _as_declarations(declarations)
    ctx = _Ctx(facts, decl, procedure_checks)
    checks: list[Check] = []
    notes: list[str] = []
    for req, cond_name in applicable_items(test_id):
        if cond_name is not None:
            cond, desc = _condition(cond_name)  # type: ignore[misc]
            holds = cond(facts, decl)
            if holds is False and req.id not in procedure_checks:
                checks.append(Check(req.id, Status.NOT_APPLICABLE, f"applies only when {desc}", {}, "matrix"))
                continue
            c = ctx.check(req.id)
            if holds is None:
                c = dataclasses.replace(c, reason=f"{c.reason} [applied: unknown whether {desc}]")
            checks.append(c)
        else:
            checks.append(ctx.check(req.id))
    for c in checks:
        if c.id == "4.8.2-MUST-1" and c.evidence.get("disabled"):
            notes.append(f"Safety systems disabled during the test: {', '.join(c.evidence['disabled'])} (§4.8.2)")
        if c.id == "4.5.3-MUST-2" and c.holds:
            notes.append("Cold-start measurement (§4.5.3)")
    if facts.warmup.reduced:
        notes.append("Warm-up reduced below the §4.5.1 minimum by the profile")
    return ComplianceResult(test_id, verdict_of(checks), checks, notes)


def coverage(test_id: str) -> dict[str, list[str]]:
    """Which applicable items of ``test_id`` have which kind of evidence source.

    Keys: ``evaluator`` (general evaluator over RunFacts), ``declaration`` (declaration hook),
    ``procedure`` (MUST/SHOULD nobody else answers: the procedure must supply them),
    ``informational`` (MAY/PARAM/REPORT with no evaluator).
    """
    out: dict[str, list[str]] = {"evaluator": [], "declaration": [], "procedure": [], "informational": []}
    for req, _ in applicable_items(test_id):
        if req.id in DECLARATION_HOOKS:
            out["declaration"].append(req.id)
        elif req.id in EVALUATORS:
            out["evaluator"].append(req.id)
        elif req.in_verdict:
            out["procedure"].append(req.id)
        else:
            out["informational"].append(req.id)
    return out


def procedure_items(test_id: str, *, include_informational: bool = False) -> list[str]:
    """The IDs the procedure of ``test_id`` must evaluate itself (no evaluator, no declaration hook).

    MUST/SHOULD only by default; ``include_informational`` adds the test's PARAM/REPORT/MAY rows
    that nothing else answers. §6 items appear here only for test "6" (the comparison supplies
    them for every compared test); items borrowed from another test (7.4-SHOULD-3 for 5.5) do appear.
    """
    test_id = _check_test_id(test_id)
    reg = registry()
    cov = coverage(test_id)

    def mine(rid: str) -> bool:
        scope = reg[rid].applies_to
        return scope != "general" and (scope != "6" or test_id == "6")

    ids = [i for i in cov["procedure"] if mine(i)]
    if include_informational:
        ids += [i for i in cov["informational"] if mine(i)]
    order = list(reg.items)
    return sorted(ids, key=order.index)
