"""The draft's items (``data/requirements.yaml``) and the applicability matrix (``data/applicability.yaml``)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

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


#: Checks of the loaded registry against what is registered elsewhere; ``engine`` adds its own (every
#: condition of applicability.yaml is known, every registered item id exists), so this module imports
#: nothing of the engine.
VALIDATORS: list[Callable[[_Registry], None]] = []


@functools.cache
def registry() -> _Registry:
    """The draft's 325 items plus the applicability matrix, loaded once from package data and
    checked by every function in :data:`VALIDATORS`."""
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
            for t in _tests_of(ts, n):
                if t in cells:
                    raise ComplianceError(f"applicability.yaml row {n}: test {t} listed twice")
                cells[t] = str(cond)
        rows.append(_Row(tuple(ids), cells, str(r.get("note", ""))))
    reg = _Registry(items, tuple(rows))
    for validate in VALIDATORS:
        validate(reg)
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
    t = t.removeprefix("§")
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


