"""pytest-llmbench: the LLM-serving benchmarking methodology (draft-gaikwad-llm-benchmarking-
methodology-00) as pytest tests. See README.md; architecture in shared/DESIGN.md."""

from importlib.metadata import PackageNotFoundError, version

from .procedures.base import LoadSpec, bursty, closed, poisson, uniform

try:
    __version__ = version("pytest-llmbench")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0+unknown"


def assert_slo(result: object, *slos: str, strict: bool = False) -> object:
    """Assert SLOs on a procedure result (or RunMetrics), e.g. ``assert_slo(r, "ttft.p99<=500ms")``.

    Fails the test with value, threshold, sample count and confidence interval (slo.py).
    """
    __tracebackhide__ = True
    from .slo import assert_slo as _assert_slo

    metrics = getattr(result, "metrics", result)
    return _assert_slo(metrics, *slos, strict=strict)


__all__ = ["LoadSpec", "__version__", "assert_slo", "bursty", "closed", "poisson", "uniform"]
