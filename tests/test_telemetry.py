"""The server's own telemetry (measure/telemetry.py): /metrics sampled during every run, stored per run in
results.json, plotted, and read as evidence (§4.5.1 item 3, §5.5, §5.7, §5.8).

The schedule test's loopback server answers its k-th scrape with the k-th entry of a known schedule and
the sampler's clock is the scrape count, so the stored series must equal the schedule exactly, at the
times the clock gave: no timing in the assertions, nothing that can flake.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from factories import SUITE_5_1, serve_app

from pytest_llmbench.client import ClientConfig, LLMClient
from pytest_llmbench.document.plotdata import server_plots
from pytest_llmbench.loadgen.warmup import scrape_for
from pytest_llmbench.measure.telemetry import (
    NOT_EXPOSED,
    SAMPLED,
    TelemetrySampler,
    TelemetrySeries,
    read_exposition,
    read_roles,
)
from pytest_llmbench.procedures.result import ServerView
from pytest_llmbench.report.figures import figures_for
from pytest_llmbench.sut.adapters import LLAMACPP, SIMULATOR, VLLM, telemetry_names

PERIOD_NS = 250_000_000
#: (waiting, running, kv usage, preemptions counter, prefix hits, prefix queries) per scrape; the counter
#: resets once (a server restart) between scrapes 6 and 7
SCHEDULE = [(0, 0, 0.0, 10, 0, 0), (3, 2, 0.25, 10, 5, 10), (7, 4, 0.5, 12, 9, 20), (9, 4, 0.75, 15, 20, 40),
            (4, 4, 0.9, 15, 30, 60), (1, 3, 0.6, 18, 40, 80), (0, 1, 0.2, 18, 45, 90), (0, 0, 0.0, 2, 50, 100)]


def vllm_page(k: int) -> str:
    """vLLM 0.11's exposition (two label sets: data-parallel engines) at schedule step ``k``."""
    w, r, kv, pre, hits, queries = SCHEDULE[min(k, len(SCHEDULE) - 1)]
    lines = []
    for name, typ, v in (("vllm:num_requests_waiting", "gauge", w), ("vllm:num_requests_running", "gauge", r),
                         ("vllm:kv_cache_usage_perc", "gauge", kv), ("vllm:num_preemptions_total", "counter", pre),
                         ("vllm:prefix_cache_hits_total", "counter", hits),
                         ("vllm:prefix_cache_queries_total", "counter", queries)):
        lines += [f"# HELP {name} x", f"# TYPE {name} {typ}"]
        if typ == "counter" or name.endswith("_perc"):
            lines.append(f'{name}{{engine="0",model_name="m"}} {v}')
            lines.append(f'{name}{{engine="1",model_name="m"}} {0.0 if typ == "counter" else v / 2}')
        else:  # counts split over the two engines: the sum is the schedule
            lines.append(f'{name}{{engine="0",model_name="m"}} {v - v // 2}')
            lines.append(f'{name}{{engine="1",model_name="m"}} {v // 2}')
    return "\n".join(lines) + "\n"


class ScheduleServer:
    """/metrics answers its k-th scrape with schedule step k; ``served`` counts scrapes."""

    def __init__(self) -> None:
        self.served = 0

    async def metrics(self, request: web.Request) -> web.Response:
        page = vllm_page(self.served)
        self.served += 1
        return web.Response(text=page, content_type="text/plain")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self.metrics)
        return app


def client(url: str) -> LLMClient:
    return LLMClient(ClientConfig(base_url=url, model="m", max_connections=1))


