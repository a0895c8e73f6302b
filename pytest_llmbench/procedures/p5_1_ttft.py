"""§5.1 Time to First Token: TTFT distribution under a declared load.

Procedure (§5.1.3): configure, warm up (§4.5), generate load until the request count is reached,
TTFT = T_first − T_submit per request (first *content* token, §5.1.3.1), then P50–P99.9, mean,
min, max (§5.1.4.1), TTFT by input-length bucket and its queue-wait/prefill parts when the
server reports them (§5.1.4.2). Sample-size rules (§5.1.4.3): P99 >= 1000, P99.9 >= 10,000.

Cold start (§4.5.3), opt-in (``cold_start=True`` or ``--llm-cold-start``): the SUT is restarted
through the ``restart`` setting of ``pytest_llmbench_configure_sut``, ``cold_start_requests``
requests are sent one at a time before any warm-up (the first is the cold one), then the usual
warm-up, as many requests of the same workload sent the same way (the warm reference), and the
measured run. The report labels it (coldstart.ColdStart).

Trace replay (issue 50, ``--llm-trace PATH`` or the marker's ``trace=PATH``): the measured run is the trace's
requests at the trace's send times (``loadgen.replay.TraceArrival``), one per line and nothing after them,
instead of the marker's load and request count; no capacity is looked up. The warm-up sends prompts whose
blocks are disjoint from the trace's. The load is then custom (§5.1.2.2 asks for Poisson: 5.1.2-MUST-7/8
unmet, saying why), and a table gives the replay's fidelity (send lag against the trace's times, gaps,
input lengths).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..client import LLMClient
from ..common import draft
from ..compliance import Check, decide
from ..loadgen.load import OpenLoop
from ..loadgen.replay import ReplayFidelity, TraceArrival, replay_fidelity
from ..loadgen.warmup import WarmupResult
from ..measure.units import Cell, format_cell
from ..workloads import build_workload
from ..workloads.trace import Trace, TraceError, checked_trace, read_trace, trace_warmup, trace_workload
from .base import ProcedureError
from .facts import declarations, prefix_cache_state
from .figures import latency_figures
from .helpers import cap_output, percentile_row, reported, sample_list, turns_per_session
from .loads import LoadSpec, poisson, resolve_load
from .pipeline import Outcome, ProcedureRun
from .result import Table
from .stopping import StopWhenDecided
from .tally import tally_of

P99_MIN, P999_MIN = draft.value("ttft.p99_min_requests"), draft.value("ttft.p999_min_requests")  # §5.1.2.1


@dataclass
class TTFTParams:
    """§5.1.2 setup parameters; defaults are the draft's minimums (the ``standard`` profile)."""

    workload: str = "synthetic-uniform"
    requests: int = P999_MIN  # P99.9 is a required 5.1 measurement, so 10,000
    load: LoadSpec = field(default_factory=lambda: poisson(capacity_fraction=0.5))
    warmup_requests: int = draft.value("warmup.min_requests")
    warmup_tokens: int = draft.value("warmup.min_output_tokens")
    warmup_probes: int = 3  # probe requests before/after warm-up (§4.5.2); 0 = no verification
    max_output_tokens: int | None = None  # cap on each request's max_tokens (shorter runs); recorded
    cold_start: bool = False  # §4.5.3: restart the SUT and measure the first requests before any warm-up
    cold_start_requests: int = 3  # cold requests (and as many warm reference requests)
    trace: str | None = None  # a trace replayed as the measured run (issue 50); default --llm-trace

    def validate(self) -> None:
        if self.requests < 1:
            raise ValueError(f"requests must be >= 1, got {self.requests}")
        if self.cold_start_requests < 1:
            raise ValueError(f"cold_start_requests must be >= 1, got {self.cold_start_requests}")
        if not isinstance(self.load, LoadSpec):
            raise ValueError("load must be poisson(...), uniform(...), bursty(...) or closed(...)")


PROFILES: dict[str, dict[str, Any]] = draft.profiles('5.1')  # data/profiles.yaml


TTFT_PERCENTILES = draft.value("ttft.percentiles")  # §5.1.4.1


