"""CHANGELOG.md's newest entries are the versions the code writes: the results schema (code,
``document/schema.json``) and the run-records format."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pytest_llmbench.common.records import RECORDS_FORMAT
from pytest_llmbench.document.schema import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[1]


def _newest(section: str) -> str:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    body = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    versions = re.findall(r"^- \*\*(\d+\.\d+)\*\*", body, flags=re.M)
    assert versions, f"no version entries under '## {section}'"
    return versions[0]


def test_results_schema_version_agrees_everywhere() -> None:
    schema = json.loads((ROOT / "pytest_llmbench" / "document" / "schema.json").read_text(encoding="utf-8"))
    in_schema = re.search(r"results-(\d+\.\d+)\.json$", schema["$id"]).group(1)
    assert SCHEMA_VERSION == in_schema == _newest("Results document"), (
        "a schema bump updates document/schema.py, the $id of document/schema.json and CHANGELOG.md")


def test_records_format_agrees_with_the_changelog() -> None:
    assert RECORDS_FORMAT == _newest("Run records"), "a records-format bump gets a CHANGELOG.md entry"
