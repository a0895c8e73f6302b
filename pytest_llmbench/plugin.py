"""pytest glue only: options, ini keys, markers, fixtures and report hooks (shared/DESIGN.md).

Everything that measures lives below this module and knows nothing about pytest. The session
state is one :class:`LLMBenchSession` registered as a plugin (like pytest-benchmark's
``BenchmarkSession``); it owns the SUT, the result cache (one run per procedure and parameters
per session) and the capacity shared between procedures.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from . import hookspecs
from .procedures.base import (
    Capacity,
    Procedure,
    ProcedureContext,
    ProcedureError,
    ProcedureResult,
    SkipProcedure,
    get_procedure,
    params_key,
)
from .settings import Settings, add_options, parse_capacity, resolve
from .sut import SUT, EndpointError, check_endpoint, identify_server

MARKER = "llm_procedure"
SESSION_KEY = pytest.StashKey["LLMBenchSession"]()
ITEM_KEY = pytest.StashKey[tuple[Procedure, Any, list[str]]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(id, slo=None, **params): run draft procedure `id` (\"5.1\" ... \"5.10\") with the given "
        "parameters; `slo` is a list of SLO expressions asserted on the result, e.g. ['ttft.p99<=500ms']",
    )
    config.addinivalue_line("markers", "llmbench: added by pytest-llmbench to every llm_procedure test")
    settings = resolve(config.getoption, config.getini)
    settings.rootdir = config.rootpath
    if not settings.timeout > 0:  # a zero timeout would fail every request, not the configuration
        raise pytest.UsageError(f"{settings.sources.get('timeout', '--llm-timeout')}: invalid value "
                                f"{settings.timeout!r} for timeout: must be > 0 seconds")
    session = LLMBenchSession(config, settings)
    config.stash[SESSION_KEY] = session
    config.pluginmanager.register(session, "llmbench-session")


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    session = config.stash.get(SESSION_KEY, None)
    if session is None:
        return None
    s = session.settings
    endpoint = s.endpoint or "embedded simulator (127.0.0.1, started on first use)"
    boundary = s.boundary or ("model-engine" if s.embedded else "NOT DECLARED (required, §4.1)")
    return [
        f"llmbench: endpoint={endpoint} model={s.model or '(first listed)'} api={s.api} "
        f"profile={s.profile} boundary={boundary} seed={s.seed} report={s.report}"
    ]


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    """Validate every llm_procedure marker at collection: unknown ids/parameters are usage errors."""
    bench: LLMBenchSession = config.stash[SESSION_KEY]
    selected = []
    for item in items:
        marker = item.get_closest_marker(MARKER)
        if marker is None:
            continue
        if not marker.args:
            raise pytest.UsageError(f"{item.nodeid}: @{MARKER} needs the procedure id, e.g. @{MARKER}(\"5.1\")")
        kwargs = dict(marker.kwargs)
        slos = kwargs.pop("slo", None) or []
        if isinstance(slos, str):
            slos = [slos]
        try:
            proc = get_procedure(str(marker.args[0]))
            _check_param_types(proc, kwargs)
            params = proc.make_params(bench.settings.profile, kwargs)
            _validate_slos(slos, f"{item.nodeid}: marker slo")
            _validate_workload(proc, params)
        except ProcedureError as exc:
            raise pytest.UsageError(f"{item.nodeid}: {exc}") from None
        except TypeError as exc:  # a value of the wrong type that a validate() compared
            raise pytest.UsageError(f"{item.nodeid}: @{MARKER}({marker.args[0]!r}): invalid parameter value: {exc}"
                                    ) from None
        item.stash[ITEM_KEY] = (proc, params, list(slos))
        item.add_marker(pytest.mark.llmbench)
        selected.append(item)
    if selected and not (bench.settings.dry_run or config.option.collectonly):
        from .tokenizer import TokenizerError

        try:  # a bad --llm-tokenizer is one message now, not an error inside every procedure
            _ = bench.tokenizer
        except TokenizerError as exc:
            source = bench.settings.sources.get("tokenizer", "--llm-tokenizer")
            raise pytest.UsageError(f"{source}: {exc}") from None
    if selected and (bench.settings.dry_run or config.option.collectonly):
        bench.print_plan(selected)
        if bench.settings.dry_run:
            config.hook.pytest_deselected(items=list(items))
            items[:] = []


def _check_param_types(proc: Procedure, kwargs: dict[str, Any]) -> None:
    """A number parameter given a non-number (``requests="many"``) is named before anything runs."""
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(proc.params_type)}
    for name, value in kwargs.items():
        f = fields.get(name)
        if f is None or isinstance(f.default, bool) or not isinstance(f.default, (int, float)):
            continue
        if value is None and "None" in str(f.type):  # Optional[int]: None is a value
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ProcedureError(f"procedure {proc.id}: parameter {name}={value!r} must be a number")


def _validate_workload(proc: Procedure, params: Any) -> None:
    """A marker's workload: a registered name, or a custom spec file read and checked now (§4.3.1).

    Request files (``.jsonl``, replayed) are checked when the procedure reads them.
    """
    name = getattr(params, "workload", None)
    if not isinstance(name, str):
        return
    from .workloads import WORKLOADS, WorkloadError, load_spec, validate_spec

    suffix = Path(name).suffix.lower()
    if name in WORKLOADS or suffix == ".jsonl":
        return
    if suffix not in (".toml", ".yaml", ".yml", ".json"):
        raise ProcedureError(f"procedure {proc.id}: unknown workload {name!r}: use one of {', '.join(WORKLOADS)}, "
                             "a spec file (.toml, .yaml, .yml, .json) or a request file (.jsonl)")
    try:
        validate_spec(load_spec(name), source=name)
    except WorkloadError as exc:
        raise ProcedureError(f"procedure {proc.id}: {exc}") from None  # the message names the file


def _validate_slos(slos: list[str], where: str) -> None:
    from .slo import SLOError, parse_slo

    for text in slos:
        try:
            parse_slo(text)
        except SLOError as exc:
            raise ProcedureError(f"{where}: {exc}") from None


@pytest.hookimpl(trylast=True)
def pytest_llmbench_configure_sut(sut: SUT, setting: str, value: Any) -> bool | None:
    """Default implementation: the embedded simulator switches through its admin endpoint."""
    if setting == "restart":  # servers this process started (the simulator: a process restart)
        from .adapters import configure

        return configure(sut, setting, value)
    if not sut.embedded:
        return None
    import httpx

    body = {setting: value}
    resp = httpx.post(sut.root_url + "/admin/config", json=body, timeout=10.0)
    resp.raise_for_status()
    sut.server_info = resp.json()
    return True


class LLMBenchSession:
    """Session state: settings, SUT, result cache, capacity, what each test produced."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.sut: SUT | None = None
        self.simulator: Any = None
        self.results: dict[str, ProcedureResult] = {}
        self.test_outcomes: dict[str, dict[str, Any]] = {}
        self.capacity: dict[str, Capacity] = {}
        self.workloads_used: set[str] = set()  # shared with every ProcedureContext (§4.3.2-MUST-1)
        self._declared_capacity = (
            parse_capacity(settings.capacity, settings.sources.get("capacity", "capacity"))
            if settings.capacity else None
        )
        self.started = time.time()
        self._tokenizer: Any = None
        self.interrupted = False
        # procedures cut short by Ctrl-C or a crash: reported (complete=False), never cached as results
        self.partial: dict[str, ProcedureResult] = {}
        self.ran: set[str] = set()  # nodeids that reported, to tell a -x stop from a complete session

    # --- planning ----------------------------------------------------------------------------
    def print_plan(self, items: list[pytest.Item]) -> None:
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        write = (lambda s: tr.write_line(s)) if tr is not None else print
        write(f"llmbench plan (profile {self.settings.profile}):")
        for item in items:
            proc, params, _ = item.stash[ITEM_KEY]
            plan = proc.plan(params)
            write(f"  {item.nodeid}: {proc.id} {proc.title}: ~{plan.get('requests', '?')} requests, "
                  f">= {plan.get('min_duration_s', 0):.0f} s")

    # --- the SUT -----------------------------------------------------------------------------
    def get_sut(self) -> SUT:
        if self.sut is not None:
            return self.sut
        s = self.settings
        if s.embedded:
            from .simulator.config import SimConfig
            from .simulator.process import start_simulator

            sim_config = SimConfig.from_file(s.sim_config) if s.sim_config else SimConfig()
            sim_config = sim_config.replace(time_scale=s.time_scale, seed=s.seed)
            self.simulator = start_simulator(sim_config)
            base_url, boundary = self.simulator.base_url, "model-engine"
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
                  api_key_env=s.api_key_env, verify_tls=not s.insecure, embedded=s.embedded)
        sut.model, sut.models_listed = check_endpoint(base_url, s.model, headers=sut.headers(),
                                                      verify=sut.verify_tls)
        if self.simulator is not None:
            import httpx

            sut.server_info = httpx.get(sut.root_url + "/admin/config", timeout=10.0).json()
            from .adapters import register_restart

            register_restart(sut.root_url, self.simulator.restart)
        identify_server(sut, s.server_kind)
        self.sut = sut
        return sut

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from .tokenizer import get_tokenizer

            self._tokenizer = get_tokenizer(self.settings.tokenizer)
        return self._tokenizer

    def configure_sut(self, setting: str, value: Any) -> bool:
        assert self.sut is not None
        done = self.config.hook.pytest_llmbench_configure_sut(sut=self.sut, setting=setting, value=value)
        return bool(done)

    # --- procedures ----------------------------------------------------------------------------
    def run(self, proc: Procedure, params: Any) -> ProcedureResult:
        """Run a procedure once per (procedure, parameters) per session; later calls get the cache."""
        key = params_key(proc.id, params)
        if key in self.results:
            return self.results[key]
        return _run_coroutine(self._run_async(proc, params))

    async def _run_async(self, proc: Procedure, params: Any) -> ProcedureResult:
        key = params_key(proc.id, params)
        if key in self.results:
            return self.results[key]
        sut = self.get_sut()
        run_root = self.settings.report / "runs" / f"{proc.id.replace('.', '_')}-{len(self.results):02d}"
        run_root.mkdir(parents=True, exist_ok=True)
        ctx = ProcedureContext(
            sut=sut,
            settings=self.settings,
            tokenizer=self.tokenizer,
            run_root=run_root,
            get_capacity=self.get_capacity,
            configure_sut=self.configure_sut,
            progress=self._progress_line(proc),
            session_workloads=self.workloads_used,
        )
        t0 = time.perf_counter()
        try:
            result = await proc.run(ctx, params)
        except BaseException as exc:  # Ctrl-C (cancellation) or a crash: report what reached the disk
            if not isinstance(exc, SkipProcedure):
                partial = _partial_result(proc, params, run_root, self.settings.profile, exc)
                partial.duration_s = time.perf_counter() - t0
                self.partial[key] = partial
            raise
        result.duration_s = time.perf_counter() - t0
        self.results[key] = result
        return result

    async def get_capacity(self, kind: str) -> Capacity:
        """Capacity by precedence: declared value, else a 5.2/5.5 run in this session (§5.3.3)."""
        if kind in self.capacity:
            return self.capacity[kind]
        if self._declared_capacity is not None and self._declared_capacity[0] == kind:
            value = self._declared_capacity[1]
            cap = (Capacity(rate=value, source="declared (--llm-capacity)") if kind == "rate"
                   else Capacity(concurrency=int(value), source="declared (--llm-capacity)"))
        else:
            proc = get_procedure("5.2" if kind == "rate" else "5.5")
            params = proc.make_params(self.settings.profile, {})
            result = await self._run_async(proc, params)
            if result.capacity is None:
                raise RuntimeError(f"procedure {proc.id} did not determine a capacity")
            cap = result.capacity
            cap.source = cap.source or f"measured by {proc.id} in this session"
        self.capacity[kind] = cap
        return cap

    def _progress_line(self, proc: Procedure) -> Any:
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        verbose = self.config.get_verbosity() >= 0
        isatty = bool(tr is not None and getattr(tr, "isatty", False))
        state = {"last": 0.0}
        interval = 0.25 if isatty else 15.0

        def progress(line: str) -> None:
            now = time.monotonic()
            if tr is None or not verbose or now - state["last"] < interval:
                return
            state["last"] = now
            text = f"[llmbench {proc.id}] {line}"
            if isatty:
                tr.rewrite(text[: tr._tw.fullwidth - 1], erase=True)
            else:
                tr.write_line(text)

        return progress

    # --- hooks of the session plugin -------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        """After the test body: assert the marker's and the command line's SLOs on the result."""
        __tracebackhide__ = True
        outcome = yield
        entry = item.stash.get(ITEM_KEY, None)
        result = getattr(item, "funcargs", {}).get("llm_result")
        if entry is not None and isinstance(result, ProcedureResult):
            slos = list(entry[2]) + list(self.settings.slo)
            if slos and result.metrics is not None:
                from .slo import assert_slo

                assert_slo(result.metrics, *slos, strict=self.settings.strict_sampling)
        return outcome

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Keep each llmbench test's SLO verdict (its pytest outcome) for the reports."""
        self.ran.add(report.nodeid)
        entry = self.test_outcomes.get(report.nodeid)
        if entry is None or (report.when != "call" and report.passed):
            return
        if report.when == "call" or report.failed or report.skipped:
            entry["outcome"] = report.outcome
            entry["when"] = report.when
            entry["message"] = _short_message(report)

    def pytest_keyboard_interrupt(self) -> None:
        self.interrupted = True

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        try:
            for key, partial in self.partial.items():  # what an interrupted/crashed procedure measured
                self.results.setdefault(key, partial)
            if self.results:
                from .report import write_reports

                # selected llmbench tests that never ran (pytest -x, a pytest.exit) make it incomplete
                not_run = [item.nodeid for item in getattr(session, "items", ())
                           if ITEM_KEY in item.stash and item.nodeid not in self.ran]
                # ... and so does a procedure cut short by a crash (its partial result is incomplete)
                crashed = [r.procedure for r in self.results.values() if not r.complete]
                write_reports(self, complete=not self.interrupted and not not_run and not crashed
                              and exitstatus not in (pytest.ExitCode.INTERRUPTED,))
        finally:
            if self.simulator is not None:
                self.simulator.stop()
                self.simulator = None

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.results:
            return
        from .report import terminal_rows

        terminalreporter.section("llmbench")
        for line in terminal_rows(self):
            terminalreporter.write_line(line)


