"""§5.7 Prefix Cache Effectiveness: TTFT and throughput with the prefix cache off, cold and warm.

Procedure (§5.7.3): cache disabled → warm-up that does not populate the cache (a workload with
no prefix in common with the measured one) → run the workload → enable the cache → (flush) cold
run → flush, pre-populate with one request per shared prefix → warm run of the identical
request sequence → compare. Measurements (§5.7.4): TTFT P50/P95/P99 per configuration, TTFT
reduction ``(no_cache − cache) / no_cache``, cache hit rate (prefix tokens served from cache,
from ``usage.prompt_tokens_details.cached_tokens`` and from the server's counters when it
exposes them), and the throughput change. Table 10 has the three rows the draft shows.

The draft gives no load model or request count for 5.7 (requirements.md ambiguity 41): the
default is a closed loop of 4 (so "throughput improvement" means something: below saturation an
open loop's throughput is just its offered rate) and 1000 requests (enough for P99, §5.1.4.3).
The cold run does not pre-populate the cache, which 4.5.1 item 4 asks for (ambiguity 12); the
warm run does.

Multi-turn sessions (issue 50; ``workload="conversation-sessions"``, its file from ``workload_params`` or
``--llm-dataset conversation=PATH``): each configuration's measured run is a session run of the same
sessions (``requests`` counts every turn, ``load`` starts the sessions). The identical request sequence of
§5.7.3 holds only when every turn is fixed before the run, so the history carries the dataset's recorded
answers: ``recorded_answers`` defaults to True here and ``recorded_answers=False`` is a usage error (the
server's own answers differ between configurations, and so would every later turn). An open loop starts
sessions: a ``capacity_fraction`` starts them at fraction × capacity / mean turns per session, so the requests
offered are that fraction of the capacity (as 5.1 and 5.10 do); ``poisson(rate=R)`` is a session start rate.
``request_sequence_sha256`` covers every turn; ``<config>_sent_sequence_sha256`` hashes what each
configuration actually sent (index and prompt hash, history included). What the cache may serve is the
history: a turn's prefix is the whole prompt of its session's previous turn (the recorded answer is not
counted: the server never generated it), a first turn's its system prompt; the prefix hit rate sums
``min(cached_tokens, that prefix)`` over it, and a by-turn table gives TTFT P50, cached tokens and hit rate
per configuration. The warm run's pre-population is one request per distinct system prompt (the only prefix
known before a session starts; a session's history is made by the session itself); without system prompts
the warm run equals the cold one, and a note says so. The warm-up (step 2) stays on Synthetic-Uniform, which
shares no prefix with the sessions, and runs with the cache disabled.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..client import LLMClient
from ..common import draft
from ..common.records import RequestSpec
from ..compliance import Check, RunFacts, decide
from ..loadgen.warmup import WarmupResult
from ..measure.registry import declare, figure
from ..measure.units import Cell
from ..workloads import SESSIONS_WORKLOAD, SessionSource, build_workload, completion_prompt_ids, sequence_sha256
from .facts import declarations
from .helpers import cap_output, pvalue, session_comparison_params, skip_with_compliance, turns_per_session
from .helpers import reported as reported_in
from .loads import LoadSpec, closed, resolve_load
from .pipeline import Outcome, ProcedureRun
from .result import Overlays, RunSummary, Series, Table
from .run import Measured

P99_MIN = draft.value("ttft.p99_min_requests")  # §5.1.4.3
CONFIGS = ("disabled", "cold", "warm")
ROW_NAMES = {"disabled": "Cache Disabled", "cold": "Cache (Cold)", "warm": "Cache (Warm)"}


@dataclass
class PrefixCacheParams:
    """§5.7.2 setup parameters; the draft sets no count or load, so these are declared choices."""

    workload: str = "code-completion"
    workload_params: dict[str, Any] = field(default_factory=dict)  # e.g. {"dataset": "repo/"} (A.4)
    requests: int = P99_MIN
    load: LoadSpec = field(default_factory=lambda: closed(4))
    warm_run: bool = True  # Table 10's "Cache (Warm)" row: pre-populate the shared prefixes first
    warmup_requests: int = draft.value("warmup.min_requests")
    warmup_tokens: int = draft.value("warmup.min_output_tokens")
    max_output_tokens: int | None = None  # cap on each request's max_tokens (shorter runs); recorded

    def validate(self) -> None:
        if self.requests < 1:
            raise ValueError(f"requests must be >= 1, got {self.requests}")
        if not isinstance(self.load, LoadSpec):
            raise ValueError("load must be poisson(...), uniform(...), bursty(...) or closed(...)")  # noqa: TRY004
        if not isinstance(self.workload_params, dict):
            raise ValueError(  # noqa: TRY004  (make_params turns ValueError into ProcedureError)
                f"workload_params must be a dict, got {type(self.workload_params).__name__}")
        self.workload_params = session_comparison_params(self.workload, self.workload_params, "5.7")
        if self.max_output_tokens is not None and self.max_output_tokens < 1:
            raise ValueError(f"max_output_tokens must be >= 1, got {self.max_output_tokens}")


PROFILES: dict[str, dict[str, Any]] = draft.profiles('5.7')  # data/profiles.yaml

#: The figures of this procedure's result an SLO may name (§5.7.4), e.g. in ``assert_slo``; each reads
#: one of the result's measurements (scaled to the base unit), not a run's records.
declare(
    figure("warm_cache_ttft_reduction_p50", "Warm-cache TTFT reduction at P50", "fraction", "higher",
           "(TTFT P50 with the cache disabled - TTFT P50 with a warm cache) / TTFT P50 with the cache disabled",
           "§5.7.4", "warm_ttft_reduction_p50_pct", 0.01),
)


def prefix_specs(specs: list[RequestSpec], tokenizer: Any) -> list[RequestSpec]:
    """One request per distinct shared prefix: exactly the prefix's tokens, 1 output token (§5.7.3 step 5)."""
    out: list[RequestSpec] = []
    seen: set[str] = set()
    for s in specs:
        if s.prefix_id is None or s.prefix_id in seen or s.prefix_tokens < 1:
            continue
        seen.add(s.prefix_id)
        ids = completion_prompt_ids(s, tokenizer)[: s.prefix_tokens]
        out.append(RequestSpec(index=-(len(out) + 1), workload=f"{s.workload}-prefix", input_tokens=len(ids),
                               max_tokens=1, prompt_text=tokenizer.decode(ids), prompt_ids=tuple(ids),
                               prefix_id=s.prefix_id, prefix_tokens=len(ids)))
    return out