class TTFT(ProcedureRun[TTFTParams]):
    """§5.1.3: one measured run at the declared load; Tables 1 and 2 (§5.1.5)."""

    id, title, params_type, profiles = "5.1", "Time to First Token", TTFTParams, PROFILES
    measurement_keys = ("requests", "ttft_n", "ttft_mean_ms", "errors", "config_summary", "stopped",
                        "stopped_at_look")
    measurement_patterns = (r"ttft_p[0-9.]+_ms", r"trace_[a-z0-9_]+")
    stops_when_decided = True  # --llm-stop-when-decided: the measured run ends once its SLOs are settled
    trace: Trace | None = None  # the trace replayed as the measured run (prepare), None: the marker's load

    @staticmethod
    def plan(p: TTFTParams) -> dict[str, Any]:
        cold = 2 * p.cold_start_requests if p.cold_start else 0
        trace = checked_trace(p.trace)  # a replayed trace's requests replace the marker's count
        if trace is not None:
            return {"requests": len(trace) + p.warmup_requests + cold, "min_duration_s": trace.duration_s}
        return {"requests": p.requests + p.warmup_requests + cold, "min_duration_s": 0.0}

    async def prepare(self) -> None:
        p = self.p
        self.trace = self._read_trace()
        self.planned = p.requests
        if self.trace is not None:  # the trace's requests at its times: no marker load, no capacity look-up
            self._prepare_trace(self.trace)
        else:
            # lazy: a long run's requests are drawn one at a time, never held (the same requests for the seed)
            self.wl = build_workload(p.workload, n=p.requests, seed=self.seeds.derive("measure"),
                                     tokenizer=self.ctx.tokenizer, lazy=True)
            self.specs = cap_output(self.wl.specs, p.max_output_tokens)
            self.load, self.load_desc = await resolve_load(self.ctx, p.load, max_requests=len(self.specs),
                                                            seed=self.seeds.derive("arrivals"),
                                                            turns=turns_per_session(self.specs))
        self.cold_specs: list[Any] = []
        if p.cold_start or getattr(self.ctx.settings, "cold_start", False):  # §4.5.3, after the capacity look-up
            n = p.cold_start_requests
            self.cold_specs, self.warm_specs = (
                cap_output(build_workload(p.workload, n=n, seed=self.seeds.derive(purpose),
                                          tokenizer=self.ctx.tokenizer).specs, p.max_output_tokens)
                for purpose in ("cold-start", "cold-start-warm"))
            self.reserve(self.cold_specs)
            self.reserve(self.warm_specs)
            self.restart_s = await self.restart_sut()

    def _read_trace(self) -> Trace | None:
        """The trace to replay: the marker's ``trace``, else ``--llm-trace`` (None: none): the one read and
        checked before the first request (``checked_trace``), else read here with the session's trace options."""
        s = self.ctx.settings
        path = self.p.trace or getattr(s, "trace", None)
        if not path:
            return None
        checked = checked_trace(path)
        if checked is not None:
            return checked
        try:
            return read_trace(path, fmt=s.trace_format, block_size=s.trace_block_size, speedup=s.trace_speedup,
                              limit=s.trace_limit)
        except TraceError as exc:
            raise ProcedureError(f"procedure {self.id}: {exc}") from None

    def _prepare_trace(self, trace: Trace) -> None:
        """The measured run of a trace: its requests (output lengths as given: no profile cap) at its times."""
        self.wl = trace_workload(trace, seed=self.seeds.derive("measure"), tokenizer=self.ctx.tokenizer)
        self.specs = self.wl.specs
        self.planned = len(trace)
        arrival = TraceArrival.of(trace.offsets_ns(), seed=self.seeds.derive("arrivals"))
        self.load = OpenLoop(arrival, max_requests=len(trace))
        self.load_desc = {"model": "open", "arrival": "trace", "rate": arrival.rate, "trace": trace.describe()}

    def connections(self) -> int | None:
        # closed loop: a pool of at least N connections (and of the warm-up's concurrency, 8)
        load = self.p.load
        return max(load.concurrency, 8) if load.model == "closed" and load.concurrency else None

    async def warm_up(self, client: LLMClient) -> WarmupResult:
        # same workload and distribution, own seed stream: never the measured prompts (§4.5.1)
        p = self.p
        if self.cold_specs:  # the first requests after the restart, before any warm-up (§4.5.3)
            await self.measure_cold_start(client, self.cold_specs, self.restart_s)
        n, seed = max(p.warmup_requests, 10), self.seeds.derive("warmup")
        if self.trace is not None:  # lengths from the trace, blocks disjoint from every block it sends (§4.5.1)
            wu_specs = trace_warmup(self.trace, n=n, seed=seed, trace_seed=self.seeds.derive("measure"),
                                    tokenizer=self.ctx.tokenizer)
        else:
            wu_specs = build_workload(p.workload, n=n, seed=seed, tokenizer=self.ctx.tokenizer).specs
        self.reserve(self.specs)
        return await self.warm_up_with(client, cap_output(wu_specs, p.max_output_tokens), probes=p.warmup_probes)

    async def run_loads(self, client: LLMClient) -> None:
        if self.cold_specs:
            await self.measure_warm_reference(client, self.warm_specs)
        # §5.1.3 step 5 "continue until request count is reached": every request may take as long as
        # --llm-timeout allows, also after the last send (a saturated SUT drains a queue; 60 s cut it short)
        # --llm-stop-when-decided (issue 47): the run may end once the SLOs known before it are settled
        stop = getattr(self.ctx, "stop", None) if self.trace is None else None  # a trace is sent whole
        self.stopper = StopWhenDecided(stop, self.p.requests, self.ctx.progress) if stop is not None else None
        self.main = await self.measure(client, "measure", self.specs, self.load, extra={"load_spec": self.load_desc},
                                       drain_timeout_s=self.ctx.settings.timeout, stop=self.stopper)

    def summarize(self) -> Outcome:
        m = self.main
        metrics = m.metrics
        ttft = metrics.distributions["ttft"]
        self.n_ok = n_ok = ttft.n
        self.n_successful = int(metrics.scalar("completed_count").value)
        no_content = self.n_successful - n_ok
        self.pre_content = tally_of(m).pre_content  # counted as the records finished
        undersampled = [f"P{q:g} under-sampled: needs >= {need} samples, have {n_ok}"
                        for q, need in ((99, P99_MIN), (99.9, P999_MIN)) if n_ok < need]
        self.config_summary = self._config_summary()
        stopped, verdicts = self._stopped()
        tables = self._tables(undersampled)
        replay, replay_notes = self._replay(tables)
        return Outcome(
            metrics=metrics, tables=tables, workload=self.wl.declaration.to_json(),
            measurements={
                "requests": len(m.records), "ttft_n": n_ok,
                **{f"ttft_p{q:g}_ms": round(metrics.percentile("ttft", q).value * 1000, 3)
                   for q in TTFT_PERCENTILES if n_ok},
                "ttft_mean_ms": round(ttft.mean.value * 1000, 3) if n_ok else None,
                "errors": sum(metrics.errors_by_type.values()),
                "config_summary": {k: line for k, (line, _) in self.config_summary.items()},
                **stopped, **replay,
            },
            notes=replay_notes + self._stop_notes() + undersampled
            + ([f"{no_content} of {self.n_successful} successful requests streamed no non-whitespace content: "
                "no TTFT (§5.1.3.1)"] if no_content > 0 else [])
            + ([f"{self.pre_content} requests sent non-content chunks (e.g. role-only) before the first content "
                "token; TTFT is time to first content token (§5.1.3.1)"] if self.pre_content else [])
            # reasoning models (issue 49): hidden thinking is inside every TTFT here, and thinking cut short has none
            + [f"{f}; TTFT is the first content token (§5.1.3.1), ttfa the first fragment of any kind"
               for f in metrics.reasoning_findings()],
            plots={"ttft_samples_s": sample_list(metrics.per_request_values("ttft"))},
            fact_runs=[m],  # the cold-start runs are reported, the facts describe the measured run
            primary_run=m.summary.label,
            key_figures=latency_figures(metrics, 0),  # the headline's latency figures come from 5.1 first
            slo_verdicts=verdicts,
        )

    def _replay(self, tables: list[Table]) -> tuple[dict[str, Any], list[str]]:
        """A replayed trace's fidelity (issue 50): its table appended to ``tables``, its measurements and notes;
        nothing without a trace."""
        trace = self.trace
        if trace is None:
            return {}, []
        m = self.main
        f = replay_fidelity(m.records, trace.offsets_ns(), [r.input_length for r in trace.requests], m.load.start_ns)
        self.fidelity = f
        tables.append(_fidelity_table(f, trace))
        ms = {"trace_requests": f.planned, "trace_sent": f.sent,
              **{f"trace_send_lag_{k}_ms": _ms(getattr(f.send_lag, f"{k}_ms")) for k in ("p50", "p99", "max")},
              **{f"trace_gap_error_{k}_ms": _ms(getattr(f.gap_error, f"{k}_ms")) for k in ("p50", "p99", "max")},
              "trace_input_median_rel_error": f.input_median_rel_error, "trace_sha256": trace.sha256}
        notes = [f"Trace replay: {Path(trace.path).name} ({trace.format}, sha256 {trace.sha256[:16]}, "
                 f"{f.planned} requests over {trace.duration_s:.1f} s, speedup {trace.speedup:g}) replaces the "
                 "marker's load and request count: a custom load, so §5.1.2.2's required Poisson arrivals are unmet "
                 "(5.1.2-MUST-7/8)."]
        if self.p.max_output_tokens is not None:
            notes.append(f"max_output_tokens={self.p.max_output_tokens} not applied to the trace's requests: their "
                         "output lengths are the trace's")
        if getattr(self.ctx, "stop", None) is not None:
            notes.append("Stop when decided ignored: a replayed trace is sent whole")
        return ms, notes

    def _stopped(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """With --llm-stop-when-decided: how the run ended (``stopped``: ``decided`` at ``stopped_at_look``
        requests, or ``plan``) and each SLO's verdict taken at the run's looks; none otherwise."""
        st = self.stopper
        if st is None:
            return {}, {}
        verdicts = st.verdicts(self.main.metrics, self.main.load.sent)
        return {"stopped": "decided" if st.stopped else "plan", "stopped_at_look": st.stopped_at}, verdicts

    def _stop_notes(self) -> list[str]:
        st = self.stopper
        if st is None:
            return []
        if not st.stopped:
            why = st.run_info().get("reason") or "not every SLO was settled at a look"
            return [f"Stop when decided (--llm-stop-when-decided): the run went to its plan ({why})."]
        sent = self.main.load.sent
        return [f"Stopped when decided (--llm-stop-when-decided): every SLO known before the run "
                f"({', '.join(st.request.slos)}) was settled at the look at {st.stopped_at:,} requests; "
                f"{sent:,} of {self.p.requests:,} planned requests were sent (those in flight at the stop "
                "finished and are recorded). §5.1.3 step 5 continues until the request count is reached, so "
                "5.1.2-MUST-2 is unmet by this choice, and the estimates are conditional on stopping."]

    def _tables(self, undersampled: list[str]) -> list[Table]:
        m = self.main
        metrics, n_ok = m.metrics, self.n_ok
        ttft = metrics.distributions["ttft"]

        def pct(q: float) -> Cell:
            return Cell(metrics.percentile("ttft", q).value if n_ok else None, "s")

        table1 = Table(
            "Table 1: TTFT Results",
            ["Metric", "Value"],
            [["Requests", Cell(n_ok, "requests")]]
            + [[f"TTFT P{q:g}", pct(q)] for q in TTFT_PERCENTILES]
            + [["TTFT Mean", Cell(ttft.mean.value if n_ok else None, "s")],
               ["TTFT Min", Cell(ttft.min if n_ok else None, "s")],
               ["TTFT Max", Cell(ttft.max if n_ok else None, "s")]],
            notes=[f"sample count n={n_ok} successful measured requests of {len(m.records)} sent (§5.1.4.3)",
                   "TTFT = first content token (non-whitespace), §5.1.3.1", *undersampled],
        )
        rows2 = [[label.strip("[)").replace(",", "-").replace("-inf", "+"),
                  *(Cell(dist.percentile(q).value, "s") for q in (50, 95, 99)), Cell(dist.n, "requests")]
                 for label, dist in metrics.ttft_by_input_length.items()]
        tables = [table1, Table("Table 2: TTFT by Input Length",
                                ["Input Tokens", "P50 (ms)", "P95 (ms)", "P99 (ms)", "n"], rows2)]
        parts = [name for name in ("queue_wait", "prefill") if name in metrics.distributions
                 and metrics.distributions[name].n]
        rows = [[name, *percentile_row(metrics, name)] for name in parts]
        notes = []
        # a server without per-request timing may expose the phases as histograms (vLLM's /metrics): their
        # increase over the run, percentiles interpolated within the buckets, the mean exact (issue 48)
        self.component_sources: dict[str, str] = {}
        for name in ("queue_wait", "prefill"):
            h = m.server_histograms.get(name)
            if name in parts or h is None or h.count <= 0:
                continue
            src = f"{self.ctx.sut.adapter.title} {self.ctx.sut.adapter.metrics_path} {h.name}"
            self.component_sources[name] = f"{src} (histogram over the run)"
            rows.append([name, *(Cell(h.quantile(q / 100), "s") for q in (50, 95, 99))])
            ranges = ", ".join(f"P{q} in ({lo:g}, {hi:g}] s" for q in (50, 95, 99)
                               for lo, hi in [h.bucket(q / 100)])
            notes.append(f"{name}: {src}, its increase over the measured run ({h.count:g} requests observed, "
                         f"{len(m.records):,} sent); percentiles interpolated within the histogram's buckets "
                         f"(Prometheus histogram_quantile: {ranges}); mean {format_cell(Cell(h.mean, 's'))} exact "
                         "(_sum / _count)")
        if rows:
            tables.append(Table("TTFT components (server-reported, §5.1.4.2)", ["Component", "P50", "P95", "P99"],
                                rows, notes=notes))
        return tables

    #: §5.1.5 summary lines a client cannot observe on a real endpoint: the declaration keys that answer each
    DECLARED_LINES: ClassVar[dict[str, str]] = {"model identifier and hardware": "model, hardware",
                                                "prefix caching state": "prefix_caching", "guardrail configuration": "guardrails"}

    def _config_summary(self) -> dict[str, tuple[str | None, str]]:
        """The §5.1.5 configuration summary: per REQUIRED item its line (None: not known, see
        DECLARED_LINES) and where the line comes from (parameter, measured or declared)."""
        ctx, p, m, wu = self.ctx, self.p, self.main, self.warmup
        assert wu is not None
        info = ctx.sut.server_info
        decl = declarations(ctx)
        model, hw = decl.get("model"), decl.get("hardware")
        model_hw = (f"model {ctx.sut.model} ({', '.join(f'{k}={v}' for k, v in model.items())}); hardware "
                    f"{', '.join(f'{k}={v}' for k, v in hw.items())} ({decl.source})"
                    if isinstance(model, dict) and isinstance(hw, dict) else None)
        state, source = prefix_cache_state(ctx, wu, tally_of(m).cached)  # the state the compliance facts carry
        if state is not None:
            prefix = (f"{state} ({source})", "measured")
        else:
            prefix = (f"{decl['prefix_caching']} ({decl.source})" if "prefix_caching" in decl else None, "declared")
        if ctx.sut.embedded and "guardrails" in info:
            guard = (f"{info['guardrails']} (simulator /admin/config)", "measured")
        else:
            g = decl.get("guardrails")
            guard = (f"{', '.join(f'{k}={v}' for k, v in g.items())} ({decl.source})" if isinstance(g, dict) else None,
                     "declared")
        return {
            "SUT configuration and boundary": (f"{ctx.sut.boundary} at {ctx.sut.base_url}", "parameter"),
            "model identifier and hardware": (model_hw, "declared"),
            "workload name or full specification": (self.wl.declaration.name, "parameter"),
            "load model and its parameters": (self._load_line(), "parameter"),
            "request count and test duration": (f"{len(m.records)} requests in {m.load.duration_s:.1f} s", "measured"),
            "warm-up procedure followed": (f"{wu.ok} requests, {wu.output_tokens} output tokens, "
                                           f"drained={wu.drained}, probes stable={wu.stable}", "measured"),
            "prefix caching state": prefix,
            "guardrail configuration": guard,
        }

    def _load_line(self) -> str:
        trace = self.trace
        if trace is not None:
            rate = f", mean {trace.mean_rate:.2f} req/s" if trace.mean_rate else ""
            return (f"open loop, send times replayed from trace {trace.path} ({trace.format}, {len(trace)} requests "
                    f"over {trace.duration_s:.1f} s{rate}, speedup {trace.speedup:g})")
        return self.p.load.describe() + (f" = {self.load_desc['resolved_rate']:.2f} req/s"
                                         if "resolved_rate" in self.load_desc else "")

    def _trace_checks(self) -> dict[str, Check]:
        """§5.1.2.2's load items for a replayed trace: its mean rate is defined, its distribution is not one of the
        draft's and Poisson is REQUIRED (custom load, said so)."""
        trace = self.trace
        assert trace is not None
        what = f"send times replayed from trace {Path(trace.path).name} (custom load, --llm-trace)"
        rate = trace.mean_rate
        return {
            "5.1.2-MUST-6": decide("5.1.2-MUST-6", ok=rate is not None, source="parameter",
                                   met=f"mean arrival rate {rate or 0:.4g} req/s of the {what}",
                                   unmet=f"{what}: one send time, no arrival rate"),
            "5.1.2-MUST-7": decide("5.1.2-MUST-7", ok=False, source="parameter",
                                   unmet=f"{what}: not a Poisson, uniform or bursty distribution (§5.1.2.2)"),
            "5.1.2-MUST-8": decide("5.1.2-MUST-8", ok=False, source="parameter",
                                   unmet=f"{what}; Poisson arrivals are REQUIRED for open-loop TTFT runs"),
        }

    def checks(self, out: Outcome) -> dict[str, Check]:
        """The 5.1 items, decided by compliance from what this run sent and what its report holds."""
        n_ok, m = self.n_ok, self.main
        table1, table2 = out.tables[0], out.tables[1]
        written = {row[0]: format_cell(row[1]) for row in table1.rows}  # as the report shows them
        pre_noted = any("non-content" in n and "first content token" in n for n in out.notes)
        checks = {
            "5.1.2-MUST-2": decide("5.1.2-MUST-2", planned=self.planned, sent=len(m.records)),
            "5.1.2-MUST-3": decide("5.1.2-MUST-3", successful=self.n_successful, ttft_samples=n_ok),
            "5.1.2-MUST-4": decide("5.1.2-MUST-4", successful=self.n_successful, ttft_samples=n_ok),
            "5.1.3-MUST-1": decide("5.1.3-MUST-1", pre_content=self.pre_content, requests=len(m.records),
                                   noted=pre_noted),
            "5.1.4-MUST-1": decide("5.1.4-MUST-1", reported=written),
            "5.1.4-MUST-2": decide("5.1.4-MUST-2", n_ok=n_ok, notes=table1.notes),
            "5.1.4-SHOULD-1": decide("5.1.4-SHOULD-1", buckets=[row[0] for row in table2.rows]),
            "5.1.5-SHOULD-1": decide("5.1.5-SHOULD-1", rows=list(written)),
            "5.1.5-SHOULD-2": decide("5.1.5-SHOULD-2", samples=len(out.plots.get("ttft_samples_s") or ())),
        }
        if "resolved_rate" in self.load_desc:  # a capacity fraction: the rate is as good as the capacity (issue 48)
            d = self.load_desc
            checks["5.1.2-MUST-6"] = decide("5.1.2-MUST-6", rate=d["resolved_rate"], fraction=d["capacity_fraction"],
                                            capacity=d["capacity_rate"], standing=d.get("capacity_standing"),
                                            capacity_source=str(d.get("capacity_source") or ""))
        if self.trace is not None:
            checks.update(self._trace_checks())
        for i, (what, (line, source)) in enumerate(self.config_summary.items(), start=1):
            key = self.DECLARED_LINES.get(what)
            checks[f"5.1.5-MUST-{i}"] = decide(f"5.1.5-MUST-{i}", line=line, what=what, key=key, source=source)
        checks.update(self._report_rows(out, table1, table2))
        return checks

    def _report_rows(self, out: Outcome, table1: Table, table2: Table) -> dict[str, Check]:
        """§5.1.3 steps and §5.1.4/§5.1.5 REPORT rows, read back from what the run did and wrote (issue 48)."""
        wu, m, n_ok, tables = self.warmup, self.main, self.n_ok, out.tables
        varied = len({s.input_tokens for s in self.specs}) > 1
        parts = {t.rows[i][0]: t for t in tables if t.title.startswith("TTFT components") for i in range(len(t.rows))}
        c = {"5.1.3-PARAM-1": decide("5.1.3-PARAM-1", ok=bool(wu and wu.ok and wu.drained),
                                     met=f"warm-up of {wu and wu.ok} requests completed and drained before the first "
                                         "measured request", unmet=f"warm-up {wu and wu.ok} requests, drained="
                                                                    f"{wu and wu.drained}", source="measured"),
             "5.1.3-PARAM-3": decide("5.1.3-PARAM-3", ok=len(m.records) == self.planned,
                                     met=f"{len(m.records)} requests, the configured count",
                                     unmet=f"{len(m.records)} of {self.planned} configured requests sent",
                                     source="measured"),
             "5.1.3-PARAM-4": decide("5.1.3-PARAM-4", ok=True, met=f"T_first at the first non-whitespace content chunk; "
                                     f"{self.pre_content} requests sent non-content chunks first", source="measured"),
             "5.1.4-PARAM-1": decide("5.1.4-PARAM-1", ok=n_ok >= P999_MIN, met=f"{n_ok} TTFT samples >= {P999_MIN}",
                                     unmet=f"{n_ok} TTFT samples: P99 needs >= {P99_MIN}, P99.9 >= {P999_MIN}",
                                     source="measured")}
        for i, row in enumerate(("TTFT Mean", "TTFT Min", "TTFT Max"), start=1):
            c[f"5.1.4-REPORT-{i}"] = reported(f"5.1.4-REPORT-{i}", row, [(table1, row)], tables)
        for rid in ("5.1.4-REPORT-4", "5.1.5-REPORT-1"):
            c[rid] = reported(rid, "TTFT by input length", [(table2, f"{q} (ms)") for q in ("P50", "P95", "P99")],
                              tables) if varied else decide(rid, ok=None, na="every request has the same input length")
        first = next(iter(m.records), None)
        timing = (first.server_timing or {}) if first is not None else {}
        for rid, part, key in (("5.1.4-REPORT-5", "queue_wait", "queue_source"),
                               ("5.1.4-REPORT-6", "prefill", "prefill_source")):
            # e.g. llama.cpp timings.prompt_ms per request, vLLM's /metrics histograms over the run
            src = timing.get(key) or getattr(self, "component_sources", {}).get(part) or "the server's per-request timing"
            c[rid] = (reported(rid, f"TTFT {part} (server-reported: {src})", [(parts[part], part)], tables)
                      if part in parts else decide(rid, ok=None, na=f"the server reports no {part} component of TTFT"))
        return c


def _ms(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def _fidelity_table(f: ReplayFidelity, trace: Trace) -> Table:
    """The replay's fidelity (issue 50): send time against the trace's, gaps, input lengths."""
    rows: list[list[Any]] = [
        [name, *(Cell(None if v is None else v / 1000, "s") for v in (s.p50_ms, s.p99_ms, s.max_ms)), Cell(s.n, "requests")]
        for name, s in (("Send lag (T_submit − trace time)", f.send_lag),
                        ("Send-gap error |gap − trace gap|", f.gap_error))]
    med = f.input_median_rel_error
    notes = [f"{f.sent} of {f.planned} trace requests sent; the trace time of request i is the run's start plus its "
             f"offset ({trace.format} timestamps normalised to the first, divided by speedup {trace.speedup:g})",
             f"input length sent ({f.input_counted_by}) against the trace's: median relative error "
             + (f"{med:.2%}, max {f.input_max_rel_error:.2%}" if med is not None else "not known")]
    if f.schedule_mismatches:
        notes.append(f"{f.schedule_mismatches} requests were scheduled off their trace time")
    return Table("Trace replay fidelity", ["Measure", "P50", "P99", "Max", "n"], rows, notes=notes)
