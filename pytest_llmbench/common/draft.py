"""The draft's numbers (``data/draft.yaml``), the profiles (``data/profiles.yaml``) and the §2 verdicts.

One home for every minimum, RECOMMENDED and fixed value of draft-gaikwad-llm-benchmarking-methodology-00
that the plugin uses: parameter defaults, profiles and compliance thresholds all read them here, by
name (``value("warmup.min_requests")``), so changing a number in the data file changes behaviour.
The three outcomes of draft §2 (:class:`Verdict`) live here too, below both the compliance engine
that reaches them and the gate that applies the same rule to a comparison (sibling layers).
"""

from __future__ import annotations

import enum
import functools
from importlib import resources
from typing import Any

import yaml

__all__ = ["VERDICTS", "DraftError", "Verdict", "entry", "minimums", "names", "profiles", "section", "value"]

PROFILE_NAMES = ("smoke", "standard", "full")
_REF = "draft:"


class Verdict(str, enum.Enum):
    """The three outcomes of draft §2."""

    UNCONDITIONAL = "unconditionally compliant"
    CONDITIONAL = "conditionally compliant"
    NOT_COMPLIANT = "not compliant"

    def __str__(self) -> str:
        return self.value


#: the §2 outcomes as the documents spell them, best first
VERDICTS: tuple[str, ...] = tuple(v.value for v in Verdict)


class DraftError(KeyError):
    """A name that is not in ``data/draft.yaml`` (or a profile of an unknown procedure)."""


def _load(name: str) -> Any:
    return yaml.safe_load(resources.files("pytest_llmbench").joinpath("data", name).read_text(encoding="utf-8"))


def _frozen(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


@functools.cache
def _numbers() -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for group, entries in _load("draft.yaml").items():
        for key, e in entries.items():
            if not isinstance(e, dict) or "value" not in e or "section" not in e:
                raise DraftError(f"data/draft.yaml: {group}.{key} needs a value and a section")
            out[f"{group}.{key}"] = e
    return out


def names() -> list[str]:
    """Every name of ``data/draft.yaml`` (``group.key``)."""
    return list(_numbers())


def entry(name: str) -> dict[str, Any]:
    """One number with its section, kind and the draft's words."""
    try:
        return _numbers()[name]
    except KeyError:
        raise DraftError(f"{name!r} is not a number of data/draft.yaml") from None


def value(name: str) -> Any:
    """The draft's value for ``name`` (a list becomes a tuple)."""
    return _frozen(entry(name)["value"])


def section(name: str) -> str:
    """``§4.5.1`` for ``warmup.min_requests``."""
    return "§" + str(entry(name)["section"])


@functools.cache
def _minimums() -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for name, e in _numbers().items():
        for rid in e.get("items") or ():
            if e.get("kind") != "minimum":
                raise DraftError(f"data/draft.yaml: {name} names items but is not a minimum")
            out.setdefault(str(rid), []).append(name)
    return {rid: tuple(ns) for rid, ns in out.items()}


def minimums() -> dict[str, tuple[str, ...]]:
    """Requirement rows that hold a run to one of the draft's minimums ("Minimum", "At least"), with the
    numbers behind each (``items:`` in ``data/draft.yaml``): ``{"5.6.2-PARAM-3": ("fairness.min_requests_per_class",)}``.

    Our reading (docs/slo-and-compliance.md): such a row counts as a SHOULD for the §2 verdict.
    """
    return dict(_minimums())


def _resolve(v: Any) -> Any:
    if isinstance(v, str) and v.startswith(_REF):
        return value(v[len(_REF):])
    return _frozen(v)


@functools.cache
def _profiles() -> dict[str, dict[str, dict[str, Any]]]:
    raw = _load("profiles.yaml")
    return {str(pid): {prof: {k: _resolve(v) for k, v in (over or {}).items()} for prof, over in per.items()}
            for pid, per in raw.items() if not str(pid).startswith("_")}


def profiles(procedure: str) -> dict[str, dict[str, Any]]:
    """``{"smoke": {...}, "standard": {...}, "full": {...}}``: one procedure's overrides of its parameters."""
    try:
        per = _profiles()[procedure]
    except KeyError:
        raise DraftError(f"data/profiles.yaml has no procedure {procedure!r}") from None
    return {name: dict(per.get(name, {})) for name in PROFILE_NAMES}
