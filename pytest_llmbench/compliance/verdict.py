"""Checks, the §2 verdict and the per-test result."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..common import draft
from ..common.draft import Verdict
from ..common.jsonable import jsonable
from .registry import LEVELS, VERDICT_LEVELS, registry

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
    #: where the evidence comes from: one of :data:`SOURCES` (set by the engine when empty)
    source: str = ""
    figure: Any = None  # the deciding number (or value) when there is one
    key: str | None = None  # the declaration key that answers (or would answer) this item
    fix: str = ""  # what to do when unmet (from data/compliance_items.yaml or the declaration key)

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
                "evidence": jsonable(self.evidence), "source": self.source, "figure": jsonable(self.figure),
                "key": self.key, "fix": self.fix}

    def item(self, level: str, title: str) -> dict[str, Any]:
        """One ``procedures[].compliance.items[]`` entry of results.json (docs/reports.md)."""
        return {"id": self.id, "level": level, "title": title, "status": self.status.value,
                "source": self.source, "evidence": self.reason, "figure": jsonable(self.figure),
                "key": self.key, "fix": self.fix if self.fails else "", "data": jsonable(self.evidence)}


#: Where an item's evidence comes from (issue 13; docs/slo-and-compliance.md):
#: measured (records, responses, reports, with the figure), declared (file and key, or the
#: simulator's self-declaration), parameter (what the tester chose), runtime-check (a property of
#: the tool checked on this run's data), tool-verified (a capability this run did not exercise,
#: named by the plugin test that exercises it in CI), construction (holds by how the tool is built,
#: e.g. "the client speaks SSE only": no run can make it unmet; the reason is in the evidence),
#: precondition (enforced by refusing to start: a session or loader that lacks it raises before any
#: request, so a completed run always holds it; the reason is in the evidence), self-audit (the tool
#: audits its own recording of each request: unmet only on a client defect or a response that lacks
#: the field), not-applicable (with the reason), none (nothing answered it: unmet).
SOURCES = ("measured", "declared", "parameter", "runtime-check", "tool-verified", "construction", "precondition",
           "self-audit", "not-applicable", "none")
#: item-data labels (data/compliance_items.yaml) of items a completed run holds by how the tool is built,
#: each with the source kind a met outcome carries: ``construction``, ``precondition``, ``self_audit``
LABELS = {"construction": "construction", "precondition": "precondition", "self_audit": "self-audit"}


@dataclass
class ComplianceResult:
    """Every applicable item's :class:`Check` for one test, and the §2 verdict."""

    test_id: str
    verdict: Verdict
    checks: list[Check]
    notes: list[str] = field(default_factory=list)
    #: the declarations the items were judged with (kept so session-level items can be re-judged)
    declarations: Any = field(default=None, repr=False, compare=False)

    def level(self, rid: str) -> str:
        return registry()[rid].level

    def __getitem__(self, rid: str) -> Check:
        for c in self.checks:
            if c.id == rid:
                return c
        raise KeyError(rid)

    def verdict_level(self, rid: str) -> str:
        """The level an item counts at in the §2 verdict: a draft minimum's PARAM row counts as SHOULD."""
        return verdict_level(rid)

    def failing(self, level: str | None = None) -> list[Check]:
        """Unmet (or undeclared) items, optionally of one level (as counted in the verdict)."""
        return [c for c in self.checks if c.fails and (level is None or self.verdict_level(c.id) == level)]

    @property
    def unmet_must(self) -> list[Check]:
        return self.failing("MUST")

    @property
    def unmet_should(self) -> list[Check]:
        """Unmet SHOULDs, the draft minimums below which the run fell among them."""
        return self.failing("SHOULD")

    @property
    def deviations(self) -> list[str]:
        """The draft minimums this run fell below, one line each: ``5.6: 30 per class < 500 (§5.6.2)``."""
        return [deviation_line(self.test_id, c) for c in self.checks if c.fails and c.id in draft.minimums()]

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
        dev = self.deviations
        below = f"; below the draft's minimum: {'; '.join(dev)}" if dev else ""
        return f"{self.test_id}: {self.verdict.value} ({m} MUST unmet, {s} SHOULD unmet{below})"

    def to_json(self) -> dict[str, Any]:
        return {
            "test": self.test_id,
            "verdict": self.verdict.value,
            "unmet_must": [c.id for c in self.unmet_must],
            "unmet_should": [c.id for c in self.unmet_should],
            "deviations": self.deviations,
            "counts": self.counts(),
            "notes": list(self.notes),
            "checks": [dict(c.to_json(), level=self.level(c.id)) for c in self.checks],
            "items": [c.item(self.level(c.id), registry()[c.id].summary) for c in self.checks],
        }


def verdict_level(rid: str) -> str:
    """The level ``rid`` counts at in the §2 verdict: its registry level, except that a row holding the
    run to one of the draft's minimums (``items:`` in ``data/draft.yaml``) counts as a SHOULD
    (our reading, docs/slo-and-compliance.md "Draft minimums")."""
    return "SHOULD" if rid in draft.minimums() else registry()[rid].level


def deviation_line(test_id: str, c: Check) -> str:
    """``5.6: 30 per class < 500 (§5.6.2)``: an unmet minimum's reason with the section of its number."""
    names = draft.minimums().get(c.id, ())
    sections = sorted({draft.section(n) for n in names}) or ["§" + registry()[c.id].section]
    return f"{test_id}: {c.reason} ({', '.join(sections)})"


def verdict_of(checks: Iterable[Check]) -> Verdict:
    """Draft §2 on a set of checks: MUST and SHOULD items, a draft minimum's row counting as a SHOULD
    (:func:`verdict_level`); MAY and other PARAM/REPORT rows are ignored."""
    must_fail = should_fail = False
    for c in checks:
        lvl = verdict_level(c.id)
        if c.fails and lvl == "MUST":
            must_fail = True
        elif c.fails and lvl == "SHOULD":
            should_fail = True
    if must_fail:
        return Verdict.NOT_COMPLIANT
    return Verdict.CONDITIONAL if should_fail else Verdict.UNCONDITIONAL
