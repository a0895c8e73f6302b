"""The embedded SUT: an OpenAI-compatible server over a continuous-batching engine model.

See docs/simulator.md. Main entry points:

* :class:`SimConfig` — every parameter, plus analytic predictions (``predicted_ttft_s`` …).
* :func:`start_simulator` — run it in a subprocess; :class:`SimulatorProcess` has the URLs.
* :class:`Engine` / :func:`run_virtual` — the pure engine model on a virtual clock.
* :meth:`SimulatorProcess.metrics` — its ``/metrics`` as ``{series: value}`` (measure/telemetry.py).
"""

from .config import GUARDRAIL_MODES, RUNTIME_FIELDS, SimConfig, SimConfigError
from .engine import Engine, Sequence, run_virtual
from .process import SimulatorError, SimulatorProcess, start_simulator

__all__ = [
    "GUARDRAIL_MODES",
    "RUNTIME_FIELDS",
    "Engine",
    "Sequence",
    "SimConfig",
    "SimConfigError",
    "SimulatorError",
    "SimulatorProcess",
    "create_app",
    "run_virtual",
    "start_simulator",
]


def create_app(config: SimConfig | None = None):  # type: ignore[no-untyped-def]
    """The ASGI application (imported lazily: it pulls in the tokenizer)."""
    from .app import create_app as _create

    return _create(config)
