"""Reports (App. C): render ``results.json`` (versioned, ``schema.json``) as ``report.md`` and ``report.html``.

This package only renders a document: ``document.build.build_document`` computes every figure before,
and nothing here imports what measures (import-linter contract in pyproject.toml). The plugin
calls :func:`write_reports` with the document at session end and prints :func:`terminal_rows`;
:func:`rebuild` (``python -m pytest_llmbench report``) renders ``report.md`` and ``report.html``
again from a stored ``results.json``, byte for byte. Files are written atomically (temporary
file + ``os.replace``). :mod:`.comparison` renders the regression gate's comparison documents (the
plugin's "compared with baseline" section and JUnit properties, ``python -m pytest_llmbench
compare|history``); it is imported by name, so rendering a report does not load it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..common.files import write_text_atomic
from ..common.timing import timed
from ..document.schema import SCHEMA_VERSION, ReportError, dumps_document, load_document, schema
from .render import render_html, render_markdown, render_summary
from .terminal import rows_from_document

__all__ = [
    "REPORT_FILES",
    "ReportError",
    "SCHEMA_VERSION",
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
SUMMARY_FILE = "summary.md"
REPORT_FILES = (RESULTS_FILE, MARKDOWN_FILE, HTML_FILE, SUMMARY_FILE)
#: GitHub's PR-comment limit is 65,536 characters; summary.md stays below this.
SUMMARY_LIMIT = 60_000
SUMMARY_ENV = "GITHUB_STEP_SUMMARY"

def _render_all(doc: Mapping[str, Any], out_dir: Path) -> dict[str, Path]:
    paths = {"markdown": out_dir / MARKDOWN_FILE, "html": out_dir / HTML_FILE, "summary": out_dir / SUMMARY_FILE}
    with timed("report: report.md"):
        write_text_atomic(paths["markdown"], render_markdown(doc))
    with timed("report: report.html"):
        write_text_atomic(paths["html"], render_html(doc))
    with timed("report: summary.md"):
        write_text_atomic(paths["summary"], render_summary(doc, HTML_FILE, limit=SUMMARY_LIMIT))
    return paths


def write_reports(doc: Mapping[str, Any], out_dir: str | os.PathLike[str] | None = None, *,
                  environ: Mapping[str, str] | None = None) -> dict[str, Path]:
    """Write results.json, report.md, report.html and summary.md of ``doc`` (default: its ``report_dir``).

    When ``$GITHUB_STEP_SUMMARY`` names a file, summary.md (< 60,000 characters) is appended to it.
    Returns the paths written (keys ``json``, ``markdown``, ``html``, ``summary``, maybe ``step_summary``).
    """
    env = os.environ if environ is None else environ
    target = Path(out_dir) if out_dir is not None else Path(str(doc.get("report_dir") or "llmbench-report"))
    target.mkdir(parents=True, exist_ok=True)
    paths = {"json": target / RESULTS_FILE}
    with timed("report: results.json"):
        write_text_atomic(paths["json"], dumps_document(doc))
    paths.update(_render_all(doc, target))
    summary = env.get(SUMMARY_ENV)
    if summary:
        with open(summary, "a", encoding="utf-8", newline="") as f:
            f.write(paths["summary"].read_text(encoding="utf-8"))
        paths["step_summary"] = Path(summary)
    return paths


def terminal_rows(doc: Mapping[str, Any], report_path: str | os.PathLike[str] | None = None) -> list[str]:
    """The terminal summary of a document: one row per procedure run, verdicts, and the report path."""
    return rows_from_document(doc, Path(report_path).as_posix() if report_path is not None else None)


def rebuild(results_json: str | os.PathLike[str], out_dir: str | os.PathLike[str] | None = None) -> dict[str, Path]:
    """Render report.md, report.html and summary.md again from a results.json (default: next to it)."""
    src = Path(results_json)
    doc = load_document(src)
    target = Path(out_dir) if out_dir is not None else src.parent
    target.mkdir(parents=True, exist_ok=True)
    return _render_all(doc, target)
