"""Per-chunk token counts in the server's own tokens (§4.4, §4.6.3): exact one-per-chunk, pieces
from the server's tokenizer aligned to chunk offsets, reconciliation to the server total; and,
against a real llama-server (``real_sut``), counts that add up to ``usage`` and a client TPOT
that agrees with the server's own ``timings``."""

from __future__ import annotations

import asyncio
import statistics

import pytest
from factories import make_record

from pytest_llmbench.client import ClientConfig, LLMClient
from pytest_llmbench.common.records import RequestRecord, RequestSpec
from pytest_llmbench.measure import tokencount
from pytest_llmbench.sut.adapters import LLAMACPP


def _rec(texts: list[str], server_total: int | None) -> RequestRecord:
    """Chunks ``texts`` 1 ns apart, counted 9 tokens each by the reference tokenizer; the server's total."""
    return make_record(chunks=range(len(texts)), unit=1, text=texts, tokens=9, max_tokens=64,
                       output_tokens_server=server_total, token_count_method=tokencount.REFERENCE)


def test_one_token_per_content_chunk_is_exact() -> None:
    r = _rec(["", "Hel", "lo", " wor", "ld"], 4)  # a role chunk without text, then 4 tokens
    assert tokencount.apply_one_per_chunk(r)
    assert r.chunk_tokens == [0, 1, 1, 1, 1] and r.token_count_method == tokencount.ONE_PER_CHUNK
    other = _rec(["Hello", " world"], 3)  # multi-token chunks: not this method
    assert not tokencount.apply_one_per_chunk(other) and other.token_count_method == tokencount.REFERENCE


def test_pieces_align_to_chunk_byte_offsets() -> None:
    texts = ["Hé", "llo wo", "rld", "!"]
    pieces = ["H", "él", "lo", " wo", "rld!"]  # server tokens straddling chunk boundaries
    counts = tokencount.align_pieces(texts, [len(p.encode()) for p in pieces])
    assert counts == [2, 2, 1, 0]  # each piece belongs to the chunk with its first byte
    r = _rec(texts, 5)
    tokencount.apply_pieces(r, [len(p.encode()) for p in pieces])
    assert r.chunk_tokens == [2, 2, 1, 0] and r.token_count_method == tokencount.TOKENIZE
    # a byte-list piece (not valid UTF-8 alone) counts by its bytes
    assert tokencount.piece_byte_lengths([{"id": 1, "piece": [0xE2, 0x82]}, {"id": 2, "piece": "x"}]) == [2, 1]
    with pytest.raises(ValueError, match="with_pieces"):
        tokencount.piece_byte_lengths([5, 6])


def test_remainder_is_reconciled_to_the_server_total() -> None:
    r = _rec(["a", "b", "c"], 5)  # 3 pieces, the server counted 5 (e.g. an end token without text)
    tokencount.apply_pieces(r, [1, 1, 1])
    assert sum(r.chunk_tokens) == 5 and r.chunk_tokens == [1, 1, 3]
    assert r.token_count_method == tokencount.TOKENIZE_RECONCILED
    fewer = tokencount.reconcile_to_total([3, 1, 2], [True, True, True], 4)
    assert sum(fewer) == 4 and min(fewer) >= 1
    shares = tokencount.method_shares([r, _rec(["x"], 1), _rec(["y"], None)])
    assert shares["methods"] == {tokencount.TOKENIZE_RECONCILED: 1, tokencount.REFERENCE: 2}
    assert shares["exact_share"] == 0.0


PROMPT = ("The history of the printing press begins in the fifteenth century, when a goldsmith in Mainz "
          "combined movable metal type, oil-based ink and a screw press. ")


@pytest.mark.real_sut
def test_llama_server_chunk_counts_and_tpot(llama_server) -> None:  # type: ignore[no-untyped-def]
    """Every successful record's per-chunk counts add up to usage.completion_tokens, by both server
    methods; the median |client TPOT - predicted_ms/predicted_n| is within 10 % of the server's."""
    cfg = ClientConfig(base_url=llama_server.endpoint, model="gemma-3-270m", api="completions",
                       extra_body={"cache_prompt": False}, tokenizer="cl100k_base")
    specs = [RequestSpec(index=i, workload="real-sut", input_tokens=0, max_tokens=48, ignore_eos=True,
                         prompt_text=f"{i}: " + PROMPT * (1 + i % 3)) for i in range(12)]

    async def go() -> tuple[list[RequestRecord], int]:
        recs = []
        for s in specs:  # one at a time (no batching in the server's timings), one connection each
            async with LLMClient(cfg) as c:
                recs.append(await c.send(s))
        for r in recs:  # the /tokenize path as well, on the same streams
            r2 = RequestRecord.from_json(r.to_json())
            r2.token_count_method = tokencount.REFERENCE
            forced.append(r2)
        async with LLMClient(cfg) as c:
            n = await LLAMACPP.recount_tokens(forced, c)
        return recs, n

    forced: list[RequestRecord] = []
    recs, recounted = asyncio.run(go())
    assert all(r.ok for r in recs), [r.error_message for r in recs]
    assert recounted == len(forced)
    ref = [sum(r.chunk_tokens) for r in recs]
    methods = {r.token_count_method for r in recs}
    for r in recs + forced:
        assert sum(r.chunk_tokens) == r.output_tokens_server == 48, (r.token_count_method, r.chunk_tokens)
    client_tpot, server_tpot = [], []
    for r in recs:
        toks = [(t, k) for t, k in zip(r.chunk_ns, r.chunk_tokens) if k]
        n = sum(k for _, k in toks)
        client_tpot.append((toks[-1][0] - r.first_token_ns) / 1e6 / (n - 1))
        t = r.server_timing["timings"]
        server_tpot.append(t["predicted_ms"] / t["predicted_n"])
    err = [abs(c - s) / s for c, s in zip(client_tpot, server_tpot)]
    print(f"\nmethods {methods}; forced /tokenize: {sorted({r.token_count_method for r in forced})}; "
          f"reference counts per record {ref}")
    print("client TPOT ms:", [round(x, 3) for x in client_tpot])
    print("server predicted_ms/predicted_n:", [round(x, 3) for x in server_tpot])
    print(f"median relative |difference| {statistics.median(err):.3f}")
    assert statistics.median(err) <= 0.10
