"""Requests and wall time to a settled SLO verdict: 5.1 stopped when decided against its fixed plan (issue 47).

Against the embedded simulator, 5.1 in the ``standard`` profile (10,000 measured requests, the draft's
warm-up) at a declared Poisson rate: first the fixed plan (no stopping), whose TTFT distribution is taken
as the truth; then, for one SLO on that percentile far from, near and at the truth, the same run with
``--llm-stop-when-decided`` (``Session.run(..., stop=StopRequest(...))``). Per SLO it prints the verdict,
the look it settled at, the requests sent and the measured run's and the whole procedure's wall time,
beside the fixed plan's requests, wall time and verdict (judged once on all its requests at the same
confidence), and the load average at the start and end of each run.

* far: the threshold at 5x the truth's percentile (no request beyond it);
* near: at the truth's P99.5 for a P99 SLO (about half the allowed share beyond it: PASS is reachable);
* at: the truth's own percentile (the share beyond is the limit: INCONCLUSIVE, the run goes to its plan,
  or a verdict that is an error of at most 1 - confidence).

    python bench/slo_stopping.py [--rate 20] [--percentile 99] [--confidence 0.95] [--time-scale 0.25]

``--requests`` and ``--warmup-requests`` replace the plan's 10,000 and the draft's warm-up (a quick check of
the script, e.g. ``--requests 600 --warmup-requests 10 --rate 40 --percentile 90``; figures need the
standard plan).
Run it on a quiet machine: the simulator and the client share its cores.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _run(session: Any, rate: float, check: dict[str, Any], stop: Any) -> dict[str, Any]:
    """One 5.1 run in the standard profile (``check``: smaller counts for a check of the script); its figures."""
    from pytest_llmbench.procedures.base import get_procedure
    from pytest_llmbench.procedures.loads import poisson

    proc = get_procedure("5.1")
    overrides: dict[str, Any] = {"load": poisson(rate=rate), **check}
    params = proc.make_params("standard", overrides)
    load_start = _load()
    t0 = time.perf_counter()
    result = session.run(proc, params, stop)
    wall = time.perf_counter() - t0
    run = result.primary_summary()
    return {"result": result, "planned": params.requests, "sent": int(run.load.get("sent") or 0),
            "run_s": float(run.load.get("duration_s") or 0.0), "procedure_s": wall,
            "load": f"{load_start} -> {_load()}"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=20.0, help="declared Poisson rate, req/s (default 20)")
    ap.add_argument("--percentile", type=float, default=99.0, help="the SLO's TTFT percentile (default 99)")
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--requests", type=int, default=None, help="instead of the standard plan's 10,000 (a check)")
    ap.add_argument("--warmup-requests", type=int, default=None,
                    help="instead of the draft's 100 warm-up requests and 10,000 tokens (a check: 1/100 of the tokens)")
    ap.add_argument("--time-scale", type=float, default=0.25, help="simulator time scale (default 0.25)")
    ap.add_argument("--report", default=None, help="report directory (default: a temporary one)")
    a = ap.parse_args()

    from pytest_llmbench.measure.slo import evaluate, format_quantity, set_default_confidence
    from pytest_llmbench.procedures.base import StopRequest
    from pytest_llmbench.session import Session
    from pytest_llmbench.settings import Settings

    set_default_confidence(a.confidence)
    report = Path(a.report or tempfile.mkdtemp(prefix="llmbench-slo-stopping-"))
    settings = Settings(profile="standard", report=report, seed=42, time_scale=a.time_scale, slo_confidence=a.confidence,
                        sources={"profile": "bench/slo_stopping.py"})
    session = Session(settings)
    try:
        session.get_sut()
        _ = session.tokenizer
        print(f"5.1, standard profile, Poisson {a.rate:g} req/s against the embedded simulator (time scale "
              f"{a.time_scale:g}); SLOs on TTFT P{a.percentile:g} at {a.confidence:.0%}; report {report}")
        check: dict[str, Any] = {} if a.requests is None else {"requests": a.requests}
        if a.warmup_requests is not None:
            check.update(warmup_requests=a.warmup_requests, warmup_tokens=100 * a.warmup_requests)
        if check:
            print(f"CHECK of the script, not figures: {check}")
        fixed = _run(session, a.rate, check, None)
        metrics = fixed["result"].metrics
        q = a.percentile
        truth = metrics.percentile("ttft", q).value
        near_q = q + (100.0 - q) / 2.0  # half the allowed share beyond
        thresholds = {"far": 5.0 * truth, "near": metrics.percentile("ttft", near_q).value, "at": truth}
        print(f"fixed plan: {fixed['sent']:,} of {fixed['planned']:,} requests, measured run {fixed['run_s']:.1f} s, "
              f"procedure {fixed['procedure_s']:.1f} s (load average {fixed['load']}); TTFT P{q:g} "
              f"{format_quantity(truth, 'time')}, P{near_q:g} {format_quantity(thresholds['near'], 'time')}")
        print()
        print(f"{'SLO':34} {'stopped':>12} {'look':>7} {'sent':>7} {'run s':>7} {'proc s':>7}   "
              f"{'fixed plan':>12} {'sent':>7} {'run s':>7}   load average (start -> end)")
        for where, threshold in thresholds.items():
            text = f"ttft.p{q:g} <= {threshold * 1000:.3f}ms"
            stopped = _run(session, a.rate, check, StopRequest((text,), confidence=a.confidence))
            res = stopped["result"]
            verdict, look = res.slo_verdicts[text]
            plan_verdict = evaluate(text, metrics).verdict
            print(f"{where + ': ' + text:34} {str(verdict.verdict):>12} {look:>7,} {stopped['sent']:>7,} "
                  f"{stopped['run_s']:>7.1f} {stopped['procedure_s']:>7.1f}   {str(plan_verdict):>12} "
                  f"{fixed['sent']:>7,} {fixed['run_s']:>7.1f}   {stopped['load']}")
    finally:
        session.close()


if __name__ == "__main__":
    main()
