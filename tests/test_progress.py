"""Progress lines in a non-terminal log (§4.2 robustness; issue: a quiet CI job must not look hung)."""

from __future__ import annotations

import re

import pytest

RUN_51 = '''
import pytest
from pytest_llmbench import poisson

@pytest.mark.llm_procedure("5.1", load=poisson(rate=80), requests=30, warmup_requests=4, warmup_tokens=10)
def test_ttft(llm_result):
    assert llm_result.metrics is not None
'''


@pytest.mark.parametrize(("flags", "shown"), [(("-q",), True), (("-qq",), False)])
def test_progress_lines_in_a_piped_log(pytester: pytest.Pytester, flags: tuple[str, ...], shown: bool) -> None:
    """Output piped (not a tty), as in CI: ``-q`` still prints ``[llmbench 5.1] …`` lines, ``-qq`` none."""
    pytester.makepyfile(test_run=RUN_51)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", *flags, "--llm-report", "rep")
    assert result.ret == 0, result.outlines  # -qq prints no outcome line to parse
    lines = [line for line in result.outlines if line.startswith("[llmbench 5.1]")]
    assert bool(lines) is shown, result.outlines
    if shown:  # each phase once at least: the warm-up, then the measured run with done/planned
        assert any(re.search(r"\d+/30 requests, [\d.]+ req/s, \d+ errors, \d+ s", line) for line in lines), lines
        # the measured run's line ends on its final count, whenever the last periodic line was shown
        assert any(re.search(r"measure done: 30/30 requests, [\d.]+ req/s, 0 errors, \d+ s$", line)
                   for line in lines), lines
