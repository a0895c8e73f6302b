"""Where a session's time and memory go: ``pytest_llmbench.timing`` log lines at INFO (issue 46),
``<what>: <seconds> s; max RSS <MB> MB`` (the process's peak resident set when the block ended: the block
that raised it is the first whose figure jumps), which ``bench/memory.py`` reads from pytest's ``--log-file``. Nothing is printed unless a log
handler takes INFO records of that logger (``--log-file-level INFO``, ``--log-level INFO``)."""

from __future__ import annotations

import contextlib
import logging
import resource
import sys
import time
from collections.abc import Iterator

__all__ = ["LOGGER", "max_rss_mb", "timed"]

LOGGER = logging.getLogger("pytest_llmbench.timing")


@contextlib.contextmanager
def timed(what: str) -> Iterator[None]:
    """Log the block's wall time and the peak RSS so far (also when it raises)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        if LOGGER.isEnabledFor(logging.INFO):
            LOGGER.info("%s: %.3f s; max RSS %.0f MB", what, time.perf_counter() - t0, max_rss_mb())


def max_rss_mb() -> float:
    """The process's peak resident set so far, MB (``ru_maxrss``: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024
