"""Errors that name their cause (issue 33, part 3): when every request of a probe fails, the error
quotes the server's most frequent message with its count and says what to change."""

from __future__ import annotations

import re

import pytest
from vocabserver import VocabServer

from pytest_llmbench.common.records import ErrorType, RequestRecord
from pytest_llmbench.procedures.prompts import failure_cause

OOV = "Token id 100130 is out of vocabulary"

PROBE = '''
import pytest

@pytest.mark.llm_procedure("5.2", warmup_requests=2, warmup_tokens=8, probe_duration_s=1.0,
                           max_output_tokens=8)
def test_5_2(llm_result):
    pass
'''


def _rec(i: int, message: str | None, et: ErrorType | None = ErrorType.HTTP_4XX) -> RequestRecord:
    return RequestRecord(index=i, workload="w", spec_input_tokens=10, max_tokens=4,
                         error_type=et if message else None, error_message=message)


def test_failure_cause_quotes_the_most_frequent_message_and_the_fix() -> None:
    recs = [_rec(i, OOV) for i in range(7)] + [_rec(7, "connection reset by peer", ErrorType.PROTOCOL)]
    text = failure_cause(recs)
    assert text.startswith("8 of 8 requests failed; the most frequent error (7x) (1 other messages): ")
    assert f'"{OOV}"' in text and "vocabulary is smaller" in text and "--llm-api chat" in text
    ctx = failure_cause([_rec(0, "This model's maximum context length is 2048 tokens. However, you requested "
                                 "2049 tokens")])
    assert "context window" in ctx and "--max-model-len" in ctx
    assert "none failed" in failure_cause([_rec(0, None)])
    assert "no request was sent" in failure_cause([])


def test_probe_on_a_server_that_rejects_every_request(pytester: pytest.Pytester) -> None:
    with VocabServer(tokenize=False, always_400=OOV) as server:
        pytester.makepyfile(test_probe=PROBE)
        res = pytester.runpytest("--llm-endpoint", server.endpoint, "--llm-boundary", "model-engine",
                                 "--llm-max-duration", "0", "-p", "no:randomly", "-p", "no:cacheprovider")
    out = res.stdout.str()
    assert res.ret != 0
    assert "the capacity probe completed no request" in out, out[-4000:]
    line = next(ln for ln in out.splitlines() if ln.startswith("E ") and "RuntimeError: 5.2: the capacity" in ln)
    assert re.search(r"(\d+) of \1 requests failed; the most frequent error \(\1x\): \"HTTP 400: " + OOV + '"', line), line
    assert "vocabulary is smaller" in line and "--llm-api chat" in line, line