def _partial_result(proc: Procedure, params: Any, run_root: Path, profile: str,
                    exc: BaseException) -> ProcedureResult:
    """A procedure cut short: its measured records read back from disk, marked incomplete.

    Every run directory under ``run_root`` is summarised from its ``records.jsonl`` (measure
    phase only; warm-up and probes never count); the note says why the procedure stopped.
    """
    import dataclasses

    from .metrics import summarize
    from .procedures.base import RunSummary
    from .storage import StorageError, iter_records

    if isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
        why = "interrupted (Ctrl-C) before the procedure finished"
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
        params_json = dataclasses.asdict(params)
    except TypeError:  # pragma: no cover - params are dataclasses
        params_json = {}
    return ProcedureResult(procedure=proc.id, title=proc.title, params=params_json, profile=profile,
                           metrics=runs[0].metrics if runs else None, runs=runs,
                           measurements={"requests": sum(r.load["sent"] for r in runs)},
                           notes=notes, complete=False)


def _short_message(report: pytest.TestReport) -> str:
    if report.passed:
        return ""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    if isinstance(report.longrepr, tuple):  # skipped: (path, lineno, reason)
        return str(report.longrepr[2])
    return str(report.longrepr)[-500:]


def _run_coroutine(coro: Any) -> Any:
    """Run a procedure in a fresh event loop (uvloop when available), off pytest's own loops."""
    try:
        import uvloop

        return uvloop.run(coro)
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux/macOS
        return asyncio.run(coro)


