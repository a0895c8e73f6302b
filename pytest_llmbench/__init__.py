"""pytest-llmbench: the LLM-serving benchmarking methodology (draft-gaikwad-llm-benchmarking-
methodology-00) as pytest tests. See README.md; architecture in shared/DESIGN.md."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("pytest-llmbench")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0+unknown"

__all__ = ["__version__"]
