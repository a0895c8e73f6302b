#!/usr/bin/env python3
"""Memory and time of the user's own command at growing request counts (issues 30 and 46).

    python bench/memory.py                                  # 10,000, 100,000 and 1,000,000 requests
    python bench/memory.py --requests 10000,30000           # chosen sizes
    python bench/memory.py --requests 10000 --keep /tmp/m   # keep the report directories
    python bench/memory.py --url http://127.0.0.1:8000/v1   # a server already running
    python bench/memory.py --path session                   # the side path (a Session, document.build)

Starts the reference mock ``shared/tools/mock_openai_server.py`` (``--ttft-ms 0 --itl-ms 0 --tokens
50 --no-stats``) unless ``--url`` is given. Per size it writes, as a new user would, a test file::

    @pytest.mark.llm_procedure("5.1", workload="synthetic-uniform", load=closed(64), requests=N)
    def test_5_1(llm_result): ...

and runs ``pytest <file> --llm-endpoint URL --llm-boundary model-engine --llm-max-duration 0
--junitxml …`` in a fresh process under ``/usr/bin/time -f %M`` (the default ``--path pytest``: the
user's path, every report and export written: results.json, report.md, report.html, summary.md,
requests.csv, JUnit XML, the terminal summary). Per size it prints:

* the outcome, the requests sent and answered, the wall time of the pytest process;
* its max RSS (``/usr/bin/time``'s ``%M``) and the start-up footprint (max RSS of the same command with
  ``--collect-only``: the package, pytest and the plugin loaded), and RSS per 1,000 requests beyond it;
* where the time went: the plugin's ``pytest_llmbench.timing`` log lines (measurement, summary,
  document, each report and export), read from ``--log-file``;
* the load average (``os.getloadavg``) when the process started and when it ended.

``--path session`` runs the older side path: procedure 5.1 through a :class:`Session` and
``document.build`` in a child, with its agreement check against the in-memory summary.

Figures are printed, never asserted (the CI-sized slope is ``tests/test_user_path_memory.py``). Target
(issue 46): max RSS under 1 GB at 1,000,000 requests, at most 0.75 MB per 1,000 requests beyond the
start-up footprint.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Iterator
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MARK = "MEMORY-BENCH-RESULT "
MB = 1024.0  # ru_maxrss is in KiB on Linux


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / MB


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# ----------------------------------------------------------------------------------------------
# the child: one size, one process
# ----------------------------------------------------------------------------------------------


def _differences(a: Any, b: Any, path: str = "", out: list[str] | None = None, limit: int = 12) -> list[str]:
    """Where two JSON-ready values differ (first ``limit`` paths)."""
    out = [] if out is None else out
    if len(out) >= limit:
        return out
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'procedure' if k in a else 'in-memory'}")
            else:
                _differences(a[k], b[k], f"{path}/{k}", out, limit)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            out.append(f"{path}: {len(a)} vs {len(b)} entries")
        else:
            for i, (x, y) in enumerate(zip(a, b)):
                _differences(x, y, f"{path}[{i}]", out, limit)
    elif a != b and not (a != a and b != b):  # NaN equals NaN here
        out.append(f"{path}: {a!r} vs {b!r}")
    return out


def _agreement(result: Any) -> dict[str, Any]:
    """The procedure's RunMetrics against ``summarize(list of the run's records read back)``."""
    from pytest_llmbench.common.storage import load_run
    from pytest_llmbench.measure.summary import summarize
    from pytest_llmbench.procedures.run import itl_decision_for

    run = next(r for r in result.runs if r.label == "measure")
    stored = load_run(run.run_dir)
    records = stored.records
    decision = itl_decision_for(records)
    load = stored.metadata.loads[0]  # the load's start and end of sending (run.json), as the procedure passes them
    send_end = min(int(load["send_end_ns"]), max(r.sent_ns for r in records if r.phase == "measure"))
    memory = summarize(records, itl_option=decision.option, send_window_ns=(int(load["start_ns"]), send_end))
    a, b = result.metrics.to_json(per_request=True), memory.to_json(per_request=True)
    keys = {"ttft_p50_s": ("distributions", "ttft", "p50"), "ttft_p99_s": ("distributions", "ttft", "p99"),
            "tpot_p50_s": ("distributions", "tpot", "p50"), "e2e_p99_s": ("distributions", "e2e", "p99")}

    def pick(m: Any, what: tuple[str, str, str]) -> float | None:
        d = m.distributions.get(what[1])
        return None if d is None or not d.n else d.percentile(float(what[2][1:])).value

    return {
        "records": len(records),
        "itl_option": [result.metrics.itl_option, decision.option],
        "key_figures": {k: [pick(result.metrics, w), pick(memory, w)] for k, w in keys.items()},
        "identical": json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True),
        "differences": _differences(a, b),
    }


def child(args: argparse.Namespace) -> None:
    """Run 5.1 at ``args.child`` requests and print one JSON line of figures."""
    load_start, t_start = _load(), time.perf_counter()
    from pytest_llmbench.document.build import build_document
    from pytest_llmbench.procedures.base import get_procedure
    from pytest_llmbench.procedures.loads import closed
    from pytest_llmbench.session import Session
    from pytest_llmbench.settings import Settings

    n = args.child
    settings = Settings(endpoint=args.url, boundary="model-engine", profile="standard", report=Path(args.report),
                        seed=42, sources={"boundary": "bench/memory.py"})
    session = Session(settings)
    try:
        session.get_sut()
        _ = session.tokenizer
        startup = _maxrss_mb()
        proc = get_procedure("5.1")
        params = proc.make_params("standard", {"requests": n, "load": closed(args.concurrency),
                                               "max_output_tokens": args.tokens})
        t0 = time.perf_counter()
        result = session.run(proc, params)
        t_proc = time.perf_counter() - t0
        after_proc = _maxrss_mb()
        build_document(session.result(complete=True))
        t_doc = time.perf_counter() - t0 - t_proc
        after_doc = _maxrss_mb()
    finally:
        session.close()
    out: dict[str, Any] = {
        "requests": n, "sent": result.runs[0].load.get("sent") if result.runs else None,
        "ok": result.runs[0].load.get("ok") if result.runs else None,
        "wall_s": round(time.perf_counter() - t_start, 1), "procedure_s": round(t_proc, 1),
        "document_s": round(t_doc, 1),
        "startup_mb": round(startup, 1), "maxrss_procedure_mb": round(after_proc, 1),
        "maxrss_document_mb": round(after_doc, 1), "load_start": load_start, "load_end": _load(),
    }
    if n <= args.agree_at:
        out["agreement"] = _agreement(result)
    print(MARK + json.dumps(out), flush=True)


# ----------------------------------------------------------------------------------------------
# the parent: the mock, one child per size, the table
# ----------------------------------------------------------------------------------------------


def _per_1000(row: dict[str, Any], key: str) -> float:
    return (row[key] - row["startup_mb"]) / (row["requests"] / 1000)


def _print(row: dict[str, Any], previous: dict[str, Any] | None) -> None:
    print(f"\n{row['requests']:,} requests ({row['sent']} sent, {row['ok']} ok): wall {row['wall_s']} s "
          f"(procedure {row['procedure_s']} s, document {row['document_s']} s); "
          f"load average {row['load_start']} at start, {row['load_end']} at end")
    print(f"  start-up footprint {row['startup_mb']:.0f} MB; max RSS {row['maxrss_procedure_mb']:.0f} MB after the "
          f"procedure ({_per_1000(row, 'maxrss_procedure_mb'):.2f} MB per 1,000 requests beyond the footprint), "
          f"{row['maxrss_document_mb']:.0f} MB after the document ({_per_1000(row, 'maxrss_document_mb'):.2f} MB "
          "per 1,000)")
    if previous is not None:
        span = (row["requests"] - previous["requests"]) / 1000
        print(f"  marginal: {(row['maxrss_procedure_mb'] - previous['maxrss_procedure_mb']) / span:.2f} MB per 1,000 "
              f"requests from {previous['requests']:,} to {row['requests']:,} (procedure), "
              f"{(row['maxrss_document_mb'] - previous['maxrss_document_mb']) / span:.2f} (document)")
    agree = row.get("agreement")
    if agree:
        figures = ", ".join(f"{k} {v[0]!r} vs {v[1]!r}" for k, v in agree["key_figures"].items())
        print(f"  agreement with summarize(list of {agree['records']} records read back), ITL option "
              f"{agree['itl_option'][0]} vs {agree['itl_option'][1]}: "
              + ("identical (RunMetrics.to_json(per_request=True))" if agree["identical"] else "DIFFERENT"))
        print(f"    key figures (procedure vs in-memory): {figures}")
        for d in agree["differences"]:
            print(f"    {d}")
    sys.stdout.flush()


def _wait_quiet(max_load: float | None, max_wait: float) -> None:
    if max_load is None:
        return
    deadline = time.monotonic() + max_wait
    while os.getloadavg()[0] >= max_load and time.monotonic() < deadline:
        print(f"  (load average {_load()}: waiting for the 1-minute load below {max_load})", flush=True)
        time.sleep(30)


@contextlib.contextmanager
def _server(args: argparse.Namespace) -> Iterator[str]:
    """``--url``, or the reference mock started for the bench (bench/loadgen.py's, the same way) and
    stopped after it."""
    if args.url is not None:
        yield args.url
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from loadgen import find_mock, start_mock

    mock, url = start_mock(find_mock(args.mock), args.tokens)
    try:
        yield url
    finally:
        mock.terminate()
        mock.wait(10)


def parent(args: argparse.Namespace) -> None:
    rows: list[dict[str, Any]] = []
    with _server(args) as url:
        for n in args.requests:
            if args.max_rss_gb and rows:
                slope = max(_per_1000(r, "maxrss_document_mb") for r in rows)
                projected = rows[0]["startup_mb"] + slope * n / 1000
                if projected > args.max_rss_gb * 1024:
                    print(f"\n{n:,} requests: not run, projected max RSS {projected / 1024:.1f} GB "
                          f"({slope:.2f} MB per 1,000) is above --max-rss-gb {args.max_rss_gb}")
                    continue
            _wait_quiet(args.max_load, args.max_wait)
            with tempfile.TemporaryDirectory(prefix="llmbench-mem-") as tmp:
                report = Path(args.keep) / f"n{n}" if args.keep else Path(tmp)
                env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
                cmd = [sys.executable, __file__, "--child", str(n), "--url", url, "--report", str(report),
                       "--concurrency", str(args.concurrency), "--tokens", str(args.tokens),
                       "--agree-at", str(args.agree_at)]
                proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True)
                line = next((x for x in proc.stdout.splitlines() if x.startswith(MARK)), None)
                if proc.returncode or line is None:
                    raise SystemExit(f"{n} requests: the child failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}")
                rows.append(json.loads(line[len(MARK):]))
                _print(rows[-1], rows[-2] if len(rows) > 1 else None)


# ----------------------------------------------------------------------------------------------
# the user's path: pytest in a process of its own, reports on
# ----------------------------------------------------------------------------------------------

TEST_FILE = """
import pytest
from pytest_llmbench import closed


@pytest.mark.llm_procedure("5.1", workload="synthetic-uniform", load=closed({concurrency}), requests={n},
                           max_output_tokens={tokens})
def test_5_1(llm_result):
    assert llm_result.metrics is not None
"""

TIMING_LOGGER = "pytest_llmbench.timing"


def _timed_pytest(cwd: Path, url: str, extra: list[str]) -> tuple[subprocess.CompletedProcess[str], float, float]:
    """``pytest`` under ``/usr/bin/time -f %M``: the process, its max RSS in MB and its wall time."""
    rss_file = cwd / "maxrss.txt"
    cmd = ["/usr/bin/time", "-f", "%M", "-o", str(rss_file), sys.executable, "-m", "pytest", "test_memory.py",
           "--llm-endpoint", url, "--llm-boundary", "model-engine", "--llm-max-duration", "0",
           "-p", "no:cacheprovider", "-p", "no:randomly", *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t0
    return proc, int(rss_file.read_text().split()[-1]) / MB, wall


def _timings(log: Path) -> list[tuple[str, float]]:
    """The plugin's ``pytest_llmbench.timing`` lines: ``<what>: <seconds> s``."""
    out: list[tuple[str, float]] = []
    if not log.is_file():
        return out
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if TIMING_LOGGER not in line:
            continue
        what, _, secs = line.split(TIMING_LOGGER, 1)[1].strip().rpartition(":")
        try:
            out.append((what.strip(), float(secs.strip().removesuffix("s").strip())))
        except ValueError:
            continue
    return out


def _pytest_size(args: argparse.Namespace, url: str, n: int, tmp: Path) -> dict[str, Any]:
    """One size on the user's path: start-up footprint, then the run with every report."""
    (tmp / "test_memory.py").write_text(TEST_FILE.format(n=n, concurrency=args.concurrency, tokens=args.tokens))
    _, startup, _ = _timed_pytest(tmp, url, ["--collect-only", "-q"])
    load_start = _load()
    log = tmp / "pytest.log"
    proc, rss, wall = _timed_pytest(tmp, url, [
        "-q", "--junitxml", str(tmp / "junit.xml"), "--llm-report", str(tmp / "llmbench-report"),
        "--log-file", str(log), "--log-file-level", "INFO", "--log-file-format", "%(name)s %(message)s"])
    sent = ok = 0
    for records in sorted((tmp / "llmbench-report").glob("runs/*/measure/records.jsonl")):
        with records.open("rb") as f:  # streamed: the bench must not hold the run either
            for line in f:
                if line.strip():
                    sent += 1
                    ok += b'"error_type": null' in line or b'"error_type":null' in line
    outcome = next((ln for ln in reversed(proc.stdout.splitlines()) if " passed" in ln or " failed" in ln
                    or " error" in ln), f"exit {proc.returncode}")
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{n} requests: pytest exited {proc.returncode}:\n{proc.stdout[-4000:]}")
    return {"requests": n, "sent": sent, "ok": ok, "outcome": outcome.strip(), "wall_s": round(wall, 1),
            "startup_mb": round(startup, 1), "maxrss_mb": round(rss, 1), "timings": _timings(log),
            "load_start": load_start, "load_end": _load()}


def _print_pytest(row: dict[str, Any], previous: dict[str, Any] | None) -> None:
    per = (row["maxrss_mb"] - row["startup_mb"]) / (row["requests"] / 1000)
    print(f"\n{row['requests']:,} requests ({row['sent']} sent, {row['ok']} ok), pytest: {row['outcome']}; "
          f"wall {row['wall_s']} s; load average {row['load_start']} at start, {row['load_end']} at end")
    print(f"  max RSS {row['maxrss_mb']:.0f} MB; start-up footprint {row['startup_mb']:.0f} MB (--collect-only); "
          f"{per:.3f} MB per 1,000 requests beyond it")
    if previous is not None:
        span = (row["requests"] - previous["requests"]) / 1000
        print(f"  marginal: {(row['maxrss_mb'] - previous['maxrss_mb']) / span:.3f} MB per 1,000 requests from "
              f"{previous['requests']:,} to {row['requests']:,}")
    if row["timings"]:
        print("  where the time went: " + "; ".join(f"{w} {s:.1f} s" for w, s in row["timings"]))
    else:
        print(f"  where the time went: no {TIMING_LOGGER} lines in the log")
    sys.stdout.flush()


def parent_pytest(args: argparse.Namespace) -> None:
    rows: list[dict[str, Any]] = []
    with _server(args) as url:
        for n in args.requests:
            _wait_quiet(args.max_load, args.max_wait)
            with tempfile.TemporaryDirectory(prefix="llmbench-mem-") as tmp_name:
                tmp = Path(args.keep) / f"n{n}" if args.keep else Path(tmp_name)
                tmp.mkdir(parents=True, exist_ok=True)
                rows.append(_pytest_size(args, url, n, tmp))
                _print_pytest(rows[-1], rows[-2] if len(rows) > 1 else None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=lambda t: [int(x) for x in t.split(",")], default=[10_000, 100_000, 1_000_000],
                    help="comma-separated request counts, one child process each")
    ap.add_argument("--url", default=None, help="an OpenAI-compatible base URL already running (skips the mock)")
    ap.add_argument("--mock", type=Path, default=None,
                    help="path of mock_openai_server.py (default: ../shared/tools/ beside the checkout)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=50, help="answer length (the mock's --tokens and 5.1's output cap)")
    ap.add_argument("--agree-at", type=int, default=10_000,
                    help="compare with the in-memory summary at sizes up to this many requests")
    ap.add_argument("--keep", default=None, help="keep each size's report directory under this directory")
    ap.add_argument("--max-rss-gb", type=float, default=None,
                    help="skip a size whose max RSS, projected from the smaller sizes, is above this")
    ap.add_argument("--max-load", type=float, default=None,
                    help="before each size wait until the 1-minute load average is below this")
    ap.add_argument("--max-wait", type=float, default=600.0, help="--max-load: wait at most this many seconds")
    ap.add_argument("--path", choices=("pytest", "session"), default="pytest",
                    help="pytest: the user's command with every report (default); session: the side path")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--report", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args)
    elif args.path == "session":
        parent(args)
    else:
        parent_pytest(args)


if __name__ == "__main__":
    main()
