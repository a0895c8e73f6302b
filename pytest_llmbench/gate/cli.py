"""Command line: ``python -m pytest_llmbench.gate compare A B [C …] [--fail RULE …]`` and ``… history``.

``compare`` prints the comparison's §2 verdict (test "6", formed from the §6.1–§6.4 items:
gate/section6.py). Its exit status, first that applies:

* 2: bad input (a rule, a run that cannot be found), or a compared pair refused as not comparable
  (§6.1) while ``--fail`` rules were given;
* 1: a ``--fail`` rule is violated;
* 3: a 6.1 MUST is *not met* (identical workload, same boundary, comparable hardware or normalised,
  same load), or, with ``--require-section6``, a 6.1 MUST needs a declaration;
* 0: otherwise. A 6.1 MUST that needs a declaration (e.g. hardware on two machines, undeclared) is
  printed as a warning and does not change the status, so a regression gate on one machine keeps working.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from ..common.files import write_text_atomic
from ..measure.samples import Resummarize
from .compare import compare
from .history import history, render_history
from .present import render_comparison
from .rules import RuleError, parse_rules
from .section6 import Section6Verdict
from .storage import DEFAULT_STORAGE, GateStorageError, list_runs, load_run
from .systems import compare_systems, render_html, render_markdown, render_text

__all__ = ["compare_main", "history_main", "main"]


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


def _side(ref: str, storage: str, resummarize: Resummarize | None) -> list:
    return [load_run(part, storage, resummarize=resummarize) for part in ref.split("+")]


def compare_main(argv: Sequence[str] | None = None, *, resummarize: Resummarize | None = None) -> int:
    """``compare A B [C …]``: side-by-side table of stored runs (§6) and, against the first (the
    baseline), each later one with its changes, CIs and ``--fail`` rules."""
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
        sides = [_side(r, args.storage, resummarize) for r in args.runs]
    except (RuleError, GateStorageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if len(sides) < 2:
        print("error: give a baseline and at least one run to compare with it", file=sys.stderr)
        return 2
    comps = [compare(sides[0], s, rules, force=args.force, confidence=args.confidence) for s in sides[1:]]
    singles = [s[0] for s in sides]
    system = compare_systems(singles, gpus=_kv(args.gpus, "--gpus"), prices=_kv(args.price, "--price"),
                             repetitions=[len(s) for s in sides])
    text = render_text(system) + "\n\n" + "\n\n".join(render_comparison(c) for c in comps)
    if args.recount:
        from .recount import recount_text

        text += "\n\n" + "\n\n".join(recount_text(sides[0][0], s[0]) for s in sides[1:])
    print(text)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    gate_md = "\n\n## Compared with baseline\n\n```\n" + "\n\n".join(render_comparison(c) for c in comps) + "\n```\n"
    write_text_atomic(out / "compare.md", render_markdown(system) + gate_md)
    write_text_atomic(out / "compare.html", render_html(system).replace(
        "</body>", "<h2>Compared with baseline</h2><pre>" + _html_escape("\n\n".join(render_comparison(c) for c in comps))
        + "</pre></body>"))
    write_text_atomic(out / "compare.json", json.dumps({"systems": system.to_json(),
                                                        "comparisons": [c.to_json() for c in comps]}, indent=2) + "\n")
    print(f"written: {out / 'compare.md'}, {out / 'compare.html'}, {out / 'compare.json'}")
    for note in dict.fromkeys(n for side in sides for r in side for n in r.notes):
        print(f"note: {note}", file=sys.stderr)
    if rules and any(c.violations for c in comps):
        return 1
    if rules and any(c.refused for c in comps):
        return 2
    return section6_status(system.verdict, require=args.require_section6)


def section6_status(v: Section6Verdict, *, require: bool = False) -> int:
    """3 when a §6.1 MUST is not met (or, with ``require``, needs a declaration); else 0, with a warning
    on stderr for a §6.1 MUST only a declaration can answer."""
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


def _html_escape(s: str) -> str:
    import html

    return html.escape(s)


def history_main(argv: Sequence[str] | None = None) -> int:
    """``history [--metric ttft.p99] [--test ID]``: a test's stored runs over time, change points marked."""
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
        series = history(runs, args.metric, test=args.test, detect=not args.no_detect)
    except RuleError as exc:
        print(f"error: --metric: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps([s.to_json() for s in series], indent=2) if args.json else render_history(series))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in ("compare", "history"):
        print("usage: python -m pytest_llmbench.gate {compare,history} ...", file=sys.stderr)
        return 2
    return (compare_main if argv[0] == "compare" else history_main)(argv[1:])
