"""pytest glue only: options, markers, fixtures and hooks (docs/architecture.md).

The session itself (SUT, result cache, capacity hand-off, recovery) is a pytest-free
:class:`~.session.Session`; this module builds it from the options, hands it a progress reporter
and the ``pytest_llmbench_configure_sut`` hook as callables, records each test's outcome, writes
the reports from the :class:`~.session.SessionResult`, and turns library errors into pytest
outcomes (``UsageError``, skip, fail, exit).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from . import hookspecs
from .common.timing import LOGGER, timed
from .options import add_options, settings_from_config
from .procedures.base import (
    CannotMeasure,
    Procedure,
    ProcedureError,
    SkipProcedure,
    StopRequest,
    get_procedure,
    run_key,
)
from .procedures.result import Capacity, ProcedureResult
from .session import Session, SessionResult, configure_embedded, resummarize_run
from .settings import LLMBenchConfigError, Settings, parse_capacity
from .sut import adapters
from .sut.system import SUT, EndpointError

if TYPE_CHECKING:
    from .workloads.trace import Trace

MARKER = "llm_procedure"
SESSION_KEY = pytest.StashKey["LLMBenchPlugin"]()
ITEM_KEY = pytest.StashKey[tuple[Procedure, Any, list[str]]]()
#: the SLOs a test's run stops on (--llm-stop-when-decided / marker stop_when_decided=True), None: to its plan
STOP_KEY = pytest.StashKey["StopRequest | None"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(id, slo=None, stop_when_decided=None, **params): run draft procedure `id` (\"5.1\" ... "
        "\"5.10\") with the given parameters; `slo` is a list of SLO expressions asserted on the result, e.g. "
        "['ttft.p99<=500ms']; `stop_when_decided=True` ends a 5.1 run once they are settled",
    )
    config.addinivalue_line("markers", "llmbench: added by pytest-llmbench to every llm_procedure test")
    settings = settings_from_config(config)
    from .measure.slo import set_default_confidence

    previous = set_default_confidence(settings.slo_confidence)  # --llm-slo-confidence, for this session
    config.add_cleanup(lambda: set_default_confidence(previous))
    try:
        bench = Session(settings, configure_sut=_hook_configure(config), progress=_progress_factory(config))
    except LLMBenchConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    from .compliance import DeclarationError, Declarations

    try:  # types, placeholders and unknown keys: a wrong declaration costs no measurement (issue 46)
        Declarations.load(settings.declarations, rootdir=settings.rootdir)
    except DeclarationError as exc:
        raise pytest.UsageError(str(exc)) from None
    if settings.trace is not None:  # every line read now: a bad one costs no request (issue 50)
        bench.traces[str(settings.trace)] = _check_trace(str(settings.trace), settings,
                                                         settings.sources.get("trace", "--llm-trace"))
    from .gate import GateStorageError, RuleError
    from .gate.sessiongate import SessionGate

    try:  # the gate itself never summarises records, nor fingerprints the machine: the hooks do
        gate = SessionGate(settings, resummarize=resummarize_run, machine_info=_machine_info(config))
    except (RuleError, GateStorageError) as exc:
        raise pytest.UsageError(str(exc)) from None
    if settings.dataset or settings.dataset_version:
        bench.datasets = _session_datasets(config, settings)
    plugin = LLMBenchPlugin(config, bench, gate)
    config.stash[SESSION_KEY] = plugin
    config.pluginmanager.register(plugin, "llmbench-session")
    bench.signals.install()  # SIGTERM/SIGHUP like Ctrl-C: reports marked INCOMPLETE, exit non-zero
    config.add_cleanup(bench.signals.restore)


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
    bench: LLMBenchPlugin = config.stash[SESSION_KEY]
    selected = []
    unable: set[str] = set()  # procedures that ignore --llm-stop-when-decided, said once each
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
        asked = kwargs.pop("stop_when_decided", None)
        try:
            proc = get_procedure(str(marker.args[0]))
            _check_param_types(proc, kwargs)
            params = proc.make_params(bench.settings.profile, kwargs)
            _validate_slos(slos, f"{item.nodeid}: marker slo")
            _validate_workload(proc, params)
            if getattr(params, "trace", None):  # a marker's trace (5.1): read now, as --llm-trace's
                bench.session.traces[str(params.trace)] = _check_trace(
                    str(params.trace), bench.settings, f"{item.nodeid}: @{MARKER}(trace=...)")
        except ProcedureError as exc:
            raise pytest.UsageError(f"{item.nodeid}: {exc}") from None
        except TypeError as exc:  # a value of the wrong type that a validate() compared
            raise pytest.UsageError(f"{item.nodeid}: @{MARKER}({marker.args[0]!r}): invalid parameter value: {exc}"
                                    ) from None
        item.stash[ITEM_KEY] = (proc, params, list(slos))
        item.stash[STOP_KEY] = _stop_request(item, proc, list(slos), asked, bench.settings, unable)
        item.add_marker(pytest.mark.llmbench)
        selected.append(item)
    if selected and not (bench.settings.dry_run or config.option.collectonly):
        from .common.tokenizer import TokenizerError

        try:  # a bad --llm-tokenizer is one message now, not an error inside every procedure
            _ = bench.session.tokenizer
        except TokenizerError as exc:
            source = bench.settings.sources.get("tokenizer", "--llm-tokenizer")
            raise pytest.UsageError(f"{source}: {exc}") from None
    if selected and (bench.settings.dry_run or config.option.collectonly):
        bench.print_plan(selected)
        if bench.settings.dry_run:
            config.hook.pytest_deselected(items=list(items))
            items[:] = []


def _stop_request(item: pytest.Item, proc: Procedure, slos: list[str], asked: Any, settings: Settings,
                  unable: set[str]) -> StopRequest | None:
    """The SLOs a test's run stops on once they are settled: marker ``stop_when_decided`` (else
    ``--llm-stop-when-decided``), for a procedure that can (5.1) and SLOs known before the run (the marker's
    and ``--llm-slo``'s); a search or sweep ignores it and says so (a warning)."""
    if asked is not None and not isinstance(asked, bool):
        raise pytest.UsageError(f"{item.nodeid}: @{MARKER}(stop_when_decided={asked!r}) must be True or False")
    if not (settings.stop_when_decided if asked is None else asked):
        return None
    if not proc.stops_when_decided:
        if asked or proc.id not in unable:
            unable.add(proc.id)
            item.warn(pytest.PytestWarning(f"procedure {proc.id} ({proc.title}) has no single measured run to stop: "
                                           "it ignores stop_when_decided and runs to its plan"))
        return None
    texts = tuple(s.strip() for s in [*slos, *settings.slo])
    if not texts:
        return None  # nothing known before the run to decide: to the plan (SLOs in the body come after it)
    return StopRequest(texts, confidence=settings.slo_confidence, strict=settings.strict_sampling)


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
    """A marker's workload, checked at collection so that a bad one costs no request (§4.3.1, issue 46):
    a registered name (with its ``dataset`` file read now, when ``workload_params`` names one), a custom
    spec file read and validated, or a request file (``.jsonl``, replayed) read line by line."""
    name = getattr(params, "workload", None)
    if not isinstance(name, str):
        return
    from .workloads import WORKLOADS, WorkloadError, check_dataset, check_requests, load_spec, validate_spec

    suffix = Path(name).suffix.lower()
    dataset = (getattr(params, "workload_params", None) or {}).get("dataset")
    try:
        if suffix == ".jsonl":  # a request file (replayed): every line read now, none kept
            check_requests(name)
            return
        if name in WORKLOADS:
            if dataset is not None:  # the workload's dataset file, read now (§4.3, App. A.3, A.4)
                check_dataset(name, dataset)
            return
    except WorkloadError as exc:
        raise ProcedureError(f"procedure {proc.id}: {exc}") from None  # the message names the file
    if suffix not in (".toml", ".yaml", ".yml", ".json"):
        raise ProcedureError(f"procedure {proc.id}: unknown workload {name!r}: use one of {', '.join(WORKLOADS)}, "
                             "a spec file (.toml, .yaml, .yml, .json) or a request file (.jsonl)")
    try:
        validate_spec(load_spec(name), source=name)
    except WorkloadError as exc:
        raise ProcedureError(f"procedure {proc.id}: {exc}") from None  # the message names the file


def _check_trace(path: str, settings: Settings, where: str) -> Trace:
    """A trace read and checked whole before any request (workloads/trace.py): a usage error names the file,
    the line and the field. The session keeps it for the procedure that replays it (read once)."""
    from .workloads.trace import TraceError, read_trace

    try:
        return read_trace(path, fmt=settings.trace_format, block_size=settings.trace_block_size,
                          speedup=settings.trace_speedup, limit=settings.trace_limit)
    except TraceError as exc:
        raise pytest.UsageError(f"{where}: {exc}") from None


def _session_datasets(config: pytest.Config, settings: Settings) -> dict[str, Any]:
    """``--llm-dataset`` / ini ``llm_dataset`` entries, every file read now (App. A.3, A.4): a bad entry or
    file is a usage error naming the option (the ini entry) and the file's line, before any request. A
    relative path in the ini file is taken from the ini file's directory."""
    from .workloads import WorkloadError, parse_dataset_options

    def entries(attr: str, flag: str) -> tuple[list[tuple[str, str]], Path | None]:
        src = settings.sources.get(attr, flag)
        lines = getattr(settings, attr)
        if src.startswith("ini "):
            base = config.inipath.parent if config.inipath else config.rootpath
            return [(x, f"{src} (entry {k}: {x})") for k, x in enumerate(lines, 1)], base
        return [(x, src) for x in lines], None

    files, base = entries("dataset", "--llm-dataset")
    versions, _ = entries("dataset_version", "--llm-dataset-version")
    try:
        return parse_dataset_options(files, versions, base=base)
    except WorkloadError as exc:
        raise pytest.UsageError(f"pytest-llmbench: {exc}") from None


def _validate_slos(slos: list[str], where: str) -> None:
    from .measure.slo import SLOError, parse_slo

    for text in slos:
        try:
            parse_slo(text)
        except SLOError as exc:
            raise ProcedureError(f"{where}: {exc}") from None


@pytest.hookimpl(trylast=True)
def pytest_llmbench_configure_sut(sut: SUT, setting: str, value: Any) -> bool | None:
    """Default implementation: the server adapters' switches (llama.cpp ``prefix_cache`` and
    ``flush_prefix_cache``, ``restart`` of a server this process started), else the embedded
    simulator's admin endpoint."""
    made = adapters.configure(sut, setting, value)
    return made if made is not None else configure_embedded(sut, setting, value)


@pytest.hookimpl(tryfirst=True)
def pytest_llmbench_update_document(document: dict[str, Any]) -> None:
    """The plugin's first update of the document: its headline (document.headline.annotate)."""
    from .document.headline import annotate, item_titles

    annotate(document, item_titles())


@pytest.hookimpl(trylast=True)
def pytest_llmbench_generate_machine_info() -> dict[str, Any]:
    """The plugin's machine fingerprint (gate.storage.machine_fingerprint)."""
    from .gate.storage import machine_fingerprint

    return machine_fingerprint()


def _machine_info(config: pytest.Config) -> Callable[[], dict[str, Any]]:
    """The machine fingerprint through the generate/update_machine_info hooks, for the gate."""

    def machine_info() -> dict[str, Any]:
        info: dict[str, Any] = config.hook.pytest_llmbench_generate_machine_info(config=config)
        config.hook.pytest_llmbench_update_machine_info(config=config, machine_info=info)
        return info

    return machine_info


def write_document(hook: Any, config: pytest.Config | None, result: SessionResult) -> dict[str, Any]:
    """The one writer of the results document (pytest-benchmark's ``generate_json``/``update_json``): the
    generate hook builds it, every update hook changes it in their declared order (hookspecs.py), then it is
    finished (keys in order, secrets scrubbed, plain JSON: ``document.build.finish_document``)."""
    from .document.build import finish_document
    from .document.redact import secret_values

    doc: dict[str, Any] = hook.pytest_llmbench_generate_document(config=config, result=result)
    hook.pytest_llmbench_update_document(config=config, result=result, document=doc)
    return finish_document(doc, secret_values(result))


def gate_document(hook: Any, config: pytest.Config | None, result: SessionResult) -> dict[str, Any]:
    """The document a test is compared on under ``--llm-compare``: generated (each procedure's entry built
    once per session), secrets scrubbed; the update hooks are for the document written at the end."""
    from .document.redact import scrub, secret_values

    doc: dict[str, Any] = scrub(hook.pytest_llmbench_generate_document(config=config, result=result),
                                secret_values(result))
    return doc


def _hook_configure(config: pytest.Config) -> Callable[[SUT, str, Any], bool]:
    def configure(sut: SUT, setting: str, value: Any) -> bool:
        return bool(config.hook.pytest_llmbench_configure_sut(sut=sut, setting=setting, value=value))

    return configure


def _progress_factory(config: pytest.Config) -> Callable[[str], Callable[[str], None]]:
    """Progress lines on the terminal: rewritten in place on a tty (at most one a second), every 10 s
    otherwise (a CI log); a new phase (warm-up, a run, a level, a run's final count) is shown at once.

    Shown with ``-q`` too (a quiet CI job must not look hung); ``-qq`` silences them."""

    def for_procedure(proc_id: str) -> Callable[[str], None]:
        tr = config.pluginmanager.get_plugin("terminalreporter")
        verbose = config.get_verbosity() >= -1
        isatty = bool(tr is not None and getattr(tr, "isatty", False))
        state: dict[str, Any] = {"last": 0.0, "phase": None}
        interval = 1.0 if isatty else 10.0

        def progress(line: str) -> None:
            now = time.monotonic()
            phase = line.split(":", 1)[0]  # a new phase (warm-up, a run, a level) is shown at once
            if tr is None or not verbose or (now - state["last"] < interval and phase == state["phase"]):
                return
            state["last"], state["phase"] = now, phase
            text = f"[llmbench {proc_id}] {line}"
            # procedures run inside fixture set-up, where pytest captures fd 1: write past the capture
            capman = config.pluginmanager.get_plugin("capturemanager")
            with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
                if isatty:
                    tr.rewrite(text[: tr._tw.fullwidth - 1], erase=True)
                else:
                    tr.write_line(text)

        return progress

    return for_procedure


class LLMBenchPlugin:
    """The session's pytest side: the :class:`Session`, each test's outcome, the reports at the end."""

    def __init__(self, config: pytest.Config, session: Session, gate: Any = None) -> None:
        self.config = config
        self.session = session
        self.gate = gate  # gate.sessiongate.SessionGate: --llm-compare / --llm-save (§6)
        self.settings: Settings = session.settings
        self.test_outcomes: dict[str, dict[str, Any]] = {}
        self.interrupted = False
        self.ran: set[str] = set()  # nodeids that reported, to tell a -x stop from a complete session
        self.document: dict[str, Any] | None = None
        self.report_path: Path | None = None
        self.saved: Any = None  # gate.StoredRun when --llm-save/--llm-autosave stored the session
        self._entries: Any = None  # document.procedure.EntryCache: each procedure's entry built once
        self._finish_rest: float | None = None  # perf_counter() when this plugin's session finish ended

    @pytest.hookimpl(trylast=True)
    def pytest_llmbench_generate_document(self, result: SessionResult) -> dict[str, Any]:
        """The plugin's document: document.build.generate_document, with this session's entry cache."""
        from .document.build import generate_document
        from .document.procedure import EntryCache

        if self._entries is None:
            self._entries = EntryCache()
        return generate_document(result, self._entries)

    @pytest.hookimpl(trylast=True)
    def pytest_llmbench_update_document(self, document: dict[str, Any]) -> None:
        """The plugin's last update of the document: the comparison with the baseline (--llm-compare, §6)."""
        if self.gate is not None and self.gate.comparing:
            document["comparison"] = self.gate.comparison(document)

    def print_plan(self, items: list[pytest.Item]) -> None:
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        write = (lambda s: tr.write_line(s)) if tr is not None else print
        budget = self.settings.max_duration or None
        rate = None
        if self.settings.capacity:
            kind, value = parse_capacity(self.settings.capacity, "capacity")
            rate = value if kind == "rate" else None
        write(f"llmbench plan (profile {self.settings.profile}"
              + (f", time budget {budget:g} s per procedure" if budget else "")
              + (f", declared capacity {rate:g} req/s" if rate else "") + "):")
        from .workloads.trace import using_traces

        for item in items:
            proc, params, _ = item.stash[ITEM_KEY]
            with using_traces(self.session.traces, self.settings.trace):  # read before: not read again
                plan = proc.plan(params)
            requests, minimum = plan.get("requests"), float(plan.get("min_duration_s", 0))
            # with a known capacity, the requests take at least requests / capacity seconds
            est = max(minimum, requests / rate) if rate and isinstance(requests, int) else minimum
            planned = min(est, budget) if budget else est
            cut = " (cut by the time budget)" if budget and est > budget else ""
            write(f"  {item.nodeid}: {proc.id} {proc.title}: ~{requests if requests is not None else '?'} requests, "
                  f"planned >= {planned:.0f} s{cut}")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        """Around the test body: record the SLOs it asserts with ``assert_slo`` on the test. After it:
        assert the marker's and the command line's SLOs on the result (recorded the same way), and
        compare it with the baseline (--llm-compare, §6): a violated fail rule fails the test. An
        INCONCLUSIVE SLO (and no FAIL) gives the outcome ``--llm-inconclusive`` names: failed, passed with
        a warning (``SLOInconclusiveWarning``) or skipped with the reason."""
        __tracebackhide__ = True
        entry = item.stash.get(ITEM_KEY, None)
        if entry is None:
            return (yield)
        from .measure.slo import SLOInconclusive, evaluate, inconclusive_policy, raise_for_results, recording

        policy = self.settings.inconclusive
        with recording(self._slo_recorder(item, lambda i: "body")), inconclusive_policy(policy):
            try:
                outcome = yield
            except SLOInconclusive as exc:  # an assert_slo in the body (fail or skip: pass does not raise)
                self._inconclusive(item, exc, policy)
                raise
        result = getattr(item, "funcargs", {}).get("llm_result")
        if not isinstance(result, ProcedureResult):
            return outcome
        marker, option = list(entry[2]), list(self.settings.slo)
        slo_error: AssertionError | None = None
        open_: SLOInconclusive | None = None
        if marker or option:
            origin = (lambda i: "marker" if i < len(marker) else "--llm-slo")
            looks = {text: n for text, (_, n) in result.slo_verdicts.items()}
            try:
                with recording(self._slo_recorder(item, origin, looks)), inconclusive_policy(policy):
                    raise_for_results([result.slo_verdicts[t.strip()][0] if t.strip() in result.slo_verdicts else
                                       evaluate(t, result.slo_metrics(), strict=self.settings.strict_sampling,
                                                client_error=result.slo_client_error)
                                       for t in (*marker, *option)])
            except SLOInconclusive as exc:
                open_ = exc
            except AssertionError as exc:
                slo_error = exc
        failures = self._compare_test(item)
        if slo_error is not None or (open_ is not None and failures):
            bad = slo_error if slo_error is not None else open_
            if not failures:
                raise bad
            failures.append(str(bad))
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)
        if open_ is not None:
            self._inconclusive(item, open_, policy)
            raise open_
        return outcome

    def _inconclusive(self, item: pytest.Item, exc: AssertionError, policy: str) -> None:
        """An INCONCLUSIVE SLO decides the test's outcome (``--llm-inconclusive``): noted for the reports
        (verdict INCONCLUSIVE); under ``skip`` the test is skipped with the reason."""
        self.test_outcomes.setdefault(item.nodeid, {})["inconclusive"] = policy
        if policy == "skip":
            pytest.skip(f"SLO inconclusive (--llm-inconclusive skip): {exc}")

    def _slo_recorder(self, item: pytest.Item, origin: Callable[[int], str],
                      looks: dict[str, int] | None = None) -> Callable[[Any], None]:
        """Keeps the results of one ``assert_slo`` call on the test (``slo_results``) and in its JUnit
        properties (``llmbench.slo.<expr>``); ``origin(i)`` names where the i-th SLO was written, ``looks``
        the requests a run stopped when decided judged an SLO on."""

        def record(results: Any) -> None:
            kept = self.test_outcomes.setdefault(item.nodeid, {}).setdefault("slo_results", [])
            for i, r in enumerate(results):
                k = len(kept)  # the SLO's number on this test (JUnit: llmbench.slo.<k>.*)
                look = (looks or {}).get(r.slo.text)
                kept.append({**r.to_json(), "origin": origin(i), **({"look": look} if look is not None else {})})
                item.user_properties.extend(_slo_properties(k, r))

        return record

    def _compare_test(self, item: pytest.Item) -> list[str]:
        """The gate's failure messages for this test (and its JUnit properties), [] when not comparing."""
        if self.gate is None or not self.gate.comparing:
            return []
        doc = gate_document(self.config.hook, self.config,
                            self.session.result(complete=False, test_outcomes=self.test_outcomes))
        verdict = self.gate.check_test(doc, item.nodeid)
        if verdict.comparison is not None:
            from .report.comparison import junit_properties

            item.user_properties.extend(junit_properties(verdict.comparison.to_json(), item.nodeid))
        return verdict.failures

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
            if self.session.results or self.session.partial:
                from .document.exports import write_exports
                from .report import write_reports

                # selected llmbench tests that never ran (pytest -x, a pytest.exit) make it incomplete
                not_run = [item.nodeid for item in getattr(session, "items", ())
                           if ITEM_KEY in item.stash and item.nodeid not in self.ran]
                interrupted = self.interrupted or exitstatus == pytest.ExitCode.INTERRUPTED
                result = self.session.result(complete=not not_run, interrupted=interrupted,
                                             test_outcomes=self.test_outcomes,
                                             command_line=list(self.config.invocation_params.args))
                with timed("document"):
                    self.document = write_document(self.config.hook, self.config, result)
                self.report_path = write_reports(self.document)["html"]  # each report timed inside
                write_exports(self.document, self.report_path.parent)  # levels.csv, requests.csv, each timed
                if self.gate is not None and self.gate.saving:
                    with timed("gate: store the session"):
                        self.saved = self.gate.save()
        finally:
            self.session.close()
            # the plugins whose session finish runs after this one's (pytest's JUnit XML writer among them)
            self._finish_rest = time.perf_counter()

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self._finish_rest is not None:
            LOGGER.info("junit xml and the other plugins' session finish: %.3f s", time.perf_counter() - self._finish_rest)
            self._finish_rest = None
        if self.document is None:
            return
        with timed("terminal summary"):
            self._terminal_summary(terminalreporter)

    def _terminal_summary(self, terminalreporter: Any) -> None:
        from .report import terminal_rows

        terminalreporter.section("llmbench")
        for line in terminal_rows(self.document, self.report_path):
            terminalreporter.write_line(line)
        if self.gate is not None and self.gate.last is not None:
            from .report.comparison import render_comparison, section6_lines

            terminalreporter.section("llmbench: compared with baseline")
            for line in render_comparison(self.gate.last.to_json()).splitlines():
                terminalreporter.write_line(line)
            for line in section6_lines(self.gate.section6.to_json()) if self.gate.section6 is not None else ():
                terminalreporter.write_line(line)  # the §2 verdict of the comparison (test "6")
        if self.saved is not None:
            terminalreporter.write_line(f"llmbench: stored as {self.saved.path.as_posix()} "
                                        "(compare with --llm-compare " + (self.saved.name or str(self.saved.number)) + ")")
        if self.gate is not None:  # runs summarised again from records (a report directory of an older version)
            for note in self.gate.notes():
                terminalreporter.write_line(f"llmbench: note: {note}")


