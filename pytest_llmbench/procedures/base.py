"""The procedure registry and what a running procedure may use: :class:`Procedure`, :class:`ProcedureContext`.

A procedure module (``p5_<n>_<name>.py``, found by directory, or a module named by an entry point of
the group ``pytest_llmbench.procedures``: see ``procedures/__init__.py``) defines a parameters
dataclass whose defaults are the draft's values (the ``standard`` profile), profile overrides
(``smoke`` reduces, ``full`` uses the draft's RECOMMENDED values) and a ``pipeline.ProcedureRun``
subclass, which registers itself through :func:`register`; nothing in this module imports a
procedure (no import cycle). Marker values win over the profile, the profile over the dataclass
defaults. The defaults and profiles come from ``data/draft.yaml`` and ``data/profiles.yaml``
(``common.draft``). Anything below a draft minimum is recorded as a compliance check, never silently.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..common.seeds import Seeds
from .result import Capacity, ProcedureResult

if TYPE_CHECKING:  # pragma: no cover
    from ..common.tokenizer import Tokenizer
    from ..settings import Settings
    from ..sut.system import SUT

__all__ = [
    "CannotMeasure",
    "PlanFn",
    "Procedure",
    "ProcedureContext",
    "ProcedureError",
    "RunFn",
    "SkipProcedure",
    "StopRequest",
    "capacity_provider",
    "get_procedure",
    "params_json",
    "params_key",
    "procedure_ids",
    "run_key",
    "register",
]


class ProcedureError(ValueError):
    """Bad procedure id or parameters (reported at collection time)."""


class SkipProcedure(Exception):
    """The procedure cannot run against this SUT (e.g. no configuration hook can switch it).

    ``result``: the procedure's result without runs, whose compliance names the item that could not
    be met and why (README: the compliance table shows it); the session reports it (issue 48)."""

    def __init__(self, message: str, result: Any = None) -> None:
        super().__init__(message)
        self.result = result


class CannotMeasure(RuntimeError):
    """The procedure ran but cannot give the figure it needs (a probe whose requests all failed, or
    outlasted every window tried; a capacity no procedure determined): the message names the cause,
    the figure and the option to change. The plugin fails the test with it, without a traceback."""


@dataclass
class ProcedureContext:
    """What a running procedure may use. Built by the plugin; nothing here imports pytest."""

    sut: SUT
    settings: Settings
    tokenizer: Tokenizer
    run_root: Path  # this procedure's directory under the report directory
    get_capacity: Callable[[str], Awaitable[Capacity]]  # "rate" | "concurrency"
    configure_sut: Callable[[str, Any], bool]  # the SUT configuration hook (hookspecs.py)
    progress: Callable[[str], None] = lambda line: None  # one-line status updates
    declarations: dict[str, Any] = field(default_factory=dict)
    session_workloads: set[str] = field(default_factory=set)  # workloads run so far this session (§4.3.2)
    #: --llm-runs repetition whose prompts must not hit the previous one's prefix cache (0: the
    #: ordinary streams); set only when the SUT could not flush its cache (§6.3)
    repetition: int = 0
    deadline: float | None = None  # time.monotonic() by which the procedure must end (--llm-max-duration)
    #: --llm-stop-when-decided: the SLOs known before the run that its measured run may stop on (issue 47);
    #: None: run to the plan. Only a procedure that declares ``stops_when_decided`` reads it.
    stop: StopRequest | None = None
    budget_cuts: list[str] = field(default_factory=list)  # what the time budget cut short (for the notes)
    adapted: list[str] = field(default_factory=list)  # windows lengthened for a slow SUT (budget.run_lengthening)

    def remaining_s(self) -> float | None:
        """Seconds left of the procedure's time budget (None: no budget)."""
        return None if self.deadline is None else self.deadline - time.monotonic()

    def seeds(self, procedure: str) -> Seeds:
        """The procedure's named seed streams under the session seed (seeds.py, §4.3.3); repetition
        ``k > 0`` of ``--llm-runs`` without a cache flush draws from its own streams
        (``<procedure>/repetition-<k>``), so its prompts share no prefix with earlier repetitions."""
        k = getattr(self, "repetition", 0)  # duck-typed contexts (tests) have no repetition
        return Seeds(self.settings.seed, procedure if k == 0 else f"{procedure}/repetition-{k}")

    def run_dir(self, label: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in label)
        path = self.run_root / safe
        path.mkdir(parents=True, exist_ok=True)
        return path


@dataclass(frozen=True)
class StopRequest:
    """Stop a measured run once every one of ``slos`` (known before it: the marker's and ``--llm-slo``'s)
    is PASS or FAIL (``--llm-stop-when-decided``, procedures/stopping.py): the SLOs, the confidence of
    those that name none (``--llm-slo-confidence``) and ``--llm-strict-sampling``. Part of the run's cache
    key (:func:`run_key`): a run stopped on other SLOs is another run."""

    slos: tuple[str, ...]
    confidence: float = 0.95
    strict: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"slos": list(self.slos), "confidence": self.confidence, "strict": self.strict}