async def test_stored_series_equals_the_schedule_at_the_sampled_times() -> None:
    server = ScheduleServer()
    async with serve_app(server.app()) as url, client(url) as c:
        # the clock is the scrape count: a scrape starts at served x period and answers one period later
        sampler = TelemetrySampler(scrape_for(c), telemetry_names(VLLM), interval_s=PERIOD_NS / 1e9,
                                   clock=lambda: server.served * PERIOD_NS)
        before = await sampler.start()
        while len(sampler.series.t_ns) < len(SCHEDULE) - 1:  # then the loop sleeps until its next slot
            await asyncio.sleep(0.01)
        after = await sampler.stop(origin_ns=PERIOD_NS)  # the run's t = 0 at the second scrape
    n = len(SCHEDULE)
    assert server.served == n  # the loop's scrapes and the final one, nothing more
    # the snapshots before and after: every sample name, summed over its label sets (both engines)
    assert before is not None and before["vllm:num_requests_waiting"] == 0.0 and before["vllm:kv_cache_usage_perc"] == 0
    assert after is not None and after["vllm:num_preemptions_total"] == 2.0 and after["vllm:num_requests_running"] == 0
    doc = sampler.series.to_json()
    assert doc["status"] == SAMPLED and doc["scrapes"] == n and doc["failed"] == 0
    # the k-th scrape ran from k to k + 1 periods: stamped at its midpoint, on the run's clock
    assert doc["t_s"] == [round(((k + 0.5) * PERIOD_NS - PERIOD_NS) / 1e9, 3) for k in range(n)]
    assert doc["values"]["waiting"] == [float(s[0]) for s in SCHEDULE]
    assert doc["values"]["running"] == [float(s[1]) for s in SCHEDULE]
    assert doc["values"]["kv_usage"] == [s[2] for s in SCHEDULE]  # fractions: the largest engine's
    assert doc["values"]["preemptions"] == [float(s[3]) for s in SCHEDULE]  # counters stored raw
    assert doc["names"]["kv_usage"] == "vllm:kv_cache_usage_perc" and doc["kinds"]["preemptions"] == "counter"
    series = TelemetrySeries.from_json(json.loads(json.dumps(doc)))  # as the document reads it back
    assert series.points("waiting")[2] == (doc["t_s"][2], 7.0)
    # a reset counts the value after it (Prometheus increase): 0+2+3+0+3+0 then +2
    assert series.increase("preemptions") == 10.0
    assert series.increase("prefix_hits") / series.increase("prefix_queries") == 0.5  # §5.7 server view
    assert series.peak("kv_usage") == 0.9 and series.first("waiting") == 0.0


async def test_server_without_metrics_is_not_exposed_not_an_error() -> None:
    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": []})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    async with serve_app(app) as url, client(url) as c:
        sampler = TelemetrySampler(scrape_for(c), telemetry_names(VLLM), interval_s=0.05)
        assert await sampler.start() is None
        await asyncio.sleep(0.12)
        assert await sampler.stop() is None
    doc = sampler.series.to_json()
    assert doc["status"] == NOT_EXPOSED and doc["detail"] == "GET /metrics answered 404" and doc["t_s"] == []


async def test_unknown_page_and_no_answer() -> None:
    async def other(request: web.Request) -> web.Response:
        return web.Response(text="# TYPE other gauge\nother 1\n")

    app = web.Application()
    app.router.add_get("/metrics", other)
    async with serve_app(app) as url, client(url) as c:
        sampler = TelemetrySampler(scrape_for(c), telemetry_names(SIMULATOR))
        assert await sampler.start() is None
        await sampler.stop()
    assert sampler.series.status == "no known series" and "llmbench:" in sampler.series.detail

    async def silent() -> None:
        return None

    sampler = TelemetrySampler(silent, telemetry_names(LLAMACPP))
    assert await sampler.start() is None and await sampler.stop() is None
    assert sampler.series.status == NOT_EXPOSED and sampler.series.detail == "GET /metrics: no answer"
    with pytest.raises(ValueError, match="telemetry interval"):
        TelemetrySampler(silent, {}, interval_s=-1)


def test_llamacpp_and_simulator_names_read_by_role() -> None:
    page = read_exposition("# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 3\n"
                           "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 4\n")
    assert {r: v for r, (_, _, v) in read_roles(page, telemetry_names(LLAMACPP)).items()} == {"waiting": 3.0,
                                                                                                "running": 4.0}
    sim = telemetry_names(SIMULATOR)
    assert sim["waiting"][0] == "llmbench:num_requests_waiting" and "vllm:num_requests_waiting" in sim["waiting"]


def test_in_flight_at_scrape_times_and_rates() -> None:
    s = TelemetrySeries(status=SAMPLED, t_ns=[900, 1_000, 2_500, 4_000], origin_ns=1_000,
                        values={"preemptions": [1.0, 1.0, 4.0, None]})
    s.set_client_in_flight([(0, 1), (1_000, 3), (2_000, 2)])
    assert s.client_in_flight == [0, 1, 3, 2]  # before the run's first send: 0
    assert s.rates("preemptions") == [(0.0, 0.0), (1.5e-6, pytest.approx(3.0 / 1.5e-6))]


