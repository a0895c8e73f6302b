"""Regression gating, repeated runs and system comparison (§6), independent of pytest.

The gate builds comparison documents; it neither summarises records (the session wrote each run's
samples beside its records) nor renders (``report/comparison.py`` does; the package CLI
``python -m pytest_llmbench compare|history`` and the plugin call both).

* :mod:`.storage` — save a session's results document + per-request samples under ``.llmbench/``
  (``0001_<commit>_<UTC time>``), list and load them by counter, name, path or ``latest``;
* :mod:`.rules` — fail rules ``ttft.p99:10%``, ``e2e.p99:50ms``;
* :mod:`.compare` — comparability (§6.1) and verdicts, with the CIs of a change from
  :mod:`pytest_llmbench.measure.stats.significance`; :mod:`.repeated` — §6.3 across-run stats;
* :mod:`.systems` — side by side with §6.1/§6.2/§6.4 and :mod:`.section6` its §2 verdict;
  :mod:`.history` — a figure over stored runs with change points; :mod:`.recount` — output text
  recounted in the reference tokenizer (§4.4.2); :mod:`.sessiongate` — the gate inside a session.
"""

from ..measure.stats.significance import Change
from .compare import Comparison, Difference, FigureOutcome, IncomparableRunsError, check_comparable, compare
from .repeated import RunsSummary, across_runs, summarize_runs
from .rules import Rule, RuleError, parse_rule, parse_rules
from .storage import DEFAULT_STORAGE, GateStorageError, StoredRun, list_runs, load_run, save

__all__ = [
    "Change", "Comparison", "DEFAULT_STORAGE", "Difference", "FigureOutcome", "GateStorageError",
    "IncomparableRunsError", "Rule", "RuleError", "RunsSummary", "StoredRun", "across_runs", "check_comparable",
    "compare", "list_runs", "load_run", "parse_rule", "parse_rules", "save", "summarize_runs",
]