#: the user message of a session's pre-population request (its system prompt is the prefix)
POPULATE_MESSAGE = "(prefix cache pre-population)"


def session_prefix_specs(source: SessionSource, tokenizer: Any) -> list[RequestSpec]:
    """One request per distinct system prompt of the sessions (§5.7.3 step 5 on sessions): the system prompt
    and a short user message, 1 output token. A session's history is made by the session itself, so the system
    prompt is the only prefix known before the session starts."""
    out: list[RequestSpec] = []
    seen: set[str] = set()
    extra = len(tokenizer.encode(POPULATE_MESSAGE))
    for s in source.sessions:
        if not s.system_prompt or s.system_prompt in seen:
            continue
        seen.add(s.system_prompt)
        out.append(RequestSpec(index=-(len(out) + 1), workload=f"{source.workload}-prefix",
                               input_tokens=s.system_tokens + extra, max_tokens=1, prompt_text=POPULATE_MESSAGE,
                               system_prompt=s.system_prompt, prefix_id=f"system-prompt-{len(out)}",
                               prefix_tokens=s.system_tokens))
    return out


def session_prefixes(source: SessionSource) -> dict[int, int]:
    """Per turn (``RequestSpec.index``): the prompt tokens a prefix cache may already hold when it is sent. A
    first turn: its system prompt; turn k: the whole prompt of turn k-1 (the history's recorded answer is not
    counted: the server never generated it)."""
    out: dict[int, int] = {}
    for s in source.sessions:
        turns = source.turns_of(s)
        out[turns[0].index] = s.system_tokens if s.system_prompt else 0
        for prev, cur in zip(turns, turns[1:]):
            out[cur.index] = prev.input_tokens
    return out