def _result(runs: list[Any], view: ServerView | None = None) -> Any:
    primary = runs[0]
    return SimpleNamespace(runs=runs, server_view=view, primary_summary=lambda: primary)


def _series_json(values: dict[str, list[float]], status: str = SAMPLED) -> dict[str, Any]:
    n = len(next(iter(values.values()))) if values else 0
    return {"status": status, "detail": "", "interval_s": 0.25, "t_s": [0.25 * i - 0.1 for i in range(n)],
            "values": values, "names": {r: f"vllm:{r}" for r in values}, "client_in_flight": list(range(n)),
            "failed": 0}


def test_document_plots_and_report_figures() -> None:
    tel = _series_json({"waiting": [0, 2, 5, 1], "running": [0, 4, 4, 2], "kv_usage": [0.1, 0.5, 0.8, 0.3],
                        "preemptions": [0, 1, 3, 3]})
    a = SimpleNamespace(label="L1", telemetry=tel)
    b = SimpleNamespace(label="L2", telemetry=_series_json({"waiting": [0, 9], "kv_usage": [0.2, 0.95],
                                                            "preemptions": [5, 9]}))
    gone = SimpleNamespace(label="L3", telemetry=_series_json({}, status=NOT_EXPOSED) | {"detail": "GET /metrics "
                                                                                           "answered 404"})
    plots, notes = server_plots(_result([a, b, gone], ServerView(runs=["L1"], levels=[("50%", "L1"), ("120%", "L2")],
                                                                 by="load level", section="§5.3")))
    assert notes == ["server telemetry not exposed: GET /metrics answered 404 (no server series; client figures only)"]
    tl = plots["server_timeline"]
    assert tl["requests"] == {"client in flight": [0, 1, 2, 3], "server running": [0, 4, 4, 2],
                              "server waiting": [0, 2, 5, 1]}
    assert tl["preemptions_per_s"][0] is None and tl["preemptions_per_s"][1:] == pytest.approx([4.0, 8.0, 0.0])
    lv = plots["server_levels"]["rows"]
    assert plots["server_levels"]["levels"] == ["50%", "120%"] and lv["120%"]["mean running"] is None
    assert (lv["120%"]["peak waiting"], lv["120%"]["preemption events"]) == (9.0, 4.0)
    assert lv["120%"]["peak KV usage (%)"] == pytest.approx(95.0)
    figs = figures_for("5.3", plots)
    assert [f.key for f in figs] == ["server_timeline", "server_levels"]
    assert "client in flight" in figs[0].svg and "KV-cache usage" in figs[0].svg
    assert "preemption events" in figs[1].svg and "upper bound" in figs[1].caption
    # without a declaration: the primary run's series; a run without telemetry (an old document) draws nothing
    plots, notes = server_plots(_result([SimpleNamespace(label="x", telemetry=None)]))
    assert plots == {} and notes == []


def test_long_runs_are_bucketed_keeping_peaks() -> None:
    n = 1_000
    waiting = [float(i % 7 == 3) * 10 for i in range(n)]
    plots, _ = server_plots(_result([SimpleNamespace(label="L", telemetry=_series_json(
        {"waiting": waiting, "preemptions": [float(i) for i in range(n)]}))]))
    tl = plots["server_timeline"]
    assert len(tl["t_s"]) <= 400 and max(v for v in tl["requests"]["server waiting"] if v is not None) == 10.0
    assert all(r == pytest.approx(4.0) for r in tl["preemptions_per_s"][1:])  # 1 per scrape, 0.25 s apart


# ---------------------------------------------------------------------------------- through the plugin
def test_plugin_on_the_simulator_stores_series_plots_and_decides_the_drain(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_suite=SUITE_5_1.format(rate=20, requests=40, extra=""))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-report", "rep",
                                           "--llm-telemetry-interval", "0.1")
    result.assert_outcomes(passed=1)
    report = pytester.path / "rep"
    doc = json.loads((report / "results.json").read_text(encoding="utf-8"))
    (p,) = doc["procedures"]
    for run in p["result"]["runs"]:
        tel = run["telemetry"]
        assert tel["status"] == SAMPLED and tel["names"]["waiting"] == "llmbench:num_requests_waiting"
        assert tel["t_s"][0] < 0 < tel["t_s"][-1] and len(tel["values"]["running"]) == len(tel["t_s"])
        assert max(v for v in tel["values"]["running"] if v is not None) > 0  # it saw the load
        on_disk = json.loads((report / run["run_dir"] / "telemetry.json").read_text())
        assert on_disk["values"] == tel["values"]
    assert p["result"]["plots"]["server_timeline"]["kind"] == "timeline"
    # §4.5.1 item 3 decided from the server's waiting gauge
    assert "llmbench:num_requests_waiting = 0 before the first measured request" in json.dumps(p)
    html = (report / "report.html").read_text(encoding="utf-8")
    assert "Server telemetry over time" in html and 'class="series" data-series="server running"' in html