def _slo_properties(k: int, r: Any) -> list[tuple[str, Any]]:
    """JUnit properties of the ``k``-th SLO judged on a test: ``llmbench.slo.<expr>`` (verdict and message),
    and ``llmbench.slo.<k>.text``/``.verdict``/``.method``/``.bound``/``.limit``/``.n``/``.exceedances``
    (and ``.needed_more`` for INCONCLUSIVE) for a CI that reads them one by one."""
    text = r.slo.text or str(r.slo)
    props: list[tuple[str, Any]] = [(f"llmbench.slo.{text}", f"{r.verdict}: {r.message}"),
                                    (f"llmbench.slo.{k}.text", text), (f"llmbench.slo.{k}.verdict", str(r.verdict)),
                                    (f"llmbench.slo.{k}.method", r.method)]
    for name in ("bound", "limit", "n", "exceedances", "needed_more"):
        value = getattr(r, name)
        if value is not None:
            props.append((f"llmbench.slo.{k}.{name}", f"{value:.6g}" if isinstance(value, float) else value))
    return props


def _short_message(report: pytest.TestReport) -> str:
    if report.passed:
        return ""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    if isinstance(report.longrepr, tuple):  # skipped: (path, lineno, reason)
        return str(report.longrepr[2])
    return str(report.longrepr)[-500:]