# --- fixtures ----------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def llm_session(pytestconfig: pytest.Config) -> LLMBenchSession:
    """The session state (settings, SUT, result cache)."""
    return pytestconfig.stash[SESSION_KEY]


@pytest.fixture(scope="session")
def llm_settings(llm_session: LLMBenchSession) -> Settings:
    """Effective settings (CLI > environment > ini > default)."""
    return llm_session.settings


@pytest.fixture(scope="session")
def llm_sut(llm_session: LLMBenchSession, pytestconfig: pytest.Config) -> SUT:
    """The system under test: the --llm-endpoint, or the embedded simulator started on loopback."""
    if hasattr(pytestconfig, "workerinput"):
        pytest.fail("pytest-llmbench: load tests cannot run in parallel under pytest-xdist (-n); "
                    "they would measure each other. Run them without -n.", pytrace=False)
    try:
        return llm_session.get_sut()
    except (EndpointError, OSError, RuntimeError) as exc:
        pytest.exit(f"pytest-llmbench: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)


@pytest.fixture
def llm_result(request: pytest.FixtureRequest, llm_session: LLMBenchSession, llm_sut: SUT) -> ProcedureResult:
    """The result of this test's ``@pytest.mark.llm_procedure`` (run once per session and parameters)."""
    entry = request.node.stash.get(ITEM_KEY, None)
    if entry is None:
        pytest.fail(f"llm_result needs @pytest.mark.{MARKER}(...) on the test", pytrace=False)
    proc, params, slos = entry
    llm_session.test_outcomes.setdefault(request.node.nodeid, {}).update(
        result_key=params_key(proc.id, params), procedure=proc.id, slos=list(slos) + list(llm_session.settings.slo))
    from .workloads import WorkloadError

    try:
        result = llm_session.run(proc, params)
    except SkipProcedure as exc:
        pytest.skip(str(exc))
    except WorkloadError as exc:  # a bad workload file or dataset: its message names it
        pytest.fail(f"pytest-llmbench: procedure {proc.id}: workload error: {exc}", pytrace=False)
    for name, value in _junit_properties(result):
        request.node.user_properties.append((name, value))
    return result


def _junit_properties(result: ProcedureResult) -> list[tuple[str, Any]]:
    props: list[tuple[str, Any]] = [("llmbench.procedure", result.procedure)]
    for key, value in result.measurements.items():
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            props.append((f"llmbench.{key}", value))
    verdict = result.measurements.get("compliance_verdict")
    if verdict:
        props.append(("llmbench.compliance", verdict))
    return props


@pytest.fixture(scope="session")
def llm_capacity(llm_session: LLMBenchSession, llm_sut: SUT) -> Capacity:
    """The SUT's capacity (declared, or measured once per session by 5.5 and 5.2)."""
    conc = _run_coroutine(llm_session.get_capacity("concurrency"))
    rate = _run_coroutine(llm_session.get_capacity("rate"))
    return Capacity(rate=rate.rate, concurrency=conc.concurrency, output_throughput=rate.output_throughput,
                    source=f"rate: {rate.source}; concurrency: {conc.source}")


def report_dir(settings: Settings) -> Path:
    return settings.report
