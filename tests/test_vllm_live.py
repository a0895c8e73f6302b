"""Against a real vLLM OpenAI server (CPU build, random-weight Llama with a 32,000-id byte-level BPE
vocabulary and a 16K context, all built locally on first use and cached; see
pytest_llmbench/sut/adapters/vllm/server.py). Marked ``real_sut`` and ``vllm``; deselect with
``-m "not vllm"``. Without the environment they skip with the reason (``-rs``).

One server for the whole session (the ``vllm_server`` fixture); the test that kills it runs last.
They assert structure and consistency, never speed, and print the figures.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from factories import live_telemetry

from pytest_llmbench.client import ClientConfig, LLMClient
from pytest_llmbench.common.records import RequestRecord, RequestSpec
from pytest_llmbench.measure import tokencount
from pytest_llmbench.sut.adapters import VLLM
from pytest_llmbench.sut.adapters.vllm.server import MODEL_CONFIG, MODEL_NAME, VllmServer
from pytest_llmbench.sut.system import SUT, identify_server

pytestmark = [pytest.mark.real_sut, pytest.mark.vllm]

PROMPT = ("The history of the printing press begins in the fifteenth century, when a goldsmith in Mainz "
          "combined movable metal type, oil-based ink and a screw press. ")


def _sut(endpoint: str) -> SUT:
    sut = SUT(base_url=endpoint, model=MODEL_NAME, api="completions")
    identify_server(sut)
    return sut


def _send(endpoint: str, specs: list[RequestSpec], *, extra: dict[str, Any] | None = None,
          api: str = "completions") -> list[RequestRecord]:
    cfg = ClientConfig(base_url=endpoint, model=MODEL_NAME, api=api, extra_body={**VLLM.request_fields, **(extra or {})},
                       tokenizer="cl100k_base")

    async def go() -> list[RequestRecord]:
        async with LLMClient(cfg, adapter=VLLM) as c:
            return [await c.send(s) for s in specs]
    return asyncio.run(go())


def _spec(i: int, text: str, max_tokens: int, **kw: Any) -> RequestSpec:
    kw.setdefault("ignore_eos", True)
    return RequestSpec(index=i, workload="vllm-live", input_tokens=0, max_tokens=max_tokens, prompt_text=text, **kw)


def test_detects_vllm_and_its_window(vllm_server: VllmServer) -> None:
    models = httpx.get(vllm_server.endpoint + "/models", timeout=10).json()["data"]
    sut = _sut(vllm_server.endpoint)
    info = sut.server_info
    print(f"\nstart-up {vllm_server.startup_seconds:.0f} s; /v1/models {json.dumps(models)[:300]}")
    print(f"server kind {sut.server_kind} ({sut.server_kind_source}); version {info.get('version')}; "
          f"context {info.get('context_window')} from {info.get('context_window_source')}")
    assert models[0]["owned_by"] == "vllm" and models[0]["id"] == MODEL_NAME
    assert sut.server_kind == "vllm"
    assert info["context_window"] == vllm_server.max_model_len
    tok = httpx.post(vllm_server.base_url + "/tokenize", json={"model": MODEL_NAME, "prompt": PROMPT}, timeout=10)
    assert tok.status_code == 200 and tok.json()["count"] > 10
    metrics = httpx.get(vllm_server.base_url + "/metrics", timeout=10).text
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert name in metrics


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_ignore_eos_and_min_tokens_exact_lengths(vllm_server: VllmServer, api: str) -> None:
    """ignore_eos: exactly max_tokens; min_tokens == max_tokens without ignore_eos: exactly that too."""
    specs = [_spec(0, PROMPT, 24), _spec(1, PROMPT, 7),
             _spec(2, PROMPT, 17, ignore_eos=False, min_tokens=17)]
    recs = _send(vllm_server.endpoint, specs, api=api)
    got = [(r.output_tokens_server, r.usage.get("completion_tokens") if r.usage else None) for r in recs]
    print(f"\n{api}: asked 24, 7 (ignore_eos) and 17 (min_tokens); usage {got}; "
          f"finish {[r.finish_reason for r in recs]}")
    for rec, want in zip(recs, (24, 7, 17)):
        assert rec.ok, rec.error_message
        assert rec.output_tokens_server == want


def test_chunk_token_counts_sum_to_usage(vllm_server: VllmServer) -> None:
    """Per-chunk token counts (byte-level tokens may stream as empty text) add up to usage.completion_tokens."""
    specs = [_spec(i, f"{i} " + PROMPT * (1 + i), n) for i, n in enumerate((64, 33, 100))]
    recs = _send(vllm_server.endpoint, specs)
    for r in recs:
        empty = sum(1 for t in r.chunk_text if t == "")
        print(f"\nusage {r.output_tokens_server}, chunks {len(r.chunk_ns)} ({empty} with empty text), "
              f"sum of chunk counts {sum(r.chunk_tokens)}, method {r.token_count_method}")
        assert r.ok, r.error_message
        assert sum(r.chunk_tokens) == r.output_tokens_server == r.max_tokens
        assert r.token_count_method == tokencount.USAGE_PER_CHUNK  # the adapter asks for the running count


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_byte_tokens_that_stream_as_empty_text_still_count(vllm_server: VllmServer, api: str) -> None:
    """A character split over byte-level tokens: vLLM streams its first byte as a chunk with empty text
    (the rest completes it later). Biased towards the two bytes of "é" (the tokenizer was trained on
    ASCII only, so each is a token of its own), the output holds such chunks; their counts still add
    up to usage.completion_tokens: the adapter asks for the running count on every chunk
    (``continuous_usage_stats``), so they do whatever the sampled bytes decode to (a run of lone
    first bytes decodes to nothing at all). Seeded, so the sample is the same each run."""
    ids = httpx.post(vllm_server.base_url + "/tokenize", timeout=10,
                     json={"model": MODEL_NAME, "prompt": "é", "add_special_tokens": False}).json()["tokens"]
    assert len(ids) == 2, ids
    bias = {str(i): 100 for i in ids}
    (rec,) = _send(vllm_server.endpoint, [_spec(0, PROMPT, 48)], extra={"logit_bias": bias, "seed": 7}, api=api)
    empty = sum(1 for t in rec.chunk_text if t == "")
    print(f"\n{api}, biased to the bytes of 'é' {ids}: usage {rec.output_tokens_server}, chunks {len(rec.chunk_ns)} "
          f"({empty} with empty text), sum of chunk counts {sum(rec.chunk_tokens)}, method {rec.token_count_method}, "
          f"text {rec.output_text[:40]!r}")
    assert rec.ok, rec.error_message
    assert empty > 0
    assert sum(rec.chunk_tokens) == rec.output_tokens_server == 48
    assert rec.token_count_method == tokencount.USAGE_PER_CHUNK


def test_vocabulary_is_realistic(vllm_server: VllmServer) -> None:
    """The local model's vocabulary (32,000 ids) rejects cl100k's high ids, as a Llama-2-sized model does."""
    ok = httpx.post(vllm_server.endpoint + "/completions", timeout=60, json={
        "model": MODEL_NAME, "prompt": [1, 2, MODEL_CONFIG["vocab_size"] - 1], "max_tokens": 2})
    bad = httpx.post(vllm_server.endpoint + "/completions", timeout=60, json={
        "model": MODEL_NAME, "prompt": [1, 2, 100130], "max_tokens": 2})
    print(f"\nid {MODEL_CONFIG['vocab_size'] - 1}: {ok.status_code}; id 100130: {bad.status_code} {bad.text[:200]}")
    assert ok.status_code == 200
    assert bad.status_code == 400 and "vocab" in bad.text.lower()


PROCEDURES = '''
import pytest
from pytest_llmbench import poisson, closed

@pytest.mark.llm_procedure("5.1", requests=12, load=poisson(capacity_fraction=0.5), warmup_requests=4,
                           warmup_tokens=64, warmup_probes=0, max_output_tokens=16)
def test_5_1(llm_result):
    assert {"TTFT P50", "TTFT P99"} <= {row[0] for row in llm_result.tables[0].rows}
    ttft = llm_result.metrics.distributions["ttft"]
    assert ttft.n + ttft.dropped == 12 and ttft.n >= 9, (ttft.n, ttft.dropped)

@pytest.mark.llm_procedure("5.4", requests=12, levels=(0.5,), min_output_tokens=8, max_output_tokens=16,
                           warmup_requests=4, warmup_tokens=64, capacity="session")  # the declared rate (the own
                           # search is tested on the simulator: test_procedure_5_4)
def test_5_4(llm_result):
    assert llm_result.metrics.distributions["itl"].n >= 12 * 6

@pytest.mark.llm_procedure("5.7", workload="code-completion", load=closed(4), requests=8, warmup_requests=4,
                           warmup_tokens=32, max_output_tokens=4)
def test_5_7(llm_result, llm_sut):
    m = llm_result.measurements
    assert llm_sut.server_info["prefix_cache"] is True  # restored
    assert m["disabled_cached_tokens"] == 0, "cache hits while every request had its own cache_salt"
    assert m["cold_prefix_hit_rate"] > 0 and m["warm_prefix_hit_rate"] > 0, m
    assert "could not be flushed" not in " ".join(llm_result.notes)
'''


def _records(root: Path) -> list[dict[str, Any]]:
    """Every record under ``root``, with its run's directory name as ``_run``."""
    return [{**json.loads(line), "_run": f.parent.name} for f in sorted(root.rglob("records.jsonl"))
            for line in f.read_text().splitlines() if line.strip()]