def sent_sequence_sha256(m: Measured) -> str:
    """SHA-256 of what a run sent, in request order: each request's index and prompt hash (a session's
    history included), so two runs with equal hashes sent the same prompts."""
    return hashlib.sha256("".join(f"{i}:{h}\n" for i, h in sorted((r.index, r.prompt_hash or "")
                                                                   for r in m.records)).encode()).hexdigest()


@dataclass
class CacheStats:
    """Hit rates of one run: client view (usage.cached_tokens) and server view (/metrics counters)."""

    prefix_tokens: int  # Σ shared-prefix tokens of successful requests that carry a prefix
    cached_prefix_tokens: int  # Σ min(cached_tokens, prefix_tokens) of those requests
    cached_tokens: int  # Σ cached_tokens over successful requests
    prompt_tokens: int  # Σ input tokens over successful requests
    reported: int  # successful requests whose usage carried cached_tokens
    server_hit: float | None
    server_queried: float | None

    @property
    def prefix_hit_rate(self) -> float | None:
        return self.cached_prefix_tokens / self.prefix_tokens if self.prefix_tokens else None

    @property
    def prompt_cached_fraction(self) -> float | None:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else None

    @property
    def server_hit_rate(self) -> float | None:
        if self.server_hit is None or not self.server_queried:
            return None
        return self.server_hit / self.server_queried


def cache_stats(m: Measured, prefix_len: dict[int, int], turn: int | None = None) -> CacheStats:
    """The run's hit rates; ``turn``: over that turn of a session run alone (no server counters then)."""
    ok = [r for r in m.records if r.ok and (turn is None or r.turn == turn)]
    shared = [r for r in ok if prefix_len.get(r.index, 0) > 0]
    # the server's prefix-cache counters (adapter roles prefix_hits / prefix_queries), over the run
    hit, queried = m.server_increase("prefix_hits"), m.server_increase("prefix_queries")
    if hit is None or queried is None or turn is not None:
        hit = queried = None
    return CacheStats(
        prefix_tokens=sum(prefix_len[r.index] for r in shared),
        cached_prefix_tokens=sum(min(r.cached_tokens or 0, prefix_len[r.index]) for r in shared),
        cached_tokens=sum(r.cached_tokens or 0 for r in ok),
        prompt_tokens=sum(r.input_tokens for r in ok),
        reported=sum(1 for r in ok if r.cached_tokens is not None),
        server_hit=hit, server_queried=queried,
    )


def _reduction(base: float | None, new: float | None) -> float | None:
    return None if base is None or new is None or base <= 0 else (base - new) / base * 100.0


def _switch(run: PrefixCache, setting: str, value: Any) -> None:
    ctx = run.ctx
    if not ctx.configure_sut(setting, value):
        why = ctx.sut.server_info.get("prefix_cache_unavailable")  # an adapter's reason (vLLM: dev mode)
        skip_with_compliance(run, why or f"5.7 needs to set {setting}={value!r}: no pytest_llmbench_configure_sut "
                             "implementation can switch the SUT's prefix cache (see docs/prefix-cache.md)",
                             {"5.7.2-MUST-1": "the cache-disabled and cache-enabled configurations could not be set"},
                             declarations(run.ctx), getattr(run, "wl", None) and run.wl.declaration.to_json())


def overlays(runs: Sequence[RunSummary]) -> Overlays:
    """TTFT per cache configuration (§5.7.4), named as Table 10 names them, and its P50/P95/P99
    differences from the first (cache disabled)."""
    series = []
    for i, r in enumerate(r for r in runs if r.extra.get("prefix_cache") is not None):
        e = r.extra
        state = "disabled" if e["prefix_cache"] == "disabled" else ("warm" if e.get("prepopulated") else "cold")
        series.append(Series(ROW_NAMES[state], r.label, group=i))
    return Overlays("configuration", ["ttft"], "§5.7.4", series, differences=[("ttft", [50.0, 95.0, 99.0])])


