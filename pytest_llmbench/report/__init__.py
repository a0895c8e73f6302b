"""Reports (App. C): ``results.json`` (versioned, ``schema.json``), ``report.md``, ``report.html``.

The plugin calls :func:`write_reports` at session end and prints :func:`terminal_rows`. Every
format is rendered from one JSON document (:func:`build_document`), which is what
``results.json`` holds; :func:`rebuild` renders ``report.md`` and ``report.html`` again from it,
byte for byte. Files are written atomically (temporary file + ``os.replace``).
"""

from __future__ import annotations

import json
import os
import weakref
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from ..storage import write_text_atomic
from .document import SCHEMA_VERSION, build_document
from .render import render_html, render_markdown, render_summary
from .terminal import rows_from_document

__all__ = [
    "REPORT_FILES",
    "ReportError",
    "SCHEMA_VERSION",
    "build_document",
    "dumps_document",
    "load_document",
    "rebuild",
    "render_html",
    "render_markdown",
    "render_summary",
    "schema",
    "terminal_rows",
    "write_reports",
]

RESULTS_FILE = "results.json"
MARKDOWN_FILE = "report.md"
HTML_FILE = "report.html"
REPORT_FILES = (RESULTS_FILE, MARKDOWN_FILE, HTML_FILE)
SUMMARY_ENV = "GITHUB_STEP_SUMMARY"

# the last document written per session, so the terminal summary shows what the files show
_LAST: weakref.WeakKeyDictionary[Any, tuple[dict[str, Any], str]] = weakref.WeakKeyDictionary()


class ReportError(ValueError):
    """A results.json that cannot be rebuilt (names the file and the problem)."""


def schema() -> dict[str, Any]:
    """The JSON Schema of ``results.json`` (``report/schema.json``)."""
    text = resources.files("pytest_llmbench.report").joinpath("schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def dumps_document(doc: Mapping[str, Any]) -> str:
    """``results.json`` text: indented, UTF-8, no NaN (strict JSON)."""
    return json.dumps(doc, ensure_ascii=False, indent=1, allow_nan=False) + "\n"


def _render_all(doc: Mapping[str, Any], out_dir: Path) -> dict[str, Path]:
    paths = {"markdown": out_dir / MARKDOWN_FILE, "html": out_dir / HTML_FILE}
    write_text_atomic(paths["markdown"], render_markdown(doc))
    write_text_atomic(paths["html"], render_html(doc))
    return paths


def write_reports(session: Any, complete: bool = True, *, environ: Mapping[str, str] | None = None) -> dict[str, Path]:
    """Build the document and write results.json, report.md and report.html to the report directory.

    When ``$GITHUB_STEP_SUMMARY`` names a file, a short Markdown summary is appended to it.
    Returns the paths written (keys ``json``, ``markdown``, ``html`` and maybe ``step_summary``).
    """
    env = os.environ if environ is None else environ
    doc = build_document(session, complete, environ=env)
    out_dir = Path(getattr(getattr(session, "settings", None), "report", "llmbench-report"))
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / RESULTS_FILE}
    write_text_atomic(paths["json"], dumps_document(doc))
    paths.update(_render_all(doc, out_dir))
    report_path = paths["html"].as_posix()
    try:
        _LAST[session] = (doc, report_path)
    except TypeError:  # pragma: no cover - an object that cannot be weakly referenced
        pass
    summary = env.get(SUMMARY_ENV)
    if summary:
        with open(summary, "a", encoding="utf-8", newline="") as f:
            f.write(render_summary(doc, report_path))
        paths["step_summary"] = Path(summary)
    return paths


def terminal_rows(session: Any) -> list[str]:
    """The terminal summary: one row per procedure run, verdicts, and the report path."""
    cached = _LAST.get(session) if _safe_hashable(session) else None
    path: str | None
    if cached is not None:
        doc, path = cached
    else:
        doc = build_document(session, not getattr(session, "interrupted", False))
        report = Path(getattr(getattr(session, "settings", None), "report", "llmbench-report")) / HTML_FILE
        path = report.as_posix() if report.is_file() else None
    return rows_from_document(doc, path)


def _safe_hashable(obj: Any) -> bool:
    try:
        weakref.ref(obj)
        hash(obj)
    except TypeError:
        return False
    return True


def load_document(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a results.json and check it is a report document this version can render."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReportError(f"{p}: cannot read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise ReportError(f"{p}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or "schema_version" not in doc:
        raise ReportError(f"{p}: not a pytest-llmbench results.json (no schema_version)")
    major = str(doc["schema_version"]).split(".")[0]
    if major != SCHEMA_VERSION.split(".")[0]:
        raise ReportError(f"{p}: schema_version {doc['schema_version']} is not supported "
                          f"(this version renders {SCHEMA_VERSION})")
    return doc


def rebuild(results_json: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None) -> dict[str, Path]:
    """Render report.md and report.html again from a results.json (default: next to it)."""
    src = Path(results_json)
    doc = load_document(src)
    target = Path(out_dir) if out_dir is not None else src.parent
    target.mkdir(parents=True, exist_ok=True)
    return _render_all(doc, target)