def test_procedures_on_vllm(pytester: pytest.Pytester, vllm_server: VllmServer) -> None:
    """5.1 and 5.4 at the llama.cpp real_sut sizes (declared capacity, 12 requests), 5.7 through the adapter."""
    pytester.makepyfile(test_real=PROCEDURES)
    res = pytester.runpytest("--llm-endpoint", vllm_server.endpoint, "--llm-boundary", "model-engine",
                             "--llm-capacity", "rate=0.6", "--llm-max-duration", "0",
                             "-p", "no:randomly", "-p", "no:cacheprovider", "-rs")
    root = Path(str(pytester.path)) / "llmbench-report"
    doc = json.loads((root / "results.json").read_text())
    print(f"\nserver kind {doc['sut']['server_kind']}; prompt mode {doc['sut'].get('server_info', {}).get('prompt_mode')}")
    for proc in doc["procedures"]:
        meas = (proc.get("result") or {}).get("measurements") or {}
        keep = {k: v for k, v in meas.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        print(f"  {proc['procedure']} ({proc['configuration']['duration_s']:.0f} s): "
              f"{json.dumps(dict(list(keep.items())[:14]))}")
        print(f"    figures: {json.dumps(proc['figures'])[:500]}")
    records = _records(root)
    # 5.4's own capacity search overloads the server on purpose (closed loops to c64): a CPU vLLM on a
    # busy 2-core host has dropped a connection there; such failures are counted, printed, not asserted
    probe = [r for r in records if r.get("error_type") and r["_run"].startswith("capacity-probe")]
    errors = [r for r in records if r.get("error_type") and not r["_run"].startswith("capacity-probe")]
    print(f"  {len(records)} records, {len(errors)} errors, {len(probe)} in capacity probes: "
          f"{[(r['_run'], r['error_type'], r.get('error_message')) for r in probe]}")
    assert doc["sut"]["server_kind"] == "vllm"
    assert not errors, errors[:3]
    assert all(r["input_tokens_server"] == r["spec_input_tokens"] for r in records if r["phase"] == "measure")
    res.assert_outcomes(passed=3)



def test_server_telemetry_on_vllm(pytester: pytest.Pytester, vllm_server: VllmServer) -> None:
    """Issue 34: vLLM's series (vllm:num_requests_waiting/running, kv_cache_usage_perc, num_preemptions_total)
    sampled during every run, stored, plotted; the queue-drained item from vllm:num_requests_waiting."""
    timeline = live_telemetry(pytester, vllm_server.endpoint, "vllm:num_requests_waiting",
                              {"waiting", "running", "kv_usage", "preemptions"})
    assert timeline["kv_usage"] and max(v for v in timeline["kv_usage"] if v is not None) > 0

KILLED = '''
import pytest
from pytest_llmbench import closed

@pytest.mark.llm_procedure("5.1", requests=12, load=closed(2), warmup_requests=4,
                           warmup_tokens=64, warmup_probes=0, max_output_tokens=400)
def test_5_1(llm_result):
    pass
'''


def _vllm_gauges(base_url: str) -> dict[str, float]:
    """vLLM's ``/metrics``: requests running now and requests finished so far (prometheus_client's parser)."""
    from prometheus_client.parser import text_string_to_metric_families

    want = {"vllm:num_requests_running": "running", "vllm:request_success": "finished"}
    got = {"running": 0.0, "finished": 0.0}
    for family in text_string_to_metric_families(httpx.get(base_url + "/metrics", timeout=5).text):
        if family.name in want:
            got[want[family.name]] += sum(s.value for s in family.samples if not s.name.endswith("_created"))
    return got


def test_sigkill_of_the_server_in_the_middle_of_a_run(pytester: pytest.Pytester, vllm_server: VllmServer) -> None:
    """Last of the vLLM tests: the server dies (SIGKILL) in the middle of 5.1's measured run (a closed
    loop of 2). The kill waits on what the server shows, not on when record lines reach the disk (issue 46):
    once the measured run has begun (its records file is opened before its first request is sent), three
    more requests finished at the server (``vllm:request_success_total``) and two running
    (``vllm:num_requests_running`` ≥ 2), each of up to 400 tokens: two are in flight and seven are still to
    be sent when it lands, whatever the host's speed."""
    import threading
    import time

    root = Path(str(pytester.path)) / "llmbench-report"
    killed: dict[str, Any] = {}

    def killer() -> None:
        deadline = time.monotonic() + 300
        at_start: float | None = None  # requests finished at the server when the measured run began
        while time.monotonic() < deadline and not killed:
            try:
                now = _vllm_gauges(vllm_server.base_url)
            except httpx.HTTPError:
                time.sleep(0.02)
                continue
            if at_start is None:
                if any(root.glob("runs/*/measure/records.jsonl")):
                    at_start = now["finished"]
            elif now["finished"] - at_start >= 3 and now["running"] >= 2:
                killed.update(after=now["finished"] - at_start, running=now["running"])
                vllm_server.kill()
                return
            time.sleep(0.02)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    pytester.makepyfile(test_killed=KILLED)
    res = pytester.runpytest("--llm-endpoint", vllm_server.endpoint, "--llm-boundary", "model-engine",
                             "--llm-capacity", "rate=4", "--llm-max-duration", "0",
                             "-p", "no:randomly", "-p", "no:cacheprovider")
    thread.join(5)
    out = res.stdout.str()
    records = [r for r in _records(root) if r.get("phase") == "measure"]
    errors = [r for r in records if r.get("error_type")]
    split = {kind: sum(1 for r in errors if r["error_type"] == kind) for kind in sorted({r["error_type"] for r in errors})}
    print(f"\nkilled after {killed.get('after')} measured requests finished at the server, "
          f"{killed.get('running')} running; {len(records)} measured records, {len(errors)} errors {split}: "
          f"{sorted({(r['error_type'], (r['error_message'] or '')[:80]) for r in errors})}")
    print("\n".join(ln for ln in out.splitlines() if "E " in ln[:3] or "error" in ln.lower())[-1500:])
    assert killed, "the server was never killed"
    assert not vllm_server.running
    assert len(records) == 12  # every request sent is accounted for
    kinds = {r["error_type"] for r in errors}
    # sent after the death on a new connection: refused (connect); in flight at the death, or written to
    # a kept-alive connection the dead server resets: the drop, named (protocol). Which of the two a request
    # gets depends on where it was when the kill landed, so the test asserts the names, not the split.
    assert errors and kinds <= {"connect", "protocol"}, kinds
    for r in errors:
        msg = r["error_message"] or ""
        assert ("Cannot connect" in msg or "refused" in msg) if r["error_type"] == "connect" else \
            any(w in msg for w in ("server closed the connection", "response body broken", "Connection reset")), \
            (r["error_type"], msg)
    assert (root / "results.json").is_file() and (root / "report.md").is_file()
    assert res.ret != 0
    assert "died or was stopped during the run" in out, out[-3000:]