RunFn = Callable[[ProcedureContext, Any], Awaitable[ProcedureResult]]
PlanFn = Callable[[Any], dict[str, Any]]


@dataclass(frozen=True)
class Procedure:
    """A registered procedure: id ("5.1"), title, parameters type, profile overrides, run, plan."""

    id: str
    title: str
    params_type: type
    run: RunFn
    profiles: dict[str, dict[str, Any]]
    plan: PlanFn  # params -> {"requests": int, "min_duration_s": float} for --collect-only / dry run
    #: the capacity its result declares (``ProcedureResult.capacity``) for others to run against
    #: (§5.3.3): "rate" (req/s) or "concurrency"; None: it declares none
    provides_capacity: str | None = None
    #: the measurement keys its results carry (``ProcedureResult.measurements``), and regular
    #: expressions for the families named per level, class or configuration
    measurement_keys: tuple[str, ...] = ()
    measurement_patterns: tuple[str, ...] = ()
    #: the module that defines it (``pytest_llmbench.procedures.p5_1_ttft``, or another distribution's)
    module: str = ""
    #: its measured run may stop once its SLOs are settled (``ProcedureContext.stop``, issue 47): a single-run
    #: procedure; searches and sweeps run to their plan
    stops_when_decided: bool = False

    def undeclared(self, keys: Iterable[str]) -> list[str]:
        """The keys of ``keys`` this procedure does not declare (neither a name nor a pattern match)."""
        names = set(self.measurement_keys)
        return [k for k in keys if k not in names and not any(re.fullmatch(p, k) for p in self.measurement_patterns)]

    def param_names(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self.params_type)]

    def make_params(self, profile: str, overrides: dict[str, Any]) -> Any:
        """Dataclass defaults < profile < marker overrides; unknown names raise ProcedureError."""
        names = set(self.param_names())
        unknown = sorted(set(overrides) - names)
        if unknown:
            raise ProcedureError(
                f"procedure {self.id} ({self.title}) has no parameter(s) {', '.join(unknown)}; "
                f"known: {', '.join(sorted(names))}"
            )
        values = dict(self.profiles.get(profile, {}))
        values.update(overrides)
        try:
            params = self.params_type(**values)
        except (TypeError, ValueError) as exc:
            raise ProcedureError(f"procedure {self.id}: invalid parameters: {exc}") from None
        validate = getattr(params, "validate", None)
        if callable(validate):
            try:
                validate()
            except ValueError as exc:
                raise ProcedureError(f"procedure {self.id}: invalid parameters: {exc}") from None
        return params


_REGISTRY: dict[str, Procedure] = {}


def register(procedure: Procedure) -> Procedure:
    _REGISTRY[procedure.id] = procedure
    return procedure


def procedure_ids() -> list[str]:
    """Registered procedure ids in draft order (the package ``__init__`` imports every procedure)."""
    return sorted(_REGISTRY, key=lambda s: tuple(int(x) for x in s.split(".")))


def capacity_provider(kind: str) -> Procedure:
    """The registered procedure that declares it provides capacity ``kind`` ("rate" | "concurrency")."""
    for pid in procedure_ids():
        if _REGISTRY[pid].provides_capacity == kind:
            return _REGISTRY[pid]
    raise ProcedureError(f"no registered procedure provides a {kind!r} capacity")


def get_procedure(proc_id: str) -> Procedure:
    key = str(proc_id).strip()
    if key not in _REGISTRY:
        raise ProcedureError(
            f"unknown procedure {proc_id!r}; known: {', '.join(procedure_ids())}"
        )
    return _REGISTRY[key]


def params_json(params: Any) -> dict[str, Any]:
    """A procedure's parameters as JSON (``to_json`` values expanded, tuples as lists)."""
    def plain(v: Any) -> Any:
        return v.to_json() if hasattr(v, "to_json") else (list(v) if isinstance(v, tuple) else v)

    return {f.name: plain(getattr(params, f.name)) for f in dataclasses.fields(params)}


def params_key(proc_id: str, params: Any) -> str:
    """A stable cache key for (procedure, parameters): one run per key per session."""
    data = dataclasses.asdict(params) if dataclasses.is_dataclass(params) else dict(params)
    return proc_id + ":" + json.dumps(data, sort_keys=True, default=str)


def run_key(proc_id: str, params: Any, stop: StopRequest | None = None) -> str:
    """The session's key of a run: :func:`params_key`, and the SLOs it stops on when it stops when decided
    (two tests with the same parameters but other SLOs do not share a stopped run)."""
    key = params_key(proc_id, params)
    return key if stop is None else key + " stop-when-decided:" + json.dumps(stop.to_json(), sort_keys=True)
