"""The §2 verdict of a comparison (test "6", issue 32): formed from the §6.1–§6.4 items of a
:class:`~.systems.SystemComparison`.

The rule is the draft's §2 rule as :func:`pytest_llmbench.compliance.verdict_of` applies it (the gate
and the compliance package are sibling layers, so the gate applies it to its own items;
tests/test_section6_verdict.py holds the two to the same answer): a MUST not met, or needing a
declaration, makes the comparison *not compliant*; a SHOULD, or a row of one of the draft's minimums
(``items:`` in ``data/draft.yaml``: 6.3-PARAM-1, at least 3 runs per system), *conditionally
compliant*; PARAM and REPORT rows are shown, not counted. Exit status of ``compare``
(docs/regression-gate.md): 3 when a 6.1 MUST is *not met*; a 6.1 MUST that needs a declaration is a
warning unless ``--require-section6`` is given.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..common import draft
from ..common.draft import VERDICTS

__all__ = ["VERDICTS", "Section6Verdict", "level_of", "section6_verdict"]

_LEVEL = re.compile(r"-(MUST|SHOULD|MAY|PARAM|REPORT)-\d+$")
FAILING = ("not met", "needs declaration")


def level_of(rid: str) -> str:
    """The level an item counts at in the §2 verdict: its id's level, a draft minimum's row as SHOULD."""
    if rid in draft.minimums():
        return "SHOULD"
    m = _LEVEL.search(rid)
    if m is None:
        raise ValueError(f"{rid!r} is not a requirement id")
    return m.group(1)


@dataclass(frozen=True)
class Section6Verdict:
    """The comparison's §2 verdict and the items it was formed from (``CheckItem``s of systems.py)."""

    verdict: str
    items: tuple[Any, ...]

    def _failing(self, level: str, status: str | None = None) -> list[Any]:
        return [i for i in self.items if level_of(i.id) == level
                and (i.status == status if status else i.status in FAILING)]

    @property
    def unmet_must(self) -> list[Any]:
        """MUST items not met or needing a declaration."""
        return self._failing("MUST")

    def _must61(self, status: str) -> list[Any]:
        return [i for i in self._failing("MUST", status) if i.id.startswith("6.1-")]

    @property
    def must61_not_met(self) -> list[Any]:
        """6.1 MUSTs the evidence shows unmet: exit status 3."""
        return self._must61("not met")

    @property
    def unmet_should(self) -> list[Any]:
        """SHOULD items, a draft minimum's row among them, not met or needing a declaration."""
        return self._failing("SHOULD")

    @property
    def must61_undeclared(self) -> list[Any]:
        """6.1 MUSTs only a declaration can answer: a warning (exit status 3 with --require-section6)."""
        return self._must61("needs declaration")

    @property
    def deviations(self) -> list[str]:
        """Draft minimums the comparison fell below: ``6: 1 run per system < 3 (§6.3)``."""
        mins = draft.minimums()
        return [f"6: {i.detail} ({', '.join(sorted({draft.section(n) for n in mins[i.id]}))})"
                for i in self.items if i.id in mins and i.status in FAILING]

    def summary(self) -> str:
        """``6: not compliant (1 MUST unmet, 0 SHOULD unmet; needs declaration: 6.1-MUST-3)``."""
        parts = [f"{len(self.unmet_must)} MUST unmet, {len(self.unmet_should)} SHOULD unmet"]
        bad = [i.id for i in self.unmet_must if i.status == "not met"]
        if bad:
            parts.append("not met: " + ", ".join(bad))
        undeclared = [i.id for i in self.unmet_must if i.status == "needs declaration"]
        if undeclared:
            parts.append("needs declaration: " + ", ".join(undeclared))
        if self.deviations:
            parts.append("below the draft's minimum: " + "; ".join(self.deviations))
        return f"6: {self.verdict} ({'; '.join(parts)})"

    def to_json(self) -> dict[str, Any]:
        """The verdict as a document (``report.comparison.section6_lines`` renders it)."""
        return {"test": "6", "verdict": self.verdict, "summary": self.summary(),
                "unmet_must": [i.id for i in self.unmet_must], "unmet_should": [i.id for i in self.unmet_should],
                "deviations": self.deviations, "items": [dict(i.__dict__, level=level_of(i.id)) for i in self.items]}


def section6_verdict(items: Sequence[Any]) -> Section6Verdict:
    """Draft §2 over the comparison's items (``id``, ``status``: met, not met, needs declaration, n/a)."""
    levels = [(level_of(i.id), i.status in FAILING) for i in items]
    if any(lvl == "MUST" and bad for lvl, bad in levels):
        verdict = VERDICTS[2]
    elif any(lvl == "SHOULD" and bad for lvl, bad in levels):
        verdict = VERDICTS[1]
    else:
        verdict = VERDICTS[0]
    return Section6Verdict(verdict, tuple(items))
