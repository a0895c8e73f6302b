"""The run of a whole benchmark session, without pytest (docs/architecture.md, "session.py").

A :class:`Session` is built from plain :class:`~.settings.Settings` and two callables (the
progress reporter and the SUT-configuration callback), so the same session can be driven by the
pytest plugin or by any other caller. It owns the SUT (the embedded simulator is started on first
use and stopped by :meth:`Session.close`), the endpoint check (§4.1), the result cache (one run
per procedure and parameters), the capacity hand-off between procedures (§5.3.3) and the recovery
of a procedure cut short (its records read back from disk, marked incomplete). :meth:`Session.result`
returns the plain :class:`SessionResult` that ``document.build`` turns into ``results.json``; the cached
results are never changed (the session-level compliance items are judged on copies, §4.3.2).

Each measured run is summarised once: the procedure summarises it, and the session writes that
summary's per-request samples beside the run's records (``samples.npz``, :mod:`.measure.samples`)
while it is in memory, so the regression gate stores a session by copying files.
:func:`resummarize_run` is what the gate is handed (it may not import the summariser) for a report
directory written before runs kept that file.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .compliance import rejudge_session
from .measure.samples import write_run_samples
from .procedures.base import (
    CannotMeasure,
    Procedure,
    ProcedureContext,
    SkipProcedure,
    StopRequest,
    capacity_provider,
    run_key,
)
from .procedures.result import Capacity, ProcedureResult, RunSummary
from .settings import Settings, parse_capacity
from .sut.system import SUT, EndpointError, check_endpoint, identify_grpc_server, identify_server, probe_rtt
from .workloads.datasets import DatasetOption, using_datasets
from .workloads.trace import Trace, using_traces

if TYPE_CHECKING:
    from .measure.summary import RunMetrics

__all__ = ["ConfigureSUT", "ProgressFactory", "Session", "SessionResult", "TerminationSignals",
           "configure_embedded", "keep_samples", "partial_result", "resummarize_run", "run_coroutine"]

T = TypeVar("T")

#: ``configure_sut(sut, setting, value) -> bool``: True when the switch was made (hookspecs.py).
ConfigureSUT = Callable[[SUT, str, Any], bool]
#: ``progress(procedure_id) -> report(line)``: a reporter of one procedure's progress lines.
ProgressFactory = Callable[[str], Callable[[str], None]]
ADMIN_TIMEOUT_S = 10.0


@dataclass
class SessionResult:
    """What a session produced, as plain data: the input of the results document (``document.build``).

    ``test_outcomes`` maps a test id to its procedure, result key, SLOs and outcome (filled by the
    caller, e.g. the pytest plugin); ``command_line`` is the invocation as given (the document
    redacts anything secret-looking).
    """

    settings: Settings
    sut: SUT | None = None
    results: dict[str, ProcedureResult] = field(default_factory=dict)
    capacity: dict[str, Capacity] = field(default_factory=dict)
    test_outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)
    started: float = field(default_factory=time.time)
    finished: float | None = None
    complete: bool = True
    interrupted: bool = False
    command_line: list[str] = field(default_factory=list)
    #: --llm-runs N (§6.3): per result key, every repetition (the first is ``results[key]``) and how
    #: the prefix cache was kept from serving one repetition from the previous one
    repetitions: dict[str, list[ProcedureResult]] = field(default_factory=dict)
    repetition_isolation: dict[str, str] = field(default_factory=dict)


def configure_embedded(sut: SUT, setting: str, value: Any) -> bool | None:
    """Switch the embedded simulator through its admin endpoint; None for any other SUT.

    ``restart`` restarts a server this process started (the simulator: a new process)."""
    if setting == "restart":
        from .sut.adapters import configure

        return configure(sut, setting, value)
    if not sut.embedded:
        return None
    import httpx

    resp = httpx.post(sut.root_url + "/admin/config", json={setting: value}, timeout=ADMIN_TIMEOUT_S)
    resp.raise_for_status()
    kept = {k: sut.server_info[k] for k in ("network_rtt",) if k in sut.server_info}  # the client's own probe
    sut.server_info = {**resp.json(), **kept}
    return True


def _grpc_endpoint(sut: SUT, model: str | None) -> dict[str, Any]:
    """A gRPC endpoint's own description (``GetModelInfo``, ``GetServerInfo``; §4.1): its served model is the
    one requested, ``model`` (--llm-model) must name it. :class:`EndpointError` when it does not answer."""
    from .client.errors import TransportError
    from .client.transports.grpc import describe_server

    try:
        info = describe_server(sut.base_url, sut.headers())
    except TransportError as exc:
        raise EndpointError(f"gRPC endpoint {sut.base_url} did not describe itself ({exc.error_type}: "
                            f"{exc.message})") from None
    served = str(info.get("served_model_name") or "")
    if model and served and model != served:
        raise EndpointError(f"model {model!r} is not served by {sut.base_url}; it serves {served!r}")
    sut.model = model or served
    sut.models_listed = [served] if served else []
    return info


def _no_progress(proc_id: str) -> Callable[[str], None]:
    return lambda line: None


class Session:
    """Session state: settings, SUT, result cache, capacity, partial results of cut-short procedures."""

    def __init__(self, settings: Settings, *, configure_sut: ConfigureSUT = configure_embedded,
                 progress: ProgressFactory = _no_progress) -> None:
        self.settings = settings
        self._configure = configure_sut
        self._progress = progress
        self.sut: SUT | None = None
        self.simulator: Any = None
        self.results: dict[str, ProcedureResult] = {}
        # a procedure that raised (error or skip) raises the same again for every later test that
        # asks for it, without running it again (like a session fixture whose set-up failed)
        self.failures: dict[str, Exception] = {}
        self.capacity: dict[str, Capacity] = {}
        self._capacity_errors: dict[str, str] = {}
        self.workloads_used: set[str] = set()  # shared with every ProcedureContext (§4.3.2-MUST-1)
        #: --llm-dataset files by workload (workloads.parse_dataset_options), read by every procedure's run
        self.datasets: dict[str, DatasetOption] = {}
        self.traces: dict[str, Trace] = {}  # read and checked by the plugin before the first request (issue 50)
        self._declared_capacity = (
            parse_capacity(settings.capacity, settings.sources.get("capacity", "capacity"))
            if settings.capacity else None
        )
        self.started = time.time()
        self._tokenizer: Any = None
        # procedures cut short by Ctrl-C or a crash: reported (complete=False), never cached as results
        self.partial: dict[str, ProcedureResult] = {}
        self.skipped: dict[str, ProcedureResult] = {}  # procedures that could not run, with their compliance
        self.repetitions: dict[str, list[ProcedureResult]] = {}  # --llm-runs N (§6.3)
        self.repetition_isolation: dict[str, str] = {}
        self.signals = TerminationSignals()  # SIGTERM/SIGHUP handled like Ctrl-C (install() to enable)

    # --- the SUT -----------------------------------------------------------------------------
    def get_sut(self) -> SUT:
        """The SUT, started (embedded simulator) and checked (§4.1 boundary, model list) once."""
        if self.sut is not None:
            return self.sut
        s = self.settings
        if s.embedded:
            from .simulator.config import SimConfig
            from .simulator.process import start_simulator

            sim_config = SimConfig.from_file(s.sim_config) if s.sim_config else SimConfig()
            sim_config = sim_config.replace(time_scale=s.time_scale, seed=s.seed,
                                            **({"reasoning": s.sim_reasoning} if s.sim_reasoning else {}))
            self.simulator = start_simulator(sim_config, grpc_port=0 if s.grpc else None)
            base_url, boundary = self.simulator.grpc_url or self.simulator.base_url, "model-engine"
        else:
            assert s.endpoint is not None
            if s.boundary is None:
                raise EndpointError(
                    "the SUT boundary must be declared before benchmarking a real endpoint (§4.1): pass "
                    "--llm-boundary model-engine|gateway|compound (or ini llm_boundary)"
                )
            base_url, boundary = s.endpoint, s.boundary
        if s.api_key_env and not os.environ.get(s.api_key_env):
            raise EndpointError(f"{s.sources.get('api_key_env', '--llm-api-key-env')}: environment variable "
                                f"{s.api_key_env!r} (named as the API key holder) is empty")
        sut = SUT(base_url=base_url, model=s.model or "", api=s.api, boundary=s.boundary or boundary,
                  api_key_env=s.api_key_env, verify_tls=not s.insecure, embedded=s.embedded,
                  http_root=self.simulator.url if self.simulator is not None and s.grpc else None)
        grpc_info = _grpc_endpoint(sut, s.model) if s.grpc else None
        if grpc_info is None:
            sut.model, sut.models_listed = check_endpoint(base_url, s.model, headers=sut.headers(),
                                                          verify=sut.verify_tls)
        if self.simulator is not None:
            import httpx

            sut.server_info = httpx.get(sut.root_url + "/admin/config", timeout=ADMIN_TIMEOUT_S).json()
            from .sut.adapters import register_restart

            register_restart(sut.root_url, self.simulator.restart)
        if grpc_info is not None:  # §4.6.1: the server's gRPC service describes itself
            identify_grpc_server(sut, grpc_info, s.server_kind)
        else:
            identify_server(sut, s.server_kind)
        sut.server_info["network_rtt"] = probe_rtt(base_url)  # §4.7.3-SHOULD-1: once, before the runs
        self.sut = sut
        return sut

    @property
    def tokenizer(self) -> Any:
        """The reference tokenizer (§4.4), loaded once; raises ``TokenizerError`` when it cannot be."""
        if self._tokenizer is None:
            from .common.tokenizer import get_tokenizer

            self._tokenizer = get_tokenizer(self.settings.tokenizer)
        return self._tokenizer

    def configure_sut(self, setting: str, value: Any) -> bool:
        assert self.sut is not None
        return bool(self._configure(self.sut, setting, value))

    def close(self) -> None:
        """Stop the embedded simulator, if this session started it."""
        if self.simulator is not None:
            self.simulator.stop()
            self.simulator = None

    # --- procedures ----------------------------------------------------------------------------
    def run(self, proc: Procedure, params: Any, stop: StopRequest | None = None) -> ProcedureResult:
        """Run a procedure once per (procedure, parameters) per session; later calls get the cache.
        ``stop``: its measured run stops once these SLOs are settled (a procedure that can: issue 47);
        part of the key (:func:`run_key`)."""
        key = run_key(proc.id, params, stop)
        if key in self.results:
            return self.results[key]
        if key in self.failures:
            raise self.failures[key]
        try:
            return run_coroutine(self._run_async(proc, params, stop))
        except Exception as exc:  # KeyboardInterrupt/SystemExit end the session: never cached
            self.failures[key] = exc
            raise

    async def _run_async(self, proc: Procedure, params: Any, stop: StopRequest | None = None) -> ProcedureResult:
        key = run_key(proc.id, params, stop)
        if key in self.results:
            return self.results[key]
        index = len(self.results)
        result = await self._run_once(proc, params, key, f"{proc.id.replace('.', '_')}-{index:02d}", 0, stop)
        if self.settings.runs > 1:
            await self._repeat(proc, params, key, index, result, stop)
        self.results[key] = result
        return result

    async def _repeat(self, proc: Procedure, params: Any, key: str, index: int, first: ProcedureResult,
                      stop: StopRequest | None = None) -> None:
        """Repetitions 2..N of ``--llm-runs N`` (§6.3), each after an optional cooldown.

        Each repetition runs the procedure whole (its own warm-up included). It must not be served
        from the prefix cache the previous one filled: the cache is flushed through the
        ``flush_prefix_cache`` hook where the SUT supports it, otherwise the repetition draws its
        prompts from its own seed streams (``<procedure>/repetition-<k>``).
        """
        reps = [first]
        ways: list[str] = []
        for k in range(1, self.settings.runs):
            if self.settings.runs_cooldown > 0:
                await asyncio.sleep(self.settings.runs_cooldown)
            try:
                flushed = self.configure_sut("flush_prefix_cache", True)
            except Exception:  # noqa: BLE001 - a SUT that refuses the switch: fall back to fresh prompts
                flushed = False
            ways.append("flush" if flushed else "stream")
            reps.append(await self._run_once(proc, params, key, f"{proc.id.replace('.', '_')}-{index:02d}-rep{k + 1}",
                                             0 if flushed else k, stop))
        self.repetitions[key] = reps
        if all(w == "flush" for w in ways):
            how = "prefix cache flushed before each repetition (flush_prefix_cache hook)"
        elif all(w == "stream" for w in ways):
            how = ("the SUT could not flush its prefix cache: each repetition used its own prompt stream "
                   "(seed streams '<procedure>/repetition-<k>'), so no repetition hit a prefix cached by another")
        else:
            how = "prefix cache flushed where the hook succeeded, own prompt stream otherwise: " + ", ".join(ways)
        self.repetition_isolation[key] = how
        first.notes.append(f"--llm-runs {self.settings.runs} (§6.3): {how}; across-run statistics in 'repetitions'")

    async def _run_once(self, proc: Procedure, params: Any, key: str, dirname: str, repetition: int,
                        stop: StopRequest | None = None) -> ProcedureResult:
        sut = self.get_sut()
        run_root = self.settings.report / "runs" / dirname
        if run_root.exists():  # an earlier session's run of the same name: its records are not this run's
            shutil.rmtree(run_root)
        run_root.mkdir(parents=True)
        ctx = ProcedureContext(
            sut=sut,
            settings=self.settings,
            tokenizer=self.tokenizer,
            run_root=run_root,
            get_capacity=self.get_capacity,  # replaced below: the look-up does not spend this budget
            configure_sut=self.configure_sut,
            progress=self._progress(proc.id),
            session_workloads=self.workloads_used,
            repetition=repetition,
            deadline=time.monotonic() + self.settings.max_duration if self.settings.max_duration else None,
            stop=stop if proc.stops_when_decided else None,
        )
        ctx.get_capacity = self._capacity_outside_budget(ctx)
        t0 = time.perf_counter()
        try:
            # the workloads' --llm-dataset files (App. A.3, A.4), the traces read before the first request
            with using_datasets(self.datasets), using_traces(self.traces, self.settings.trace):
                result = await proc.run(ctx, params)
        except BaseException as exc:  # Ctrl-C (cancellation) or a crash: report what reached the disk
            if not isinstance(exc, SkipProcedure):
                partial = partial_result(proc, params, run_root, self.settings.profile, exc,
                                         signal_name=self.signals.received)
                partial.duration_s = time.perf_counter() - t0
                self.partial[key] = partial
            elif exc.result is not None:  # skipped, with the item it could not meet (issue 48)
                self.partial[key] = self.skipped[key] = exc.result
            raise
        result.duration_s = time.perf_counter() - t0
        try:
            keep_samples(result.runs)
        except OSError as err:  # a full disk or read-only report directory must not lose the result
            result.notes.append(f"per-request samples not written beside the run records ({err}); "
                                "--llm-save will summarise the runs again from their records")
        return result

    def _capacity_outside_budget(self, ctx: ProcedureContext) -> Callable[[str], Awaitable[Capacity]]:
        """``get_capacity`` for one procedure: a 5.2/5.5 search run for it has its own time budget,
        so the dependent procedure's deadline moves by the time the look-up took."""

        async def get(kind: str) -> Capacity:
            t = time.monotonic()
            try:
                return await self.get_capacity(kind)
            finally:
                if ctx.deadline is not None:
                    ctx.deadline += time.monotonic() - t

        return get

    async def get_capacity(self, kind: str) -> Capacity:
        """Capacity by precedence: declared value, else a run in this session of the procedure that
        declares it provides that capacity (``provides_capacity``: 5.2 rate, 5.5 concurrency; §5.3.3)."""
        if kind in self.capacity:
            return self.capacity[kind]
        if kind in self._capacity_errors:  # one failed search per session, not one per dependent test
            raise CannotMeasure(self._capacity_errors[kind])
        if self._declared_capacity is not None and self._declared_capacity[0] == kind:
            value = self._declared_capacity[1]
            cap = (Capacity(rate=value, source="declared (--llm-capacity)", standing="declared") if kind == "rate"
                   else Capacity(concurrency=int(value), source="declared (--llm-capacity)", standing="declared"))
        else:
            proc = capacity_provider(kind)
            params = proc.make_params(self.settings.profile, {})
            result = await self._run_async(proc, params)
            if result.capacity is None:
                self._capacity_errors[kind] = self._capacity_error(proc.id, kind)
                raise CannotMeasure(self._capacity_errors[kind])
            cap = result.capacity
            if not cap.source:  # named on a copy: a result is not changed once its procedure returned it
                cap = dataclasses.replace(cap, source=f"measured by {proc.id} in this session")
        self.capacity[kind] = cap
        return cap

    def _capacity_error(self, proc_id: str, kind: str) -> str:
        """Why no capacity, and what to do: a time budget too short for a slow server is the usual cause."""
        msg = f"procedure {proc_id} did not determine a capacity"
        budget = self.settings.max_duration
        if budget:
            where = self.settings.sources.get("max_duration", "--llm-max-duration")
            msg += (f"; its time budget of {budget:g} s per procedure ({where}) may be too short for this "
                    f"server's speed: raise --llm-max-duration (0: no budget) or declare the capacity with "
                    f"--llm-capacity {kind}=VALUE")
        return msg

    def combined_capacity(self) -> Capacity:
        """Both capacities (concurrency from 5.5, rate from 5.2, or declared) in one object."""
        conc = run_coroutine(self.get_capacity("concurrency"))
        rate = run_coroutine(self.get_capacity("rate"))
        return Capacity(rate=rate.rate, concurrency=conc.concurrency, output_throughput=rate.output_throughput,
                        source=f"rate: {rate.source}; concurrency: {conc.source}",
                        standing=rate.standing if rate.standing == conc.standing else
                        f"rate: {rate.standing}; concurrency: {conc.standing}")

    # --- the result ------------------------------------------------------------------------------
    def result(self, *, complete: bool, interrupted: bool = False, test_outcomes: dict[str, dict[str, Any]] | None
               = None, command_line: list[str] | None = None) -> SessionResult:
        """The session's :class:`SessionResult`; partial results of cut-short procedures are included.

        A session with a crashed procedure (an incomplete partial result) is never complete.
        """
        results = {**self.results, **{k: p for k, p in self.partial.items() if k not in self.results}}
        judged = _judged_over_session(results)
        crashed = any(not r.complete for k, r in judged.items() if k not in self.skipped)
        # the first repetition is the result itself: the judged copy stands in for it there too
        repetitions = {k: [judged.get(k, r) if r is results.get(k) else r for r in reps]
                       for k, reps in self.repetitions.items()}
        return SessionResult(settings=self.settings, sut=self.sut, results=judged,
                             capacity=dict(self.capacity), test_outcomes=dict(test_outcomes or {}),
                             started=self.started, finished=time.time(),
                             complete=complete and not interrupted and not crashed, interrupted=interrupted,
                             command_line=list(command_line or []), repetitions=repetitions,
                             repetition_isolation=dict(self.repetition_isolation))


