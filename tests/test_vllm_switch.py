"""vLLM's prefix-cache switch for 5.7 (sut/adapters/vllm/switch.py) against the loopback vLLM-like
server: off = a fresh cache_salt per request, flush = POST /reset_prefix_cache (dev mode); without
dev mode 5.7 skips with the reason."""

from __future__ import annotations

import pytest
from vocabserver import MODEL, VocabServer

from pytest_llmbench.sut import adapters
from pytest_llmbench.sut.system import SUT, identify_server

PROCEDURE = '''
import pytest
from pytest_llmbench import closed

@pytest.mark.llm_procedure("5.7", workload="code-completion", load=closed(2), requests=4, warmup_requests=2,
                           warmup_tokens=8, max_output_tokens=2)
def test_5_7(llm_result, llm_sut):
    assert llm_sut.server_info["prefix_cache"] is True
'''


def _sut(endpoint: str) -> SUT:
    sut = SUT(base_url=endpoint, model=MODEL, api="completions")
    identify_server(sut)
    return sut


def test_switch_sets_a_fresh_salt_per_request_and_flushes() -> None:
    with VocabServer(dev_mode=True) as server:
        sut = _sut(server.endpoint)
        assert sut.server_kind == "vllm"
        assert adapters.configure(sut, "prefix_cache", False) is True
        assert sut.server_info["prefix_cache"] is False and "cache_salt" in sut.extra_body
        assert adapters.configure(sut, "flush_prefix_cache", True) is True
        assert server.flushes == 2  # switching off flushes too
        assert adapters.configure(sut, "prefix_cache", True) is True
        assert "cache_salt" not in sut.extra_body and sut.server_info["prefix_cache"] is True


def test_5_7_sends_distinct_salts_only_while_the_cache_is_off(pytester: pytest.Pytester) -> None:
    with VocabServer(dev_mode=True) as server:
        pytester.makepyfile(test_pc=PROCEDURE)
        res = pytester.runpytest("--llm-endpoint", server.endpoint, "--llm-boundary", "model-engine",
                                 "--llm-max-duration", "0", "-p", "no:randomly", "-p", "no:cacheprovider")
        res.assert_outcomes(passed=1)
        salted = [s for s in server.salts if s is not None]
    assert len(salted) >= 4 and len(set(salted)) == len(salted)  # the disabled run: one salt each
    assert len(server.salts) > len(salted)  # cold and warm runs: no salt


def test_5_7_without_dev_mode_skips_with_the_reason(pytester: pytest.Pytester) -> None:
    with VocabServer(dev_mode=False) as server:
        pytester.makepyfile(test_pc=PROCEDURE)
        res = pytester.runpytest("--llm-endpoint", server.endpoint, "--llm-boundary", "model-engine",
                                 "--llm-max-duration", "0", "-p", "no:randomly", "-p", "no:cacheprovider", "-rs")
    res.assert_outcomes(skipped=1)
    assert "start vLLM with VLLM_SERVER_DEV_MODE=1" in res.stdout.str()