# --- fixtures ----------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def llm_session(pytestconfig: pytest.Config) -> Session:
    """The session (settings, SUT, result cache, capacity): a pytest-free :class:`Session`."""
    return pytestconfig.stash[SESSION_KEY].session


@pytest.fixture(scope="session")
def llm_settings(llm_session: Session) -> Settings:
    """Effective settings (CLI > environment > ini > default)."""
    return llm_session.settings


@pytest.fixture(scope="session")
def llm_sut(llm_session: Session, pytestconfig: pytest.Config) -> SUT:
    """The system under test: the --llm-endpoint, or the embedded simulator started on loopback."""
    if hasattr(pytestconfig, "workerinput"):
        pytest.fail("pytest-llmbench: load tests cannot run in parallel under pytest-xdist (-n); "
                    "they would measure each other. Run them without -n.", pytrace=False)
    try:
        return llm_session.get_sut()
    except (EndpointError, OSError, RuntimeError) as exc:
        pytest.exit(f"pytest-llmbench: {exc}", returncode=pytest.ExitCode.USAGE_ERROR)


@pytest.fixture
def llm_result(request: pytest.FixtureRequest, llm_session: Session, llm_sut: SUT) -> ProcedureResult:
    """The result of this test's ``@pytest.mark.llm_procedure`` (run once per session and parameters)."""
    entry = request.node.stash.get(ITEM_KEY, None)
    if entry is None:
        pytest.fail(f"llm_result needs @pytest.mark.{MARKER}(...) on the test", pytrace=False)
    proc, params, slos = entry
    stop = request.node.stash.get(STOP_KEY, None)
    plugin: LLMBenchPlugin = request.config.stash[SESSION_KEY]
    plugin.test_outcomes.setdefault(request.node.nodeid, {}).update(
        result_key=run_key(proc.id, params, stop), procedure=proc.id,
        slos=list(slos) + list(llm_session.settings.slo))
    from .workloads import WorkloadError

    cannot: CannotMeasure | None = None
    try:
        result = llm_session.run(proc, params, stop)
    except SkipProcedure as exc:
        pytest.skip(str(exc))
    except WorkloadError as exc:  # a bad workload file or dataset: its message names it
        pytest.fail(f"pytest-llmbench: procedure {proc.id}: workload error: {exc}", pytrace=False)
    except CannotMeasure as exc:  # its message names the cause, the figure and the option to change
        cannot = exc
    if cannot is not None:  # failed outside the except block: no "during handling" chain in the output
        pytest.fail(f"pytest-llmbench: procedure {proc.id} cannot measure: {cannot}", pytrace=False)
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
def llm_capacity(llm_session: Session, llm_sut: SUT) -> Capacity:
    """The SUT's capacity (declared, or measured once per session by 5.5 and 5.2)."""
    return llm_session.combined_capacity()