class PrefixCache(ProcedureRun[PrefixCacheParams]):
    """§5.7.3: the same requests with the cache disabled, enabled cold and enabled warm; Table 10."""

    id, title, params_type, profiles = "5.7", "Prefix Cache Effectiveness", PrefixCacheParams, PROFILES
    measurement_keys = ("requests", "shared_prefixes", "load", "request_sequence_sha256", "sessions")
    #: per configuration: disabled, cold, warm (on sessions also what each sent and its figures by turn)
    measurement_patterns = (
        r"(disabled|cold|warm)_(ttft_p[0-9]+_ms|output_throughput_tps|request_throughput_rps|prefix_hit_rate"
        r"|prompt_cached_fraction|server_hit_rate|cached_tokens|server_hit_tokens|ttft_reduction_p[0-9]+_pct"
        r"|throughput_improvement_pct|request_throughput_improvement_pct|sent_sequence_sha256)",
        r"(disabled|cold|warm)_turn[0-9]+_(ttft_p50_ms|cached_tokens_mean|prefix_hit_rate)")

    @staticmethod
    def plan(p: PrefixCacheParams) -> dict[str, Any]:
        runs = 3 if p.warm_run else 2
        return {"requests": runs * p.requests + p.warmup_requests, "min_duration_s": 0.0}

    async def prepare(self) -> None:
        p, ctx = self.p, self.ctx
        self.wl = build_workload(p.workload, n=p.requests, seed=self.seeds.derive("measure"),
                                 tokenizer=ctx.tokenizer, **p.workload_params)
        self.specs = specs = cap_output(self.wl.specs, p.max_output_tokens)
        #: a session run's source (issue 50): its sessions, every turn fixed by the recorded answers
        self.sessions = specs if isinstance(specs, SessionSource) else None
        if self.sessions is not None:
            self.sequence: list[RequestSpec] = self.sessions.all_turns()  # every turn: the identical sequence
            self.prefix_len = session_prefixes(self.sessions)
            self.populate = session_prefix_specs(self.sessions, ctx.tokenizer)
        else:
            self.sequence = specs
            self.prefix_len = {s.index: s.prefix_tokens if s.prefix_id is not None else 0 for s in specs}
            self.populate = prefix_specs(specs, ctx.tokenizer)
        self.load, self.load_desc = await resolve_load(ctx, p.load, max_requests=len(specs),
                                                       seed=self.seeds.derive("arrivals"),
                                                       turns=turns_per_session(specs))
        info = ctx.sut.server_info
        self.original = info.get("prefix_cache") if "prefix_cache" in info else None
        self.runs: dict[str, Measured] = {}
        self.flushed: dict[str, bool] = {}
        self.population: WarmupResult | None = None
        _switch(self, "prefix_cache", False)  # step 1
        self.state_off = ctx.sut.server_info.get("prefix_cache")
        self.state_on: Any = None

    def connections(self) -> int | None:
        # the pool must hold the closed loop and the warm-up's 8 concurrent requests
        return max(self.p.load.concurrency or 1, 8) if self.p.load.model == "closed" else None

    async def warm_up(self, client: LLMClient) -> WarmupResult:
        """Step 2: without the workload's prefixes: another workload, prompts from its own stream."""
        p = self.p
        wu = build_workload("synthetic-uniform", n=max(p.warmup_requests, 1), seed=self.seeds.derive("warmup"),
                            tokenizer=self.ctx.tokenizer)
        return await self.warm_up_with(client, cap_output(wu.specs, p.max_output_tokens))

    async def run_loads(self, client: LLMClient) -> None:
        p, ctx, specs, load, desc = self.p, self.ctx, self.specs, self.load, self.load_desc
        self.runs["disabled"] = await self.measure(client, "cache-disabled", specs, load,  # step 3
                                                   extra={"prefix_cache": "disabled", "load_spec": desc})
        _switch(self, "prefix_cache", True)  # step 4
        self.state_on = ctx.sut.server_info.get("prefix_cache")
        self.flushed["cold"] = ctx.configure_sut("flush_prefix_cache", True)
        self.runs["cold"] = await self.measure(client, "cache-cold", specs, load,
                                               extra={"prefix_cache": "enabled", "prepopulated": False,
                                                      "flushed": self.flushed["cold"], "load_spec": desc})
        if p.warm_run:
            self.flushed["warm"] = ctx.configure_sut("flush_prefix_cache", True)
            if self.populate:  # step 5: one request per shared prefix, nothing else of the workload
                self.population = await self.warm_up_with(client, self.populate, min_requests=0,
                                                          min_output_tokens=0, prefix_specs=self.populate,
                                                          label="prefix-population")
            self.runs["warm"] = await self.measure(client, "cache-warm", specs, load,  # step 6
                                                   extra={"prefix_cache": "enabled",
                                                          "prepopulated": bool(self.populate),
                                                          "flushed": self.flushed["warm"], "load_spec": desc})

    def restore(self) -> None:
        self.ctx.configure_sut("prefix_cache", True if self.original is None else bool(self.original))

    def summarize(self) -> Outcome:
        runs = self.runs
        meas, configs_plot, tables = self._effect()
        primary = runs.get("warm") or runs["cold"]
        return Outcome(metrics=primary.metrics, tables=tables, measurements=meas,
                       workload=self.wl.declaration.to_json(), notes=self._notes(), plots={"configs": configs_plot},
                       runs=list(runs.values()),
                       facts={"prefix_caching": "enabled", "prefix_cache_under_test": True},
                       overlays=overlays([m.summary for m in runs.values()]))

    def _notes(self) -> list[str]:
        p, runs, populate = self.p, self.runs, self.populate
        notes: list[str] = []
        if self.original is None:
            notes.append("the SUT's original prefix-cache setting is unknown; it was left enabled")
        for k, f in self.flushed.items():
            if not f:
                notes.append(f"the cache could not be flushed before the {k} run (no hook for flush_prefix_cache): "
                             "it may hold prefixes from the previous run")
        if p.warm_run and not populate:
            notes.append("the sessions have no system prompt: nothing is known before a session starts, so the warm "
                         "run is not pre-populated (it repeats the cold run)" if self.sessions is not None else
                         "the workload has no shared prefix: nothing to pre-populate for the warm run")
        if self.sessions is not None:
            notes.append(f"multi-turn sessions (custom workload, issue 50): {len(self.sessions.sessions)} sessions, "
                         f"{len(self.sequence)} turns, the history carrying the recorded answers in every "
                         "configuration (the identical request sequence, §5.7.3); Cache (Warm) pre-populated with "
                         "each distinct system prompt")
        if p.max_output_tokens is not None:
            notes.append(f"output capped at {p.max_output_tokens} tokens by the profile")
        notes.append("Cache (Cold): cache enabled and flushed, not pre-populated (departs from §4.5.1 item 4 on "
                     "purpose, as Table 10 asks); Cache (Warm): flushed, then one request per shared prefix")
        for k, m in runs.items():
            if not m.summary.valid:
                notes.append(f"{ROW_NAMES[k]} run invalid: {m.summary.invalid_reason}")
        return notes

    def _effect(self) -> tuple[dict[str, Any], dict[str, dict[str, float | None]], list[Table]]:
        """Measurements, plot data and Table 10 with its effect table (§5.7.4)."""
        p, runs, specs, populate = self.p, self.runs, self.specs, self.populate
        base = runs["disabled"].metrics
        self.stats = stats = {k: cache_stats(m, self.prefix_len) for k, m in runs.items()}
        rows10, rows_fx = [], []
        meas: dict[str, Any] = {"requests": len(specs), "shared_prefixes": len(populate),
                                "load": p.load.describe(), "request_sequence_sha256": sequence_sha256(self.sequence)}
        if self.sessions is not None:
            meas["sessions"] = len(self.sessions.sessions)
            for k, m in runs.items():
                meas[f"{k}_sent_sequence_sha256"] = sent_sequence_sha256(m)
        configs_plot: dict[str, dict[str, float | None]] = {}
        tps_base = _tps(base)
        for k, m in runs.items():
            mt = m.metrics
            q = {pq: pvalue(mt, "ttft", pq) for pq in (50, 95, 99)}
            rows10.append([ROW_NAMES[k], *(Cell(q[pq], "s") for pq in (50, 95, 99))])
            for pq, v in q.items():
                meas[f"{k}_ttft_p{pq}_ms"] = None if v is None else round(v * 1000, 3)
            st = stats[k]
            tps = _tps(mt)
            rps = _rps(mt)
            meas[f"{k}_output_throughput_tps"] = None if tps is None else round(tps, 3)
            meas[f"{k}_request_throughput_rps"] = None if rps is None else round(rps, 4)
            meas[f"{k}_prefix_hit_rate"] = _round(st.prefix_hit_rate)
            meas[f"{k}_prompt_cached_fraction"] = _round(st.prompt_cached_fraction)
            meas[f"{k}_server_hit_rate"] = _round(st.server_hit_rate)
            meas[f"{k}_cached_tokens"] = st.cached_tokens
            meas[f"{k}_server_hit_tokens"] = st.server_hit
            configs_plot[ROW_NAMES[k]] = {f"ttft_p{pq}_s": q[pq] for pq in (50, 95, 99)}
            if k == "disabled":
                continue
            red = {pq: _reduction(pvalue(base, "ttft", pq), q[pq]) for pq in (50, 95, 99)}
            for pq in (50, 95, 99):
                meas[f"{k}_ttft_reduction_p{pq}_pct"] = _round(red[pq], 2)
            thr = _reduction(tps_base, tps)
            meas[f"{k}_throughput_improvement_pct"] = None if thr is None else round(-thr, 2)
            rps_b = _rps(base)
            rthr = _reduction(rps_b, rps)
            meas[f"{k}_request_throughput_improvement_pct"] = None if rthr is None else round(-rthr, 2)
            rows_fx.append([ROW_NAMES[k], *(Cell(red[pq], "%", 1) for pq in (50, 95, 99)),
                            Cell(st.prefix_hit_rate, "fraction", 1), Cell(st.server_hit_rate, "fraction", 1),
                            Cell(tps, "tokens/s", 1, label=True),
                            Cell(None if thr is None else -thr, "%", 1, signed=True)])
        table10 = Table("Table 10: Cache Effectiveness", ["Configuration", "TTFT P50", "TTFT P95", "TTFT P99"], rows10,
                        notes=[(f"identical request sequence in every configuration (sha256 {meas['request_sequence_sha256'][:16]}…), "
                               f"{len(specs)} requests, {p.load.describe()}"),
                               *(f"{ROW_NAMES[k]}: n={m.metrics.distributions['ttft'].n} successful of {len(m.records)}"
                                 for k, m in runs.items())])
        decl = self.wl.declaration.to_json()
        share = decl.get("prefix_sharing") or {}
        table_fx = Table("Prefix cache effect (§5.7.4)",
                         ["Configuration", "TTFT Reduction P50", "TTFT Reduction P95", "TTFT Reduction P99",
                          "Prefix Hit Rate (usage)", "Hit Rate (server)", "Output Throughput", "Throughput Change"],
                         rows_fx,
                         notes=["TTFT reduction = (TTFT_disabled - TTFT_cache) / TTFT_disabled at each percentile",
                                ("prefix hit rate = sum(min(cached_tokens, prefix tokens)) / sum(prefix tokens) over "
                                "successful requests that carry a shared prefix (usage.prompt_tokens_details.cached_tokens)"
                                 + ("; on sessions a turn's prefix is what the server already holds: the previous "
                                    "turn's whole prompt (a first turn: its system prompt)"
                                    if self.sessions is not None else "")),
                                "server hit rate = hit tokens / queried tokens counter deltas over the run (all prompts)",
                                f"throughput = steady-state output tok/s of the run ({p.load.describe()}); Cache Disabled: "
                                + ("n/a" if tps_base is None else f"{tps_base:.1f} tok/s"),
                                (f"shared prefixes: {len(populate)} ({share.get('selection', 'n/a')}), lengths "
                                f"{share.get('prefix_lengths', 'n/a')} tokens, sharing fraction "
                                f"{share.get('fraction', 'n/a')}")])
        self.table10, self.table_fx = table10, table_fx
        tables = [table10, table_fx]
        if self.sessions is not None:
            tables.append(self._by_turn(meas))
        return meas, configs_plot, tables

    def _by_turn(self, meas: dict[str, Any]) -> Table:
        """Sessions (issue 50): TTFT P50, mean cached tokens and prefix hit rate by turn, per configuration."""
        runs = self.runs
        turns = sorted({r.turn for m in runs.values() for r in m.records if r.turn is not None})
        rows: list[list[Any]] = []
        for t in turns:
            row: list[Any] = [str(t)]
            for k, m in runs.items():
                fig = m.metrics.sessions.turn(t) if m.metrics.sessions is not None else None
                ttft = None if fig is None or not fig.ttft.n else fig.ttft.percentile(50).value
                cached = None if fig is None or fig.cached_tokens is None else fig.cached_tokens.mean.value
                hit = cache_stats(m, self.prefix_len, turn=t).prefix_hit_rate
                meas[f"{k}_turn{t}_ttft_p50_ms"] = None if ttft is None else round(ttft * 1000, 3)
                meas[f"{k}_turn{t}_cached_tokens_mean"] = _round(cached, 2)
                meas[f"{k}_turn{t}_prefix_hit_rate"] = _round(hit)
                row += [Cell(ttft, "s"), Cell(cached, "tokens", 1), Cell(hit, "fraction", 1)]
            rows.append(row)
        cols = ["Turn", *(f"{h} ({ROW_NAMES[k]})" for k in runs for h in ("TTFT P50", "Cached Tokens", "Prefix Hit Rate"))]
        return Table("Prefix cache by turn (multi-turn sessions)", cols, rows,
                     notes=["cached tokens: mean usage.prompt_tokens_details.cached_tokens of the turn's successful "
                            "requests (n/a: the server reported none); prefix hit rate: over the previous turn's whole "
                            "prompt (a first turn: its system prompt)"])

    def checks(self, out: Outcome) -> dict[str, Check]:
        return {**item_checks(self.p, self.runs, self.stats, self.state_off, self.state_on, bool(self.population),
                              self.sequence, self.wl.declaration.to_json(), self.warmup, self.prefix_len),
                **report_checks(list(self.runs), self.table10, self.table_fx, out.tables)}

    def adjust_facts(self, facts: RunFacts) -> None:
        pop = self.population
        facts.warmup = dataclasses.replace(facts.warmup, prefix_populated=bool(pop and pop.prefix_requests))