def _judged_over_session(results: dict[str, ProcedureResult]) -> dict[str, ProcedureResult]:
    """Copies of ``results`` with the session-level items judged over all of them, whatever the test
    order (§4.3.2, §4.8.2); the cached results keep the verdict their own run gave."""
    judged = rejudge_session(results)
    out = {}
    for key, r in results.items():
        j = judged.get(key)
        out[key] = r if j is None else dataclasses.replace(
            r, facts=j.facts, compliance=j.compliance,
            measurements={**r.measurements, "compliance_verdict": j.compliance.verdict.value})
    return out


def partial_result(proc: Procedure, params: Any, run_root: Path, profile: str,
                   exc: BaseException, *, signal_name: str | None = None) -> ProcedureResult:
    """A procedure cut short: its measured records read back from disk, marked incomplete.

    Every run directory under ``run_root`` is summarised from its ``records.jsonl`` (measure
    phase only; warm-up and probes never count); the note says why the procedure stopped.
    """
    from .common.storage import StorageError, iter_records
    from .measure.summary import summarize

    if isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
        why = f"interrupted ({signal_name or 'Ctrl-C'}) before the procedure finished"
    else:
        why = f"the procedure crashed: {type(exc).__name__}: {str(exc)[:300]}"
    runs: list[RunSummary] = []
    notes = [f"INCOMPLETE: {why}; figures cover only the requests measured before that"]
    for path in sorted(run_root.glob("*/records.jsonl")):
        try:
            records = [r for r in iter_records(path.parent) if r.phase == "measure"]
        except (StorageError, OSError) as err:  # pragma: no cover - a damaged file must not lose the report
            notes.append(f"{path}: not read ({err})")
            continue
        if records:
            runs.append(RunSummary(label=path.parent.name, run_dir=str(path.parent),
                                   load={"sent": len(records), "interrupted": True},
                                   metrics=summarize(records), valid=False, invalid_reason=why))
    try:
        keep_samples(runs)
    except OSError as err:  # a full disk must not lose the report
        notes.append(f"per-request samples not kept beside the records ({err})")
    try:
        params_json = dataclasses.asdict(params)
    except TypeError:  # pragma: no cover - params are dataclasses
        params_json = {}
    return ProcedureResult(procedure=proc.id, title=proc.title, params=params_json, profile=profile,
                           metrics=runs[0].metrics if runs else None, runs=runs,
                           measurements={"requests": sum(r.load["sent"] for r in runs)},
                           notes=notes, complete=False)