def test_plugin_against_a_server_without_metrics_says_not_exposed(pytester: pytest.Pytester,
                                                                   fault_server) -> None:
    srv = fault_server(cap=8)
    pytester.makepyfile(test_suite=SUITE_5_1.format(rate=40, requests=30, extra=""))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--llm-endpoint", srv.url,
                                           "--llm-boundary", "gateway", "--llm-report", "rep")
    result.assert_outcomes(passed=1)
    assert "Traceback" not in result.stdout.str()
    report = pytester.path / "rep"
    doc = json.loads((report / "results.json").read_text(encoding="utf-8"))
    (p,) = doc["procedures"]
    assert {r["telemetry"]["status"] for r in p["result"]["runs"]} == {NOT_EXPOSED}
    note = "server telemetry not exposed: GET /metrics answered 404"
    assert any(n.startswith(note) for n in p["plot_notes"])
    for name in ("report.md", "report.html"):
        assert note in (report / name).read_text(encoding="utf-8"), name


def test_schema_accepts_the_series() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from pytest_llmbench.document.schema import schema

    defs = schema()["$defs"]
    tel = _series_json({"waiting": [0.0, 1.0]})
    jsonschema.validate(tel, {"$defs": defs, "$ref": "#/$defs/telemetry"})
    plots, _ = server_plots(_result([SimpleNamespace(label="L", telemetry=tel)]))
    jsonschema.validate(plots["server_timeline"], {"$defs": defs, "$ref": "#/$defs/timeline_plot"})


def test_report_renders_a_document_from_before_the_series(tmp_path) -> None:
    """``python -m pytest_llmbench report`` on a 1.5 document (no runs[].telemetry, no server plots)."""
    import gzip

    from pytest_llmbench.__main__ import main

    # the smoke document as the code before the series wrote it (schema 1.5, kept as a fixture)
    old = json.loads(gzip.decompress((Path(__file__).parent / "data" / "results-smoke-1.5.json.gz").read_bytes()))
    assert old["schema_version"] == "1.5" and not any(
        "telemetry" in r for p in old["procedures"] for r in p["result"]["runs"])
    (tmp_path / "results.json").write_text(json.dumps(old), encoding="utf-8")
    assert main(["report", str(tmp_path / "results.json"), "--output", str(tmp_path / "out")]) == 0
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "Server telemetry over time" not in html and "<svg" in html


def test_a_counter_that_never_moved_is_said_not_drawn() -> None:
    plots, _ = server_plots(_result([SimpleNamespace(label="L", telemetry=_series_json(
        {"running": [0.0, 2.0, 1.0], "preemptions": [4.0, 4.0, 4.0]}))]))
    (fig,) = figures_for("5.1", plots)
    assert "No preemption event during the run." in fig.caption and "events/s" not in fig.svg


# ------------------------------------------------------------------ vLLM's phase histograms (issue 48 f)

SERVERS = Path(__file__).parent / "data" / "servers"
#: the recorded pages' measured requests (their header says how they were made): queue and prefill times
RUN_QUEUE = [3.0 if i % 10 == 0 else [0.02, 0.1, 0.25, 0.4, 0.9, 1.7][i % 6] for i in range(100)]
RUN_PREFILL = [0.08 + 0.004 * i for i in range(100)]
VLLM_LE = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
           960.0, 1920.0, 7680.0, float("inf"))


def _vllm_pages() -> tuple[str, str]:
    return tuple((SERVERS / f"vllm-0.32-metrics-{w}.txt").read_text() for w in ("before", "after"))  # type: ignore[return-value]