def _tps(m: Any) -> float | None:
    v = m.scalar("output_throughput").value if "output_throughput" in m.scalars else None
    return None if v is None or math.isnan(v) else float(v)


def _rps(m: Any) -> float | None:
    v = m.scalar("request_throughput").value if "request_throughput" in m.scalars else None
    return None if v is None or math.isnan(v) else float(v)


def _round(v: float | None, digits: int = 5) -> float | None:
    return None if v is None or math.isnan(v) else round(v, digits)


def item_checks(p: PrefixCacheParams, runs: dict[str, Measured], stats: dict[str, CacheStats], state_off: Any,
                state_on: Any, populated: bool, specs: list[RequestSpec], decl: dict[str, Any], wu: Any,
                prefix_len: dict[int, int] | None = None) -> dict[str, Check]:
    """The 5.7 items; ``specs``: the request sequence (every turn of a session run), ``prefix_len`` the prefix
    tokens of each (a session turn's: the history the server holds)."""
    share = decl.get("prefix_sharing") or {}
    sessions = decl.get("name") == SESSIONS_WORKLOAD
    n_shared = (sum(1 for v in prefix_len.values() if v > 0) if prefix_len is not None
                else sum(1 for s in specs if s.prefix_id is not None))
    observed = n_shared / len(specs) if specs else 0.0
    base = runs["disabled"]
    base_ok = base.metrics.distributions["ttft"].n
    digest = sequence_sha256(specs)
    # the same requests and the same prompts (a session turn's history included) in every configuration
    sent_same = len({sent_sequence_sha256(m) for m in runs.values()}) == 1
    lengths = (f"each turn's history (the previous turn's prompt, mean "
               f"{sum(prefix_len.values()) / max(n_shared, 1):.0f} tokens)" if sessions and prefix_len
               else f"prefix lengths {share.get('prefix_lengths')} tokens")
    reported = any(st.reported or st.server_hit is not None for k, st in stats.items() if k != "disabled")
    return {
        "5.7.2-PARAM-1": (decide("5.7.2-PARAM-1", ok=bool(n_shared), met=f"{share.get('prefixes', 0)} shared prefixes declared "
                                    f"({share.get('selection', '')})", unmet="the workload has no shared prefix")),
        "5.7.2-PARAM-2": (decide("5.7.2-PARAM-2", ok=bool(share.get("prefix_lengths") or share.get("length") not in (None, "none")), met=lengths, unmet="prefix length not declared")),
        "5.7.2-PARAM-3": decide("5.7.2-PARAM-3", ok=True, met=f"sharing fraction {share.get('fraction')} declared, "
                                   f"{observed:.1%} observed"),
        "5.7.2-MUST-1": decide("5.7.2-MUST-1", ran=[name for name, key in (("disabled", "disabled"), ("enabled", "cold"))
                                                    if key in runs], state_off=state_off, state_on=state_on),
        "5.7.3-PARAM-1": decide("5.7.3-PARAM-1", ok=True, met=f"cache disabled; warm-up on synthetic-uniform ({wu.ok} requests) "
                                   "shares no prefix with the measured workload"),
        "5.7.3-PARAM-2": (decide("5.7.3-PARAM-2", ok=base_ok == len(base.records), met=f"TTFT recorded for all {base_ok} baseline requests", unmet=f"TTFT for {base_ok} of {len(base.records)} baseline requests")),
        "5.7.3-PARAM-3": decide("5.7.3-PARAM-3", ok=True, met="cold run: not pre-populated; warm run: "
                                   + ("pre-populated with every shared prefix" if populated else "not run/not populated")),
        "5.7.3-PARAM-4": (decide("5.7.3-PARAM-4", ok=bool(sent_same), met=f"identical request sequence (sha256 {digest[:16]}…)"
                                 + (", every session turn's history carrying the recorded answers" if sessions else ""),
                                 unmet="the runs did not send the same requests" + (
                                     " (a failed turn ends its session, so its later turns were not sent)"
                                     if sessions else ""))),
        "5.7.4-REPORT-4": (decide("5.7.4-REPORT-4", ok=bool(reported), met="hit rate from usage.cached_tokens and/or server counters", unmet="not measurable: the SUT reports neither cached_tokens nor "
                                       "prefix-cache counters")),
    }


def report_checks(ran: list[str], table10: Table, effect: Table, tables: list[Table]) -> dict[str, Check]:
    """5.7.4/5.7.5 REPORT items (but the hit rate, decided from what the SUT reports), read back from Table 10
    and the cache-effect table."""
    cached = [k for k in ran if k != "disabled"]
    items = {
        "5.7.4-REPORT-1": ("TTFT P50/P95/P99 with the cache disabled", [(table10, ROW_NAMES["disabled"])]),
        "5.7.4-REPORT-2": ("TTFT P50/P95/P99 with the cache enabled", [(table10, ROW_NAMES[k]) for k in cached]
                           or [(table10, ROW_NAMES["cold"])]),
        "5.7.4-REPORT-3": ("TTFT reduction per percentile", [(effect, f"TTFT Reduction P{q}") for q in (50, 95, 99)]),
        "5.7.4-REPORT-5": ("throughput change", [(effect, "Output Throughput"), (effect, "Throughput Change")]),
        "5.7.5-REPORT-1": ("Table 10", [(table10, ROW_NAMES[k]) for k in ran]),
    }
    return {rid: reported_in(rid, what, needs, tables) for rid, (what, needs) in items.items()}
