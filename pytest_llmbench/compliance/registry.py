"""The draft's items (``data/requirements.yaml``) and the applicability matrix (``data/applicability.yaml``).

The tests are the draft's: every scope of ``data/requirements.yaml`` besides ``general`` (the
procedures §5.1–§5.10 and the comparison §6), in draft order (:func:`draft_tests`), plus any procedure
registered from outside the package with its own items (:func:`add_requirements`, called by
``procedures/pipeline.py`` for a ``ProcedureRun`` that declares ``requirements``). A new procedure of the
draft therefore needs its items in ``data/requirements.yaml`` and nothing here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

#: the scope of the items that bind no one test (data/requirements.yaml ``applies_to``)
GENERAL = "general"
LEVELS = ("MUST", "SHOULD", "MAY", "PARAM", "REPORT")
VERDICT_LEVELS = ("MUST", "SHOULD")
STANDARD_WORKLOADS = ("synthetic-uniform", "synthetic-skewed", "conversation", "code-completion", "long-context")
#: Boundary names (§4.1) as a declaration or a server may spell them -> settings.BOUNDARIES
BOUNDARY_ALIASES = {
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
    tests: tuple[str, ...]  # in draft order (draft_tests())

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
    """The draft's 325 items plus the applicability matrix, loaded once from package data (with the
    items :func:`add_requirements` added) and checked by every function in :data:`VALIDATORS`."""
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
    for test, added in _ADDED.items():
        for req in added:
            if req.id in items:
                raise ComplianceError(f"procedure {test}: requirement {req.id} is already an item of "
                                      f"data/requirements.yaml (or of another procedure)")
            items[req.id] = req
    tests = _draft_order({r.applies_to for r in items.values()} - {GENERAL})
    matrix = _load_yaml("applicability.yaml")
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
        for t in _tests_of(r.get("always", []), n, tests):
            cells[t] = None
        for cond, ts in (r.get("when") or {}).items():
            for t in _tests_of(ts, n, tests):
                if t in cells:
                    raise ComplianceError(f"applicability.yaml row {n}: test {t} listed twice")
                cells[t] = str(cond)
        rows.append(_Row(tuple(ids), cells, str(r.get("note", ""))))
    reg = _Registry(items, tuple(rows), tests)
    for validate in VALIDATORS:
        validate(reg)
    return reg


def _draft_order(tests: Iterable[str]) -> tuple[str, ...]:
    """``5.2`` before ``5.10``, and ``6`` after every procedure of §5."""
    return tuple(sorted(tests, key=lambda t: tuple(int(x) for x in t.split("."))))


#: items of procedures the shipped data/requirements.yaml does not hold, by test (add_requirements)
_ADDED: dict[str, tuple[Requirement, ...]] = {}


def add_requirements(test_id: str, items: Iterable[Mapping[str, Any]]) -> None:
    """The items of procedure ``test_id`` that the shipped ``data/requirements.yaml`` does not hold (a
    procedure registered through the entry point ``pytest_llmbench.procedures``), in that file's form:
    ``id``, ``level``, ``section``, ``summary``, ``check`` (``applies_to`` is ``test_id``). The rows of
    ``data/applicability.yaml`` that apply to every test apply to it too."""
    test_id = str(test_id)
    reqs = []
    for d in items:
        missing = [k for k in ("id", "level", "section", "summary", "check") if k not in d]
        if missing:
            raise ComplianceError(f"procedure {test_id}: requirement {dict(d).get('id', '?')!r} lacks "
                                  f"{', '.join(missing)} (the fields of data/requirements.yaml)")
        if str(d["level"]) not in LEVELS:
            raise ComplianceError(f"procedure {test_id}: requirement {d['id']} has unknown level {d['level']}")
        if str(d.get("applies_to", test_id)) != test_id:
            raise ComplianceError(f"procedure {test_id}: requirement {d['id']} applies to {d['applies_to']}")
        reqs.append(Requirement(id=str(d["id"]), level=str(d["level"]), section=str(d["section"]),
                                applies_to=test_id, summary=str(d["summary"]), check=str(d["check"])))
    if not reqs:
        raise ComplianceError(f"procedure {test_id}: no requirement to add")
    _ADDED[test_id] = tuple(reqs)
    registry.cache_clear()


def draft_tests() -> tuple[str, ...]:
    """The draft's tests in draft order: the procedures (§5.1–§5.10 and any added with its items) and
    the comparison (§6), each the scope (``applies_to``) of its own items."""
    return registry().tests


def check_test(test_id: str) -> str:
    """``test_id`` if it is one of :func:`draft_tests`, else a :class:`ComplianceError` that names what a new
    procedure lacks: its items in ``data/requirements.yaml`` (``applies_to: <id>``)."""
    return _check_test_id(test_id)


def _tests_of(value: Any, n: int, tests: tuple[str, ...]) -> list[str]:
    if value == "all":
        return list(tests)
    out = [str(v) for v in value]
    for t in out:
        if t not in tests:
            raise ComplianceError(f"applicability.yaml row {n}: unknown test {t!r} (no item of "
                                  "data/requirements.yaml applies to it)")
    return out


def _check_test_id(test_id: str) -> str:
    t = str(test_id).strip()
    t = t.removeprefix("§")
    known = draft_tests()
    if t not in known:
        raise ComplianceError(f"unknown test {test_id!r}: no item of data/requirements.yaml has applies_to: {t!r} "
                              "and no procedure added its own (ProcedureRun.requirements); tests are "
                              f"{', '.join(known)}")
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


