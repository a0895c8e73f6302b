"""The draft's benchmarking procedures (§5.1–§5.10), one module each, found by file name; see pipeline.py.

Importing this package registers every procedure, with no list to keep: each ``p5_<n>_<name>.py``
module of this folder (imported in draft order, as ``measure/registry`` finds the metric families by
directory) and each module named by an entry point of the group ``pytest_llmbench.procedures`` (a
procedure of another distribution; its ``pyproject.toml``: ``[project.entry-points."pytest_llmbench.procedures"]``
``"5.11" = "mypackage.p5_11_mine"``). A module's ``pipeline.ProcedureRun`` subclass registers itself.
The procedure modules import the shared modules of this folder (``base``, ``result``, ``loads``,
``budget``, ``run``, ``facts``, ``sendlag``, ``sample``, ``capacity``, ``coldstart``, ``figures``, ``helpers``,
``prompts``, ``pipeline``), never this package's list and never each other.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from importlib import metadata

from .base import ProcedureError, procedure_ids

__all__ = ["ENTRY_POINT_GROUP", "MODULE_NAME", "module_names"]

#: the entry-point group a procedure outside the package registers through
ENTRY_POINT_GROUP = "pytest_llmbench.procedures"
#: a procedure module's file name: ``p5_<n>_<name>`` for procedure ``5.<n>``
MODULE_NAME = re.compile(r"p5_(?P<n>[1-9][0-9]*)_\w+")


def module_names() -> list[str]:
    """The procedure modules of this folder (``p5_<n>_<name>``), in draft order (5.2 before 5.10)."""
    found = [i.name for i in pkgutil.iter_modules(__path__) if MODULE_NAME.fullmatch(i.name)]
    return sorted(found, key=lambda name: int(MODULE_NAME.fullmatch(name)["n"]))  # type: ignore[index]


def _import(module: str, where: str) -> None:
    """Import one procedure module; it must register a procedure (its ``ProcedureRun`` subclass)."""
    before = set(procedure_ids())
    try:
        importlib.import_module(module)
    except ProcedureError:
        raise
    except Exception as exc:
        raise ProcedureError(f"procedure module {module} ({where}) failed to import: "
                             f"{type(exc).__name__}: {exc}") from exc
    if set(procedure_ids()) == before and module not in _registered_modules():
        raise ProcedureError(f"procedure module {module} ({where}) registers no procedure: it defines no "
                             "pipeline.ProcedureRun subclass with an id")


def _registered_modules() -> set[str]:
    from .base import get_procedure

    return {get_procedure(pid).module for pid in procedure_ids()}


def _discover() -> None:
    for name in module_names():
        _import(f"{__name__}.{name}", f"procedures/{name}.py")
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep.dist, "name", None) or "?"
        _import(ep.value.split(":", 1)[0], f"entry point {ep.name!r} of {ENTRY_POINT_GROUP}, distribution {dist}")


_discover()
