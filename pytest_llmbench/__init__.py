"""pytest-llmbench: the LLM-serving benchmarking methodology (draft-gaikwad-llm-benchmarking-
methodology-00) as pytest tests. See README.md; the layers in docs/architecture.md.

The public names load on first use (module ``__getattr__``), so ``import pytest_llmbench.report``
or ``python -m pytest_llmbench report`` loads the renderer, not the load generator.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .procedures.loads import LoadSpec, bursty, closed, poisson, shaped, uniform

#: public name -> module that defines it
_LAZY = {name: "pytest_llmbench.procedures.loads" for name in ("LoadSpec", "bursty", "closed", "poisson", "shaped",
                                                                     "uniform")}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("pytest-llmbench")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
            value = "0.0.0+unknown"
    elif name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'pytest_llmbench' has no attribute {name!r}")
    globals()[name] = value
    return value


def assert_slo(result: object, *slos: str, strict: bool = False, confidence: float | None = None) -> object:
    """Assert SLOs on a procedure result (or RunMetrics), e.g. ``assert_slo(r, "ttft.p99<=500ms")``.

    Each SLO is PASS, FAIL or INCONCLUSIVE at its confidence (``confidence=`` here for the SLOs that name
    none, ``ttft.p99 <= 500ms confidence=99%`` for one): a FAIL raises ``SLOViolation``, an INCONCLUSIVE
    (and no FAIL) ``SLOInconclusive``, with value, threshold, bound, sample count and "need N more"
    (``measure/slo.py``). On a procedure result an SLO may also name a procedure figure (``max_concurrency >= 8``), and a
    verdict within the client's measurement error of the threshold says so. Inside a pytest-llmbench
    test the SLOs and their results are recorded on the test (the report, JUnit, the gate).
    """
    __tracebackhide__ = True
    from .measure.slo import assert_slo as _assert_slo

    view = getattr(result, "slo_metrics", None)
    if callable(view):  # a ProcedureResult
        return _assert_slo(view(), *slos, strict=strict, client_error=getattr(result, "slo_client_error", None),
                           confidence=confidence)
    metrics = getattr(result, "metrics", result)
    return _assert_slo(metrics, *slos, strict=strict, confidence=confidence)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = ["LoadSpec", "__version__", "assert_slo", "bursty", "closed", "poisson", "shaped", "uniform"]
