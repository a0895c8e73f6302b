"""The regression gate inside a benchmark session (§6), without pytest: what the plugin calls.

:class:`SessionGate` is built from the session's settings (``--llm-compare``, ``--llm-compare-fail``,
``--llm-compare-force``, ``--llm-save``/``--llm-autosave``, ``--llm-storage``). It judges one test
right after its procedure ran (:meth:`check_test`, so the test's own outcome carries the verdict),
puts the whole comparison into the results document (:meth:`comparison`) and stores the session
(:meth:`save`). It renders nothing: the plugin renders :attr:`SessionGate.last` and
:attr:`SessionGate.section6` through ``report/comparison.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..measure.samples import Resummarize
from .compare import Comparison, compare
from .rules import Rule, RuleError, parse_rules
from .section6 import Section6Verdict
from .storage import GateStorageError, StoredRun, list_runs, load_run, machine_fingerprint, save

__all__ = ["SessionGate", "TestVerdict"]


@dataclass
class TestVerdict:
    """One test compared with the baseline: failure messages (empty when it passes) and the comparison
    (whose document ``report.comparison.junit_properties`` turns into the test's JUnit properties)."""

    failures: list[str] = field(default_factory=list)
    comparison: Comparison | None = None


class SessionGate:
    """Rules, baseline and stored history of one session; raises ``RuleError``/``GateStorageError``
    (each naming the option) on a bad rule or a baseline that cannot be found."""

    def __init__(self, settings: Any, *, resummarize: Resummarize | None = None,
                 machine_info: Callable[[], dict[str, Any]] = machine_fingerprint) -> None:
        self.settings = settings
        #: summarises a run again when a report directory's run has no samples file (storage.collect_samples)
        self.resummarize = resummarize
        #: this host's fingerprint (the plugin hands its generate/update_machine_info hooks), asked once
        self._machine_info = machine_info
        self._machine: dict[str, Any] | None = None
        src = settings.sources
        try:
            self.rules: list[Rule] = parse_rules(list(settings.compare_fail or []))
        except RuleError as exc:
            raise RuleError(f"{src.get('compare_fail', '--llm-compare-fail')}: {exc}") from None
        if self.rules and not settings.compare:
            raise RuleError(f"{src.get('compare_fail', '--llm-compare-fail')}: fail rules need a baseline: add "
                            "--llm-compare [ID|NAME|PATH] (default: the latest stored run)")
        from .storage import _NAME_RE

        if settings.save and not _NAME_RE.match(str(settings.save)):
            raise GateStorageError(f"{src.get('save', '--llm-save')}: name {settings.save!r}: use 1-80 letters, digits, "
                                   "'.', '_' or '-' (starting with a letter or digit)")
        self.baseline: StoredRun | None = None
        self.history: list[StoredRun] = []
        if settings.compare:
            try:
                self.baseline = load_run(settings.compare, settings.storage, resummarize=resummarize)
            except GateStorageError as exc:
                raise GateStorageError(f"{src.get('compare', '--llm-compare')}: {exc}") from None
            self.history = list_runs(settings.storage)
        self.last: Comparison | None = None
        self.saved: StoredRun | None = None
        #: the session against the baseline as a §6 comparison: its §2 verdict (test "6", section6.py)
        self.section6: Section6Verdict | None = None

    @property
    def machine(self) -> dict[str, Any]:
        """The machine this session runs on, as stored with it and compared by 6.1-MUST-3."""
        if self._machine is None:
            self._machine = dict(self._machine_info())
        return self._machine

    @property
    def comparing(self) -> bool:
        return self.baseline is not None

    @property
    def saving(self) -> bool:
        return bool(self.settings.save or self.settings.autosave)

    def _compare(self, doc: Mapping[str, Any]) -> Comparison:
        assert self.baseline is not None
        this = StoredRun.in_memory(doc, report_dir=self.settings.report, resummarize=self.resummarize)
        return compare(self.baseline, this, self.rules, force=bool(self.settings.compare_force),
                       history=self.history)

    def check_test(self, doc: Mapping[str, Any], nodeid: str) -> TestVerdict:
        """Compare the procedure ``nodeid`` used with the same test in the baseline.

        Fails (messages) on a violated rule, or on a refused pair when rules are given; a forced
        pair is compared and says so.
        """
        if self.baseline is None:
            return TestVerdict()
        procs = [p for p in doc.get("procedures") or [] if nodeid in (p.get("tests") or [])]
        if not procs:
            return TestVerdict()
        comp = self._compare({**doc, "procedures": procs})
        out = TestVerdict(comparison=comp)
        for pair in comp.pairs:
            if pair.refused and self.rules:
                out.failures.append(f"llmbench compare: {pair.title}: {pair.note}")
        out.failures += [o.message for o in comp.outcomes_for_test(nodeid) if o.failed]
        return out

    def comparison(self, doc: Mapping[str, Any]) -> dict[str, Any] | None:
        """The whole session compared with the baseline, for the document's ``comparison`` key."""
        if self.baseline is None:
            return None
        self.last = self._compare(doc)
        from .systems import compare_systems

        this = StoredRun.in_memory(doc, report_dir=self.settings.report, resummarize=self.resummarize)
        this.meta["machine"] = self.machine  # this session ran here (6.1-MUST-3 from observation)
        # each side with its repetitions (a run of --llm-runs N counts as N, §6.3)
        self.section6 = compare_systems([self.baseline, this]).verdict
        return {**self.last.to_json(), "section6_verdict": self.section6.to_json()}

    def notes(self) -> list[str]:
        """What reading the baseline or storing the session did that the user should know (runs of a
        report directory summarised again because they had no samples file), each once."""
        runs = [r for r in (self.baseline, self.saved) if r is not None]
        return list(dict.fromkeys(n for r in runs for n in r.notes))

    def save(self) -> StoredRun | None:
        """Store the session's report directory (after results.json was written) when asked to."""
        if not self.saving:
            return None
        extra = {"compare_forced": bool(self.last and any(p.forced for p in self.last.pairs))}
        self.saved = save(self.settings.report, self.settings.storage, name=self.settings.save or None, extra=extra,
                          resummarize=self.resummarize, machine=self.machine)
        return self.saved
