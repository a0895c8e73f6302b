"""Load-generator shards (shards/): dealing, accounting, schedule fidelity, interruption, Ray.

Sharded runs go against the embedded simulator through the pytest-free Session, once with one
worker (today's in-process path) and once with two processes: the same accounting (every request
one record, sent = ok + errors), each record naming its shard, and the merged open-loop send
times following the requested Poisson schedule.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from factories import SUITE_5_1 as SUITE
from factories import WITH_SIGINT, count_lines, endpoint_args, read_results
from scipy import stats

import pytest_llmbench.procedures  # noqa: F401  (registers the procedures)
from pytest_llmbench.common.records import RequestSpec
from pytest_llmbench.common.storage import RECORDS_FILE, iter_records
from pytest_llmbench.document.build import build_document
from pytest_llmbench.loadgen.load import ArrivalProcess, ClosedLoop, OpenLoop
from pytest_llmbench.loadgen.shards import NotShardable, parse_workers, plan_shards
from pytest_llmbench.procedures.base import get_procedure
from pytest_llmbench.procedures.helpers import closed_level_stream
from pytest_llmbench.procedures.result import ProcedureResult
from pytest_llmbench.session import Session
from pytest_llmbench.settings import LLMBenchConfigError, Settings, resolve

RATE = 60.0  # declared capacity (req/s): 5.1 runs at half of it
KS_MIN_P = 1e-6  # Poisson sends: KS p-value bound (false failures 1e-6; a wrong process fails by far)


def _specs(n: int) -> list[RequestSpec]:
    return [RequestSpec(index=i, workload="t", input_tokens=3, max_tokens=8, prompt_text=f"p{i}") for i in range(n)]


# ---------------------------------------------------------------------------------------------
# dealing (no I/O)
# ---------------------------------------------------------------------------------------------
def test_open_loop_deal_is_the_global_schedule() -> None:
    arrival = ArrivalProcess("poisson", 50.0, seed=9)
    specs = _specs(101)
    parts = plan_shards(specs, OpenLoop(arrival, max_requests=101), 3)
    assert len(parts) == 3
    pairs = sorted((off, s.index) for sp, ld in parts for off, s in zip(ld.arrival.offsets_ns(), sp))
    assert [o for o, _ in pairs] == list(arrival.schedule_ns(101))  # the union is the schedule ...
    assert [i for _, i in pairs] == list(range(101))  # ... with request k at offset k
    # a duration bounds the schedule as the in-process loop does
    (sp, ld), *_ = plan_shards(iter(_specs(10_000)), OpenLoop(arrival, duration_s=1.0), 1)
    assert len(sp) == int(np.sum(arrival.schedule_ns(500) < 1e9))


def test_closed_loop_deal_splits_concurrency_and_level_targets() -> None:
    parts = plan_shards(_specs(10), ClosedLoop(5), 2)
    assert [ld.concurrency for _, ld in parts] == [3, 2]
    assert sorted(s.index for sp, _ in parts for s in sp) == list(range(10))
    assert len(plan_shards(_specs(10), ClosedLoop(1), 4)) == 1  # never a shard with no slot
    stats_: dict[str, int] = {}
    stream = closed_level_stream(_specs(10), 9, 0.0, stats_)
    parts = plan_shards(stream, ClosedLoop(3), 2)
    assert [p.need for p, _ in parts] == [6, 3]
    for p, _ in parts:
        list(p)
    stream.absorb([p.stats for p, _ in parts])
    assert stats_ == {"repeats": 1}  # shard 0 cycled its 5 specs once to reach 6
    with pytest.raises(NotShardable):
        plan_shards(iter(_specs(3)), ClosedLoop(2), 2)


def test_workers_option_is_validated() -> None:
    assert parse_workers("auto") >= 1 and parse_workers(3) == 3
    with pytest.raises(ValueError, match="positive integer or 'auto'"):
        parse_workers("0")
    with pytest.raises(LLMBenchConfigError, match="--llm-workers: invalid value 'two'"):
        resolve(lambda d: "two" if d == "llm_workers" else None, lambda k: None, environ={})


# ---------------------------------------------------------------------------------------------
# against the simulator
# ---------------------------------------------------------------------------------------------
DOCS: dict[Path, dict[str, Any]] = {}  # report dir -> its results document


def _run(root: Path, proc_id: str, workers: str, overrides: dict[str, Any], **settings: Any) -> ProcedureResult:
    session = Session(Settings(report=root, profile="smoke", workers=workers, time_scale=0.1, **settings))
    try:
        proc = get_procedure(proc_id)
        result = session.run(proc, proc.make_params("smoke", overrides))
        DOCS[root] = build_document(session.result(complete=True))
        return result
    finally:
        session.close()


def _accounting(result: ProcedureResult) -> list[tuple[int, int, int]]:
    """Per measured run: (sent, ok, errors), checked against the records file."""
    out = []
    for run in result.runs:
        records = list(iter_records(Path(run.run_dir)))
        sent, ok = run.load["sent"], run.load["ok"]
        errors = sum(1 for r in records if not r.ok)
        assert len(records) == sent == ok + errors, run.label  # every request one record
        assert len({r.index for r in records}) == len(records) or run.load["model"] == "closed"
        out.append((sent, ok, errors))
    return out


@pytest.fixture(scope="module")
def ttft_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ProcedureResult]:
    root = tmp_path_factory.mktemp("shards51")
    over = {"requests": 150, "warmup_requests": 8, "warmup_tokens": 200}
    return {w: _run(root / f"w{w}", "5.1", w, over, capacity=f"rate={RATE}") for w in ("1", "2")}


def test_two_workers_give_the_same_accounting_as_one(ttft_runs: dict[str, ProcedureResult]) -> None:
    one, two = _accounting(ttft_runs["1"]), _accounting(ttft_runs["2"])
    assert one == two == [(150, 150, 0)]
    recs = list(iter_records(Path(ttft_runs["2"].runs[0].run_dir)))
    assert {r.shard for r in recs} == {0, 1} and all(r.phase == "measure" for r in recs)
    assert {r.shard for r in iter_records(Path(ttft_runs["1"].runs[0].run_dir))} == {None}
    gen = next(d for root, d in DOCS.items() if root.name == "w2")["load_generation"]
    assert gen["backend"] == "local" and [s["sent"] for s in gen["runs"][0]["shards"]] == [75, 75]
    sharding = ttft_runs["2"].runs[0].load["sharding"]
    assert sharding["backend"] == "local" and sharding["workers"] == 2
    assert [s["sent"] for s in sharding["shards"]] == [75, 75]
    for s in sharding["shards"]:  # send lag, loop delay, the self-check and the CPU of its run, per shard
        assert s["send_lag"]["n"] == 75 and s["loop_delay"]["n"] > 0 and isinstance(s["valid"], bool)
        assert s["cpu_s"] > 0
        # a shard reports its sends over its own send window, whatever the run's achieved_from_sends
        assert s["achieved_rate"] == s["sent"] / ((s["send_end_ns"] - s["start_ns"]) / 1e9)
    run_json = json.loads((Path(ttft_runs["2"].runs[0].run_dir) / "run.json").read_text())
    assert run_json["loads"][0]["parameters"]["sharding"]["workers"] == 2


def test_merged_send_times_follow_the_requested_poisson_schedule(ttft_runs: dict[str, ProcedureResult]) -> None:
    """The dealt schedules merge back into the seeded global one, and the actual sends across
    both processes pass the same KS test against the exponential as an unsharded run."""
    result = ttft_runs["2"]
    load = json.loads((Path(result.runs[0].run_dir) / "run.json").read_text())["loads"][0]
    arrival = load["parameters"]["arrival"]
    recs = sorted(iter_records(Path(result.runs[0].run_dir)), key=lambda r: r.intended_ns)
    intended = np.array([r.intended_ns for r in recs]) - load["start_ns"]
    expected = ArrivalProcess(arrival["kind"], arrival["rate"], seed=arrival["seed"]).schedule_ns(len(recs))
    # each process converts the common wall-clock start to the shared monotonic clock itself: µs apart
    assert np.max(np.abs(intended - expected)) < 200_000
    sent = np.sort([r.handoff_ns for r in recs])  # the schedule the shards kept (connection set-up excluded)
    assert all(r.sent_ns >= r.intended_ns for r in recs)
    ks = stats.kstest(np.diff(sent) / 1e9, "expon", args=(0, 1 / arrival["rate"]))
    # the runtime check's bound (compliance arrival_fit_min_p): false-failure rate 1e-6 under the null,
    # robust to a busy host's send lateness; evenly spaced sends (uniform arrival) give p ~ 1e-46
    assert ks.pvalue > KS_MIN_P, ks


def test_capacity_search_with_two_workers_keeps_the_accounting(tmp_path: Path) -> None:
    over = {"max_concurrency": 8, "initial_concurrency": 4, "min_level_s": 1.0, "min_completions_per_slot": 4,
            "warmup_requests": 8, "warmup_tokens": 200}
    result = _run(tmp_path, "5.5", "2", over)
    rows = _accounting(result)
    assert rows and all(sent > 0 for sent, _, _ in rows)
    for run in result.runs:
        recs = list(iter_records(Path(run.run_dir)))
        c = run.load["concurrency"]
        assert {r.shard for r in recs} == ({0, 1} if c >= 2 else {0})
        assert sum(s["concurrency_target"] or 0 for s in run.load["sharding"]["shards"]) == c


def test_sigint_stops_the_shards_and_still_reports(pytester: pytest.Pytester, slow_server: Any) -> None:
    pytester.makepyfile(test_suite=SUITE.format(rate=40, requests=5000, extra=""))
    out, err = pytester.path / "out.txt", pytester.path / "err.txt"
    with open(out, "w") as fo, open(err, "w") as fe:
        proc = pytester.popen([*WITH_SIGINT, "-m", "pytest", *endpoint_args(slow_server), "--llm-workers", "2"],
                              stdout=fo, stderr=fe)
        try:
            deadline = time.monotonic() + 90
            records: Path | None = None
            while records is None or count_lines(records) < 4:  # both shards are sending
                assert proc.poll() is None, (out.read_text(), err.read_text())
                assert time.monotonic() < deadline, "no measured records within 90 s"
                found = sorted((pytester.path / "rep" / "runs").glob("*/measure/" + RECORDS_FILE))
                records = found[0] if found else None
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            ret = proc.wait(90)
        finally:
            if proc.poll() is None:  # pragma: no cover - only when the test already failed
                proc.kill()
                proc.wait()
    text = out.read_text() + err.read_text()
    assert ret == pytest.ExitCode.INTERRUPTED, text
    assert "Traceback" not in text
    doc = read_results(pytester.path / "rep")
    assert doc["interrupted"] is True and doc["procedures"][0]["complete"] is False
    recs = list(iter_records(records.parent))
    assert {r.shard for r in recs} == {0, 1}
    assert all(r.ok or r.error_type.value == "cancelled" for r in recs)
    assert any(r.error_type is not None and r.error_type.value == "cancelled" for r in recs)  # in flight at stop
    assert doc["procedures"][0]["configuration"]["requests"] == len(recs) < 5000
    assert doc["load_generation"]["workers"] == "2"


# ---------------------------------------------------------------------------------------------
# Ray: a two-node cluster on loopback inside this process
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    ray = pytest.importorskip("ray", reason='Ray is not installed: pip install "pytest-llmbench[ray]"')
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 100 * 2**20,
                                                             "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1, object_store_memory=100 * 2**20)
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.mark.ray
def test_ray_two_nodes_one_shard_each(ray_cluster: Any, tmp_path: Path) -> None:
    over = {"requests": 120, "warmup_requests": 8, "warmup_tokens": 200}
    result = _run(tmp_path, "5.1", "1", over, capacity=f"rate={RATE}", ray_address=ray_cluster.address)
    assert _accounting(result) == [(120, 120, 0)]
    sharding = result.runs[0].load["sharding"]
    assert sharding["backend"] == "ray" and sharding["workers"] == 2
    nodes = sharding["nodes"]
    assert len({n["node"] for n in nodes}) == 2  # one shard on each node
    assert all(abs(n["clock_offset_ms"]) < 1000 and n["clock_rtt_ms"] > 0 for n in nodes)
    recs = list(iter_records(Path(result.runs[0].run_dir)))
    assert {r.shard for r in recs} == {0, 1}
    gen = DOCS[tmp_path]["load_generation"]  # the results document names backend, nodes, clock offsets
    assert gen["backend"] == "ray" and len(gen["nodes"]) == 2
    assert all(s["clock_offset_ms"] is not None for s in gen["runs"][0]["shards"])
    rate = sharding["shards"][0]["sent"] and json.loads(
        (Path(result.runs[0].run_dir) / "run.json").read_text())["loads"][0]["parameters"]["arrival"]["rate"]
    # one host: the merged send times are tested (across hosts each shard's own would be)
    sent = np.sort([r.handoff_ns for r in recs])  # the schedule the shards kept (connection set-up excluded)
    assert stats.kstest(np.diff(sent) / 1e9, "expon", args=(0, 1 / rate)).pvalue > KS_MIN_P


def test_merged_result_carries_submit_lag_beside_schedule_lag() -> None:
    """The merge pools both lags over every shard's records: schedule lag (hand-over − intended) and
    submit lag (T_submit − intended), each exact, so a sharded run reports what one process does."""
    from factories import make_record

    from pytest_llmbench.common.records import ClockAnchor
    from pytest_llmbench.loadgen.load import LoadOptions
    from pytest_llmbench.loadgen.shards.core import MergeTally, merge

    tally = MergeTally()
    for i in range(4):  # intended at i ms, handed over 0.1·(i+1) ms later, sent 1 ms after intended
        r = make_record(i, sent=i + 1.0, intended_ns=i * 1_000_000, queued_ns=i * 1_000_000 + (i + 1) * 100_000)
        tally.add(r)
    tally.add(make_record(9, sent=5.0))  # a record without an intended time: in neither
    res = merge(OpenLoop(ArrivalProcess("poisson", 100.0)), LoadOptions(drain_timeout_s=None), [], tally,
                anchor=ClockAnchor.now(), start_ns=0, transport="aiohttp", sharding={})
    assert res.schedule_lag.n == res.submit_lag.n == 4
    assert res.schedule_lag.max_ms == pytest.approx(0.4) and res.schedule_lag.p50_ms == pytest.approx(0.25)
    assert res.submit_lag.max_ms == res.submit_lag.p50_ms == pytest.approx(1.0)
    assert res.to_json()["submit_lag"]["n"] == 4


class _Capture:
    """A backend that runs no shard: it keeps the tasks it is given (sent to processes as they are)."""

    name = "capture"
    info: dict[str, Any] = {}

    def __init__(self, n: int) -> None:
        self.n = n
        self.tasks: list[Any] = []

    def shard_count(self) -> int:
        return self.n

    async def run(self, tasks: list[Any], on_hello: Any, on_records: Any) -> tuple[int, list[Any]]:
        self.tasks = tasks
        return time.time_ns(), []


async def test_run_sharded_hands_every_shard_the_options_unchanged() -> None:
    """One LoadOptions object reaches every shard as given, and survives pickling (a process or an actor);
    what a shard cannot take (a stop predicate over the whole run, a pacer object) is refused up front."""
    import pickle

    from pytest_llmbench.client import ClientConfig, LLMClient
    from pytest_llmbench.loadgen.load import LoadOptions, SelfCheck
    from pytest_llmbench.loadgen.pacer import make_pacer
    from pytest_llmbench.loadgen.shards import run_sharded

    opts = LoadOptions(phase="measure", drain_timeout_s=7.0, self_check=SelfCheck(max_send_lag_p99_ms=3.0),
                       pacer="sleep", sends_first=False, achieved_from_sends=True)
    backend = _Capture(3)
    async with LLMClient(ClientConfig(base_url="http://127.0.0.1:9/v1", model="m")) as client:
        res = await run_sharded(backend, client, _specs(9), ClosedLoop(3), opts, tokenizer="cl100k_base")
        assert len(backend.tasks) == 3 and all(t.options is opts for t in backend.tasks)
        assert pickle.loads(pickle.dumps(backend.tasks[0])).options == opts
        assert res.parameters["drain_timeout_s"] == 7.0 and res.sent == 0
        with pytest.raises(NotShardable, match="stop predicate"):
            await run_sharded(backend, client, _specs(9), ClosedLoop(3), LoadOptions(stop=lambda p: p.sent > 3),
                              tokenizer="cl100k_base")
        pacer = make_pacer("sleep")
        try:
            with pytest.raises(NotShardable, match="pacer object"):
                await run_sharded(backend, client, _specs(9), ClosedLoop(3), LoadOptions(pacer=pacer),
                                  tokenizer="cl100k_base")
        finally:
            pacer.close()


def test_the_backend_follows_the_settings() -> None:
    """``--llm-workers``/``--llm-ray-address`` pick the backend (no string test at the call site)."""
    from pytest_llmbench.loadgen.shards import backend_for
    from pytest_llmbench.loadgen.shards.local import LocalBackend
    from pytest_llmbench.loadgen.shards.ray_backend import RayBackend

    assert backend_for(Settings(workers="1")) is None
    local = backend_for(Settings(workers="3"))
    assert isinstance(local, LocalBackend) and local.workers == 3
    ray = backend_for(Settings(workers="1", ray_address="auto"))
    assert isinstance(ray, RayBackend) and ray.address == "auto" and ray.workers is None
    assert backend_for(Settings(workers="2", ray_address="local")).workers == 2  # type: ignore[union-attr]
