"""Byte-for-byte check of the document writer against a kept session (issue 45: no behaviour change).

``capture`` runs a pytest session (the arguments after ``--``) with a plugin that keeps, beside the
report directory, what the document writer was given: the final :class:`~pytest_llmbench.session.SessionResult`
(``golden/session.pkl``), under ``--llm-compare`` each test's result as the gate judged it and the
gate's verdict for it (``golden/tests.pkl``, ``golden/tests.json``). ``check`` rebuilds from those,
with the code of the checkout it runs in, the document, every report, the CSV exports and the per-test
verdicts, and compares them byte for byte with the files the captured session wrote. Nothing is
normalised: the document's times come from the session. (A pickle holds the classes by name: a kept
session is read by checkouts whose result classes have not moved.)

    python bench/golden_document.py capture /tmp/doc-baseline-report -- suites --llm-report /tmp/doc-baseline-report
    python bench/golden_document.py check /tmp/doc-baseline-report
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import pickle
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

REPORT_FILES = ("results.json", "report.md", "report.html", "summary.md", "levels.csv", "requests.csv")


class _Capture:
    """Keeps what the plugin handed the document builder and the gate (a pytest plugin object)."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.tests: list[dict[str, Any]] = []
        self.tests_pickled: list[bytes] = []

    def pytest_sessionstart(self, session: Any) -> None:
        from pytest_llmbench.gate.sessiongate import SessionGate
        from pytest_llmbench.plugin import SESSION_KEY

        bench = session.config.stash[SESSION_KEY].session
        original_result = bench.result
        capture = self

        def result(**kw: Any) -> Any:
            res = original_result(**kw)
            blob = pickle.dumps(res)
            if kw.get("command_line") is not None:  # the final one (plugin.pytest_sessionfinish)
                (capture.out / "session.pkl").write_bytes(blob)
            else:
                capture.tests_pickled.append(blob)
            return res

        bench.result = result
        original_check = SessionGate.check_test

        def check_test(gate: Any, doc: Any, nodeid: str) -> Any:
            verdict = original_check(gate, doc, nodeid)
            capture.tests.append({"nodeid": nodeid, "failures": verdict.failures,
                                  "comparison": verdict.comparison.to_json() if verdict.comparison else None})
            return verdict

        SessionGate.check_test = check_test  # type: ignore[method-assign]

    def pytest_unconfigure(self, config: Any) -> None:
        if self.tests:
            (self.out / "tests.json").write_text(json.dumps(self.tests, indent=1, sort_keys=True), encoding="utf-8")
            (self.out / "tests.pkl").write_bytes(pickle.dumps(self.tests_pickled))


def capture(report_dir: Path, pytest_args: list[str]) -> int:
    import pytest

    out = report_dir / "golden"
    out.mkdir(parents=True, exist_ok=True)
    return int(pytest.main(pytest_args, plugins=[_Capture(out)]))


def _writer(result: Any, gate: Any) -> Any:
    """The plugin's hook implementations (its module and its session object) without a pytest session."""
    from types import SimpleNamespace

    import pluggy

    from pytest_llmbench import hookspecs, plugin

    pm = pluggy.PluginManager("pytest")
    pm.add_hookspecs(hookspecs)
    pm.register(plugin)
    pm.register(plugin.LLMBenchPlugin(None, SimpleNamespace(settings=result.settings), gate), "llmbench-session")
    return pm


def rebuild(result: Any, out: Path, gate: Any = None) -> dict[str, Any]:
    """The document of ``result`` as the plugin writes it, and its reports and exports in ``out``; with the
    one writer (issue 45), also written a second time by the same writer (its entries from its cache)."""
    from pytest_llmbench.report import write_reports

    import pytest_llmbench.plugin as plugin

    if hasattr(plugin, "write_document"):  # the one document writer (issue 45)
        hook = _writer(result, gate).hook
        doc = plugin.write_document(hook, None, result)
        again = plugin.write_document(hook, None, result)
        print(f"{'same' if again == doc else 'DIFFERENT'}: the document written again from the writer's cache")
        if again != doc:
            raise SystemExit(1)
    else:  # the base commit: the builder, then the plugin's comparison
        from pytest_llmbench.document.build import build_document

        doc = build_document(result)
        if gate is not None and gate.comparing:
            doc["comparison"] = gate.comparison(doc)
    write_reports(doc, out, environ={})
    try:
        from pytest_llmbench.document.exports import write_exports
    except ImportError:
        from pytest_llmbench.document.build import write_exports
    write_exports(doc, out)
    return doc


def _gate(settings: Any) -> Any:
    from pytest_llmbench.gate.sessiongate import SessionGate
    from pytest_llmbench.session import resummarize_run

    return SessionGate(settings, resummarize=resummarize_run) if settings.compare else None


def check(report_dir: Path) -> int:
    golden = report_dir / "golden"
    result = pickle.loads((golden / "session.pkl").read_bytes())
    bad: list[str] = []
    with tempfile.TemporaryDirectory(prefix="golden-document-") as tmp:
        out = Path(tmp)
        (out / "runs").symlink_to((report_dir / "runs").resolve(), target_is_directory=True)
        rebuild(result, out, _gate(result.settings))
        for name in REPORT_FILES:
            same = filecmp.cmp(out / name, report_dir / name, shallow=False)
            print(f"{'same' if same else 'DIFFERENT'}: {name}")
            if not same:
                bad.append(name)
                shutil.copy(out / name, golden / f"rebuilt-{name}")
        bad += _check_tests(golden, result.settings)
    print("byte for byte" if not bad else f"differences: {', '.join(bad)} (rebuilt copies in {golden})")
    return 1 if bad else 0


def _check_tests(golden: Path, settings: Any) -> list[str]:
    """Each test's gate verdict again, from the result the plugin judged it on."""
    if not (golden / "tests.json").is_file():
        return []
    import pytest_llmbench.plugin as plugin

    kept = json.loads((golden / "tests.json").read_text(encoding="utf-8"))
    results = [pickle.loads(b) for b in pickle.loads((golden / "tests.pkl").read_bytes())]
    gate = _gate(settings)
    again = []
    hook = _writer(results[-1], gate).hook if hasattr(plugin, "gate_document") else None
    for entry, result in zip(kept, results, strict=True):
        if hook is not None:  # one writer for the session, as the plugin keeps one
            doc = plugin.gate_document(hook, None, result)
        else:
            from pytest_llmbench.document.build import build_document

            doc = build_document(result)
        verdict = gate.check_test(doc, entry["nodeid"])
        again.append({"nodeid": entry["nodeid"], "failures": verdict.failures,
                      "comparison": verdict.comparison.to_json() if verdict.comparison else None})
    same = json.dumps(again, indent=1, sort_keys=True) == json.dumps(kept, indent=1, sort_keys=True)
    print(f"{'same' if same else 'DIFFERENT'}: per-test gate verdicts ({len(kept)} tests)")
    return [] if same else ["per-test gate verdicts"]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=("capture", "check"))
    ap.add_argument("report_dir", type=Path)
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    rest = [a for a in args.rest if a != "--"]
    if args.command == "capture":
        return capture(args.report_dir, rest)
    return check(args.report_dir)


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    raise SystemExit(main(sys.argv[1:]))
