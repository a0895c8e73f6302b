"""The ``pytest_llmbench.timing`` log lines (issue 46): each timed step logs its wall time and the peak RSS so
far, in the form ``bench/memory.py`` reads back; a step that raises still logs."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import pytest

from pytest_llmbench.common.timing import LOGGER, max_rss_mb, timed

BENCH = Path(__file__).resolve().parents[1] / "bench" / "memory.py"


def _bench_module():  # bench/memory.py is a script, not a package module
    spec = importlib.util.spec_from_file_location("bench_memory", BENCH)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def test_a_timed_step_logs_its_time_and_the_peak_rss(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER.name):
        with timed("5.1: warm-up"):
            pass
        with pytest.raises(ValueError), timed("export: requests.csv"):
            raise ValueError("disk full")
    records = [r for r in caplog.records if r.name == LOGGER.name]
    lines = [r.getMessage() for r in records]
    assert len(lines) == 2 and lines[0].startswith("5.1: warm-up: ") and lines[1].startswith("export: requests.csv")
    assert 10 < max_rss_mb() < 100_000  # MB, not KiB or bytes
    log = tmp_path / "pytest.log"
    bench = _bench_module()
    fmt = logging.Formatter(bench.LOG_FILE_FORMAT)  # as the bench's pytest writes its --log-file
    log.write_text("".join(fmt.format(r) + "\n" for r in records), encoding="utf-8")
    parsed = bench._timings(log)
    assert [w for w, _, _ in parsed] == ["5.1: warm-up", "export: requests.csv"]
    assert all(s >= 0 and mb is not None and mb > 10 for _, s, mb in parsed)


def test_nothing_is_formatted_without_a_handler_at_info(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger=LOGGER.name), timed("document"):
        pass
    assert not [r for r in caplog.records if r.name == LOGGER.name]
