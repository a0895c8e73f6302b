#!/usr/bin/env python3
"""How close measured procedure figures come to the simulator's engine model (printed, never asserted).

The procedure tests (tests/test_procedure_5_3/5_4/5_7.py) bound these figures one-sided only, because a
busy machine adds latency to every wall-clock figure; the two-sided agreement is this script's figure.
Run it on a quiet machine and compare with the model:

    python bench/model_agreement.py            # 5.3 knee and P99s, 5.4 ITL P50, 5.7 TTFT saving

Same configurations as the tests (it imports their set-ups), so the figures are theirs.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # the checkout and the tests' set-ups

import test_procedure_5_3 as t53  # noqa: E402
import test_procedure_5_4 as t54  # noqa: E402
from factories import procedure_context, simulator_harness  # noqa: E402

from pytest_llmbench import closed  # noqa: E402
from pytest_llmbench.measure.stats import knee_point  # noqa: E402
from pytest_llmbench.procedures.base import get_procedure  # noqa: E402
from pytest_llmbench.procedures.result import Capacity  # noqa: E402
from pytest_llmbench.simulator import SimConfig, start_simulator  # noqa: E402
from pytest_llmbench.simulator.predict import simulate_closed_loop  # noqa: E402


def knee_5_3(root: Path) -> None:
    cfg = t53.CFG
    cap = simulate_closed_loop(cfg, cfg.max_num_seqs, 320, 57).requests_per_s
    proc = get_procedure("5.3")
    with simulator_harness(cfg, root, capacity=Capacity(rate=0.8 * cap, source="model"), run_root=root,
                           profile="smoke", time_scale=cfg.time_scale) as (_, ctx):
        res = asyncio.run(proc.run(ctx, proc.make_params("smoke", {"ttft_p99_slo_s": 0.1})))
    offered = [lv["offered_req_s"] for lv in res.measurements["levels"]]
    meas = [r.metrics.percentile("ttft", 99).value for r in res.runs]
    pred = [float(np.percentile(t53.replay_ttft(cfg, t53.load_records(r.run_dir)), 99)) for r in res.runs]
    print(f"5.3 knee: measured level {res.measurements['knee_index']}, model {knee_point(offered, pred)}")
    for o, m, p in zip(offered, meas, pred):
        print(f"    {o:7.2f} req/s  TTFT P99 {m * 1000:8.1f} ms  model {p * 1000:8.1f} ms  ({m / p - 1:+.0%})")


def itl_5_4(root: Path) -> None:
    cfg = t54.CFG
    cap = simulate_closed_loop(cfg, cfg.max_num_seqs, 320, t54.OUT).requests_per_s
    proc = get_procedure("5.4")
    with simulator_harness(cfg, root, capacity=Capacity(rate=cap, source="model"), run_root=root,
                           profile="smoke", time_scale=cfg.time_scale) as (_, ctx):
        res = asyncio.run(proc.run(ctx, proc.make_params("smoke", {"levels": [0.1, 0.25], "requests": 30})))
    for lv, run in zip(res.measurements["levels"], res.runs):
        conc = run.metrics.scalar("concurrency").value
        p50 = run.metrics.percentile("itl", 50).value
        hi = cfg.predicted_itl_s(max(2, int(np.ceil(2 * conc))))
        print(f"5.4 ITL P50 at {lv['fraction']:.0%}: {p50 * 1000:.2f} ms; model {cfg.predicted_itl_s(1) * 1000:.2f}"
              f"-{hi * 1000:.2f} ms (batch 1..2x concurrency {conc:.2f})")


def saving_5_7(root: Path) -> None:
    cfg = SimConfig(time_scale=0.5, seed=1, prefix_cache=False)
    proc = get_procedure("5.7")
    params = proc.make_params("smoke", {"requests": 40, "load": closed(1), "max_output_tokens": 4,
                                        "warmup_requests": 10, "warmup_tokens": 100})
    with start_simulator(cfg) as sim:
        res = asyncio.run(proc.run(procedure_context(sim, root, profile="smoke", seed=9), params))
    pred = {}
    for name, run in zip(("disabled", "cold", "warm"), res.runs):
        recs = [r for r in t53.load_records(run.run_dir) if r.phase == "measure" and r.ok]
        pred[name] = float(np.median([cfg.predicted_ttft_s(r.input_tokens, r.cached_tokens or 0) for r in recs]))
    for name in ("cold", "warm"):
        model = (pred["disabled"] - pred[name]) / pred["disabled"] * 100
        print(f"5.7 {name} TTFT P50 saving: measured {res.measurements[f'{name}_ttft_reduction_p50_pct']:.1f} %, "
              f"model {model:.1f} %")


if __name__ == "__main__":
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        for i, fn in enumerate((knee_5_3, itl_5_4, saving_5_7)):
            fn(Path(tmp) / str(i))
