"""Regression gating, repeated runs and system comparison (§6), independent of pytest.

* :mod:`.storage` — save a session's results document + per-request samples under ``.llmbench/``
  (``0001_<commit>_<UTC time>``), list and load them by counter, name, path or ``latest``;
* :mod:`.rules` — fail rules ``ttft.p99:10%``, ``e2e.p99:50ms``;
* the CIs of a change (bootstrap, across-run Student-t) are :mod:`pytest_llmbench.measure.stats.significance`;
* :mod:`.compare` — comparability (§6.1) and verdicts; :mod:`.repeated` — §6.3 across-run stats;
* :mod:`.systems` — side-by-side report with §6.1/§6.2/§6.4; :mod:`.history` — change points;
* :mod:`.cli` — ``compare_main`` / ``history_main``.
"""

from ..measure.stats.significance import Change
from .compare import Comparison, Difference, FigureOutcome, IncomparableRunsError, check_comparable, compare
from .present import junit_properties, render_comparison, render_comparison_markdown
from .repeated import RunsSummary, across_runs, summarize_runs
from .rules import Rule, RuleError, parse_rule, parse_rules
from .storage import DEFAULT_STORAGE, GateStorageError, StoredRun, list_runs, load_run, save

__all__ = [
    "Change", "Comparison", "DEFAULT_STORAGE", "Difference", "FigureOutcome", "GateStorageError",
    "IncomparableRunsError", "Rule", "RuleError", "RunsSummary", "StoredRun", "across_runs", "check_comparable",
    "compare", "junit_properties", "list_runs", "load_run", "parse_rule", "parse_rules", "render_comparison", "render_comparison_markdown", "save", "summarize_runs",
]
