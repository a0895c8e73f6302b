"""Where a session's time goes: ``pytest_llmbench.timing`` log lines, ``<what>: <seconds> s`` at INFO
(issue 46), which ``bench/memory.py`` reads from pytest's ``--log-file``. Nothing is printed unless a log
handler takes INFO records of that logger (``--log-file-level INFO``, ``--log-level INFO``)."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

__all__ = ["LOGGER", "timed"]

LOGGER = logging.getLogger("pytest_llmbench.timing")


@contextlib.contextmanager
def timed(what: str) -> Iterator[None]:
    """Log the block's wall time as ``<what>: <seconds> s`` (also when it raises)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        LOGGER.info("%s: %.3f s", what, time.perf_counter() - t0)
