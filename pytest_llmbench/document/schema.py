"""The ``results.json`` document as a format: its version, its JSON Schema (``schema.json`` beside
this module), how it is written and read back. The builder (``document.build``) and the renderers
(``report/``) both depend on this module and on nothing of each other.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = ["SCHEMA_VERSION", "ReportError", "dumps_document", "load_document", "schema"]

#: Version of the results.json layout; a reader renders every document of the same major version.
#: 1.1: figures carry units in ``metrics`` (the metric registry's entries for every figure shown).
#: 1.2: ``headline``, ``compliance_overview``, optional ``comparison``; per procedure ``order``, ``warnings``,
#: ``sweep``, ``summary_level``; per test ``label`` and ``warnings``; procedures in draft order;
#: ``procedures[].compliance.items[]`` (per-item evidence, source, key, fix).
#: 1.4: per procedure result what the procedure declares: ``primary_run``, ``key_figures``, ``sweep``,
#: ``warnings`` (kind and text), ``overlays`` (the headline and plots aggregate them); ``tests[].slo_results``
#: (every SLO judged on a test, body ``assert_slo`` included); client-delay figures carry ``error_ms`` (the
#: delay propagated to the figure); ``headline.findings`` (each kind of finding once). 1.3 documents still render.
#: 1.5: a procedure table's numeric cells keep the number with its unit (``{"value", "unit"}``, optional
#: ``digits``, ``label``, ``signed``; or a list of words and numbers), shown by the report's one formatter
#: (units.format_cell); documents before 1.5, whose cells are strings, still render.
#: 1.6: ``runs[].telemetry`` (the server's /metrics series over each run, measure/telemetry.py), per procedure
#: ``server_view``, plots ``server_timeline`` and ``server_levels``; documents before 1.6 (no series) still render.
#: Also optional since 1.6: ``compliance.deviations`` (minimums counted as SHOULDs), ``comparison.section6_verdict``,
#: ``runs[].extra.itl_decision`` (App. B.2.1) and the measurements ``token_counting_option``/``_tokenizer``.
#: 1.7: each run's ``metrics.definitions_version`` (2: throughput over the send window [start + 0.1·D, start + D]
#: with every request's streamed tokens; documents without it were summarised under version 1, which the gate
#: does not compare with 2), distributions ``ttft_from_schedule`` and ``e2e_from_schedule`` (formerly
#: ``schedule_latency``); the gate's comparison documents carry each outcome's unit family and each difference's text.
#: 1.8: SLO verdicts PASS, FAIL or INCONCLUSIVE from a bound (issue 47): ``tests[].slo_results[]`` ``outcome``
#: INCONCLUSIVE and ``method``, ``verdict_confidence``, ``bound``, ``limit``, ``judged``, ``exceedances``,
#: ``needed_more``, ``design_effect`` (``look`` when the run stopped when decided); ``tests[].verdict``
#: INCONCLUSIVE; ``headline.tests.inconclusive``; settings ``slo_confidence``, ``inconclusive`` and
#: ``stop_when_decided``. Documents before 1.8 (two-way outcomes, no bound) still render.
#: 1.9: a run whose arrivals followed a rate shape (issue 50) keeps ``runs[].extra.rate_shape`` (offered, scheduled
#: and achieved rate and TTFT P50/P99 per 5-s window, the schedule and its seed; ``$defs/rate_schedule``), and its
#: load parameters the schedule (arrival kind ``shaped``). Documents before 1.9 (no rate shape) still render.
#: 1.9: optional ``metrics.sessions`` of a multi-turn session run (issue 50): TTFT and cached prompt tokens by
#: turn index, per-session totals. Documents before 1.9 (no sessions) still render.
#: 1.9: per procedure ``dataset_lengths`` (the Conversation workload's drawn length percentiles beside App. A.3.2,
#: the dataset file, its SHA-256 and its identification as the draft's file or not); documents before 1.9 still render.
SCHEMA_VERSION = "1.9"


class ReportError(ValueError):
    """A results.json that cannot be rebuilt (names the file and the problem)."""


def schema() -> dict[str, Any]:
    """The JSON Schema of ``results.json`` (``document/schema.json``)."""
    text = resources.files("pytest_llmbench.document").joinpath("schema.json").read_text(encoding="utf-8")
    return json.loads(text)


def dumps_document(doc: Mapping[str, Any]) -> str:
    """``results.json`` text: indented, UTF-8, no NaN (strict JSON)."""
    return json.dumps(doc, ensure_ascii=False, indent=1, allow_nan=False) + "\n"


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