def keep_samples(runs: Iterable[RunSummary]) -> None:
    """Write each measured run's per-request samples beside its records (``samples.npz``), from the
    summary in memory: what the regression gate stores and its CIs need (§6.3)."""
    for run in runs:
        if run.run_dir:
            write_run_samples(run.run_dir, run.metrics)


def resummarize_run(run_dir: Path, itl_option: str) -> RunMetrics:
    """A run's measured records summarised again, for a report directory written before runs kept their
    samples file: with the §4.6.3 ITL option the run used, or the best its records give (``auto``) when
    they cannot give that one. What the package CLI and the plugin hand the gate (``resummarize=``)."""
    from .common.storage import iter_records
    from .measure.summary import summarize

    try:
        return summarize(iter_records(run_dir), itl_option=itl_option)
    except ValueError:  # the records cannot give that ITL option (§4.6.3): the best they can
        return summarize(iter_records(run_dir), itl_option="auto")


class TerminationSignals:
    """SIGTERM and SIGHUP handled like SIGINT (CI systems stop jobs with SIGTERM).

    The handler forwards to whatever handles SIGINT at that moment: inside ``asyncio.run`` that
    cancels the running procedure (sending stops, in-flight requests are recorded as cancelled),
    elsewhere it raises ``KeyboardInterrupt``. Either way the caller writes every report marked
    INCOMPLETE and exits non-zero, as after Ctrl-C. ``received`` names the signal that came.
    """

    NAMES = ("SIGTERM", "SIGHUP")

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        """Install the handlers (main thread only; a no-op elsewhere and for absent signals)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for name in self.NAMES:
            sig = getattr(signal, name, None)
            if sig is not None and sig not in self._previous:
                self._previous[sig] = signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = signal.Signals(signum).name
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler) and handler is not signal.default_int_handler:
            handler(signal.SIGINT, frame)  # asyncio.Runner's: cancel the main task
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:  # raised here it could land inside a transport's callback (aiohttp's
            loop.call_soon_threadsafe(self._interrupt)  # data_received), which uvloop logs and swallows
            return
        raise KeyboardInterrupt(self.received)

    def _interrupt(self) -> None:
        """Raised from a loop callback of its own, the interruption leaves the loop as Ctrl-C does."""
        raise KeyboardInterrupt(self.received)


def run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    """Run a procedure in a fresh event loop (uvloop when available), off any caller's own loop."""
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux/macOS
        return asyncio.run(coro)