def test_vllm_phase_histograms_over_a_run_from_recorded_pages() -> None:
    """The run's own observations (the increase from the page before it to the page after it) of
    vllm:request_queue_time_seconds, by hand: bucket counts, the exact mean, histogram_quantile."""
    import math

    from pytest_llmbench.measure.telemetry import read_exposition, read_histogram

    before, after = (read_exposition(p) for p in _vllm_pages())
    q = read_histogram(after, "vllm:request_queue_time_seconds").since(
        read_histogram(before, "vllm:request_queue_time_seconds"))
    assert q.le == VLLM_LE and q.count == 100
    assert q.cumulative == tuple(float(sum(v <= le for v in RUN_QUEUE)) for le in VLLM_LE)
    assert q.mean == pytest.approx(math.fsum(RUN_QUEUE) / 100)
    # P50: rank 50; cumulative 45 at 0.3 s and 60 at 0.5 s -> 0.3 + 0.2 * (50 - 45) / (60 - 45)
    below, at = sum(v <= 0.3 for v in RUN_QUEUE), sum(v <= 0.5 for v in RUN_QUEUE)
    assert q.quantile(0.5) == pytest.approx(0.3 + 0.2 * (50 - below) / (at - below))
    assert q.bucket(0.5) == (0.3, 0.5) and q.bucket(0.99) == (2.5, 5.0)
    p = read_histogram(after, "vllm:request_prefill_time_seconds").since(
        read_histogram(before, "vllm:request_prefill_time_seconds"))
    assert p.count == 100 and p.mean == pytest.approx(math.fsum(RUN_PREFILL) / 100)
    assert read_histogram(after, "vllm:num_requests_waiting") is None  # a gauge is no histogram


def test_the_sampler_reads_the_histograms_between_its_first_and_last_scrape() -> None:
    from pytest_llmbench.sut.adapters import histogram_names

    pages = list(_vllm_pages())

    async def scrape() -> tuple[int, str]:  # the first scrape: the page before; the last: the page after
        return 200, pages.pop(0) if len(pages) > 1 else pages[0]

    async def run() -> dict[str, Any]:
        s = TelemetrySampler(scrape, telemetry_names(VLLM), interval_s=0)
        await s.start()
        await s.stop()
        return s.histograms(histogram_names(VLLM))

    got = asyncio.run(run())
    assert set(got) == {"queue_wait", "prefill"} and got["queue_wait"].count == got["prefill"].count == 100
    assert histogram_names(LLAMACPP)["queue_wait"] == ("vllm:request_queue_time_seconds",)  # behind a proxy too


def test_5_1_reports_vllm_queue_and_prefill_from_the_histograms(harness, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A server without per-request timing whose /metrics holds vLLM's phase histograms: 5.1's TTFT
    components table and 5.1.4-REPORT-5/6 read them, the source named (the recorded pages served as the
    server's /metrics: before the run, then after it)."""
    from pytest_llmbench.procedures import run as run_module
    from pytest_llmbench.procedures.base import get_procedure
    from pytest_llmbench.procedures.result import Capacity
    from pytest_llmbench.simulator import SimConfig

    before, after = _vllm_pages()

    class Pages:  # the measured run's first scrape gets the page before it, every later one the page after
        path = "/metrics"

        def __init__(self) -> None:
            self.n = 0

        async def __call__(self) -> tuple[int, str]:
            self.n += 1
            return 200, before if self.n == 1 else after

    monkeypatch.setattr(run_module, "scrape_for", lambda client, path=None: Pages())
    proc = get_procedure("5.1")
    params = proc.make_params("smoke", {"requests": 12, "warmup_requests": 5, "warmup_tokens": 50,
                                        "warmup_probes": 0, "max_output_tokens": 4})
    with harness(SimConfig(time_scale=0.05, seed=3), capacity=Capacity(rate=20.0, source="declared by the test",
                                                                       standing="declared"),
                 profile="smoke", seed=4) as (_sim, ctx):
        ctx.sut.embedded = False  # no per-request llmbench_timing: the histograms are what the server gives
        result = asyncio.run(proc.run(ctx, params))
    table = next(t for t in result.tables if t.title.startswith("TTFT components"))
    assert [row[0] for row in table.rows] == ["queue_wait", "prefill"]
    assert "vllm:request_queue_time_seconds, its increase over the measured run (100 requests observed" in table.notes[0]
    assert "P50 in (0.3, 0.5] s" in table.notes[0] and "exact (_sum / _count)" in table.notes[0]
    rep5, rep6 = result.checks["5.1.4-REPORT-5"], result.checks["5.1.4-REPORT-6"]
    assert rep5.holds and "vllm:request_queue_time_seconds (histogram over the run)" in rep5.reason
    assert rep6.holds and "vllm:request_prefill_time_seconds" in rep6.reason
