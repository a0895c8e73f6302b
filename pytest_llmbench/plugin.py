"""pytest glue only: options, ini keys, markers, fixtures and report hooks (shared/DESIGN.md)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("llmbench", "LLM serving benchmarks (draft-gaikwad-llm-benchmarking-methodology)")
    group.addoption("--llm-endpoint", default=None, help="OpenAI-compatible base URL, e.g. http://host:8000/v1 "
                    "(default: start the embedded simulator on 127.0.0.1)")
    parser.addini("llm_endpoint", "OpenAI-compatible base URL (see --llm-endpoint)", default="")
