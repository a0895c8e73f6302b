"""Prompts that fit the server (issue 33, part 2), against a loopback vLLM-like server whose vocabulary
is 32,000 ids (tests/vocabserver.py): with ``/tokenize`` the prompts are the server's own ids at
exactly the intended length; a workload longer than the context window fails before the run."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from vocabserver import MODEL, VOCAB, VocabServer

from pytest_llmbench.common.records import RequestSpec
from pytest_llmbench.procedures.prompts import PromptFitError, check_context, plan_prompts
from pytest_llmbench.sut.system import SUT, identify_server

PROCEDURE = '''
import pytest
from pytest_llmbench import poisson

@pytest.mark.llm_procedure("5.1", requests=12, load=poisson(capacity_fraction=0.5), warmup_requests=4,
                           warmup_tokens=64, warmup_probes=0, max_output_tokens=16)
def test_5_1(llm_result):
    assert llm_result.metrics.distributions["ttft"].n == 12
'''


@pytest.fixture
def vocab_server() -> Iterator[VocabServer]:
    with VocabServer() as server:
        yield server


def _records(root: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(root.rglob("records.jsonl")) for line in f.read_text().splitlines()]


def _sut(endpoint: str) -> SUT:
    sut = SUT(base_url=endpoint, model=MODEL, api="completions")
    identify_server(sut)
    return sut


def test_plan_picks_server_ids_where_tokenize_is_offered(vocab_server: VocabServer) -> None:
    plan = plan_prompts(_sut(vocab_server.endpoint))
    assert plan.mode == "server-ids" and plan.tokenize_style == "vllm", plan
    vocab_server.tokenize = False
    plan = plan_prompts(_sut(vocab_server.endpoint))
    assert plan.mode == "reference-text", plan


def test_5_1_sends_only_the_servers_ids_at_the_intended_length(pytester: pytest.Pytester,
                                                               vocab_server: VocabServer) -> None:
    pytester.makepyfile(test_fit=PROCEDURE)
    res = pytester.runpytest("--llm-endpoint", vocab_server.endpoint, "--llm-boundary", "model-engine",
                             "--llm-capacity", "rate=20", "--llm-max-duration", "0",
                             "-p", "no:randomly", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=1)
    sent = vocab_server.prompts
    assert len(sent) >= 16 and vocab_server.texts == 0  # warm-up + measured, all as token ids
    assert max(max(p) for p in sent) < VOCAB
    records = _records(Path(str(pytester.path)) / "llmbench-report")
    assert len(records) >= 16
    for r in records:
        assert r["error_type"] is None, r["error_message"]
        assert r["input_tokens_server"] == r["spec_input_tokens"]  # exact in the server's tokens
    doc = json.loads((Path(str(pytester.path)) / "llmbench-report" / "results.json").read_text())
    assert "server-ids" in json.dumps(doc)  # the prompt mode is in the results document
    # one /tokenize per distinct prompt text (plus the plan's probe), not one per request sent
    distinct = {tuple(p) for p in sent}
    assert vocab_server.tokenize_calls <= len(distinct) + 2


def test_a_workload_longer_than_the_context_fails_before_the_run(pytester: pytest.Pytester) -> None:
    with VocabServer(max_model_len=256) as server:
        pytester.makepyfile(test_fit=PROCEDURE)
        res = pytester.runpytest("--llm-endpoint", server.endpoint, "--llm-boundary", "model-engine",
                                 "--llm-capacity", "rate=20", "--llm-max-duration", "0",
                                 "-p", "no:randomly", "-p", "no:cacheprovider")
        assert server.prompts == []  # nothing was sent
    out = res.stdout.str()
    assert res.ret != 0
    assert "does not fit the server's context window" in out and "the limit is 256" in out, out[-3000:]
    assert "workload '" in out and "output =" in out


def test_check_context_message_names_workload_length_and_limit(vocab_server: VocabServer) -> None:
    sut = _sut(vocab_server.endpoint)
    sut.server_info["context_window"] = 1000
    ok = RequestSpec(index=0, workload="w", input_tokens=900, max_tokens=100, prompt_text="x")
    long = RequestSpec(index=7, workload="long-context", input_tokens=990, max_tokens=64, prompt_text="x")
    check_context(sut, [ok])
    with pytest.raises(PromptFitError) as exc:
        check_context(sut, [ok, long])
    msg = str(exc.value)
    assert "'long-context'" in msg and "request 7" in msg and "1,054 tokens" in msg and "limit is 1,000" in msg


def test_shared_prefixes_stay_shared_in_the_servers_ids(vocab_server: VocabServer) -> None:
    """code-completion and conversation: each part keeps its reference length, so requests that share a
    prefix in reference tokens share exactly that many server ids, and the total is input_tokens."""
    import asyncio

    from pytest_llmbench.client import ClientConfig, LLMClient
    from pytest_llmbench.common.seeds import Seeds
    from pytest_llmbench.common.tokenizer import get_tokenizer
    from pytest_llmbench.sut.adapters import PromptFit
    from pytest_llmbench.sut.adapters.others import VLLM_FORM
    from pytest_llmbench.workloads import build_workload

    tok = get_tokenizer("cl100k_base")
    root = vocab_server.endpoint.removesuffix("/v1")
    for name in ("code-completion", "conversation"):
        specs = build_workload(name, n=12, seed=Seeds(7, "5.7").derive(name), tokenizer=tok).specs
        hook = PromptFit(VLLM_FORM, root_url=root, model=MODEL, api="completions", tokenizer=tok)
        client = LLMClient(ClientConfig(base_url=vocab_server.endpoint, model=MODEL, api="completions"), tokenizer=tok,
                           body_hook=hook)

        async def fit(c: LLMClient = client, h: PromptFit = hook) -> list[list[int]]:
            await c.prepare(specs)
            out = [h(s, c.build_body(s))["prompt"] for s in specs]
            await c.aclose()
            return out

        bodies = asyncio.run(fit())
        shared = 0
        for s, ids in zip(specs, bodies):
            assert len(ids) == s.input_tokens and max(ids) < VOCAB
            for t, other in zip(specs, bodies):
                if s is not t and s.prefix_id is not None and s.prefix_id == t.prefix_id:
                    assert ids[:s.prefix_tokens] == other[:s.prefix_tokens], (name, s.index, t.index)
                    shared += 1
        assert shared, f"{name}: no two requests share a prefix in this sample"


def test_reference_text_prompts_are_checked_by_a_preflight_request(pytester: pytest.Pytester) -> None:
    """No /tokenize, vocabulary unknown: text prompts; one pre-flight request (on disk like every request)
    compares usage.prompt_tokens with the intended length and warns above 5 %."""
    with VocabServer(tokenize=False) as server:
        pytester.makepyfile(test_fit=PROCEDURE)
        res = pytester.runpytest("--llm-endpoint", server.endpoint, "--llm-boundary", "model-engine",
                                 "--llm-capacity", "rate=20", "--llm-max-duration", "0",
                                 "-p", "no:randomly", "-p", "no:cacheprovider")
        sent_as_ids = len(server.prompts) - server.texts
    res.assert_outcomes(passed=1)
    assert sent_as_ids == 0  # never the reference tokenizer's ids to a server of unknown vocabulary
    out = res.stdout.str()
    assert "warning: prompts sized in reference tokens come to" in out, out[-2000:]
    root = Path(str(pytester.path)) / "llmbench-report"
    assert len(_records(root)) == server.texts  # the pre-flight request is on disk too
    assert list(root.rglob("preflight/records.jsonl"))
    doc = json.loads((root / "results.json").read_text())
    assert '"reference-text"' in json.dumps(doc)


def test_a_hook_failure_without_text_still_names_what_failed() -> None:
    """A body hook whose server call raised an exception with no text (httpx's ReadTimeout under load): the
    record fails ``protocol`` unsent, and its message names the hook and the exception (seen live: an empty
    "prompt fitting: " on vLLM at concurrency 16)."""
    import asyncio

    import httpx

    from pytest_llmbench.client import ClientConfig, LLMClient
    from pytest_llmbench.common.records import ErrorType

    class TimesOut:
        name = "prompt fitting"

        def ready(self, spec: RequestSpec) -> bool:
            return False

        async def prepare(self, spec: RequestSpec) -> None:
            raise httpx.ReadTimeout("")

        def __call__(self, spec: RequestSpec, body: dict) -> dict:
            return body

        def describe(self) -> dict:
            return {}

        async def aclose(self) -> None:
            pass

    async def send() -> object:
        async with LLMClient(ClientConfig(base_url="http://127.0.0.1:9/v1", model=MODEL, api="completions"),
                             tokenizer=None, body_hook=TimesOut()) as c:
            return await c.send(RequestSpec(index=0, workload="w", input_tokens=4, max_tokens=2, prompt_text="a b"))

    rec = asyncio.run(send())
    assert not rec.ok and rec.error_type == ErrorType.PROTOCOL and not rec.sent_ns
    assert rec.error_message == "prompt fitting: ReadTimeout"
