"""Engine model on a virtual clock: timing equals the configuration's analytic predictions,
KV accounting invariants hold under random workloads, determinism by seed, output words."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmbench.common.tokenizer import get_tokenizer
from pytest_llmbench.simulator import Engine, Sequence, SimConfig, SimConfigError, run_virtual
from pytest_llmbench.simulator.engine import QueueFullError
from pytest_llmbench.simulator.generation import input_refused, plan_output, request_seed
from pytest_llmbench.simulator.kv import BlockManager
from pytest_llmbench.simulator.vocab import get_vocabulary

MS = 1_000_000  # ns


def seq(rid: int, prompt: int | list[int], n_out: int, *, times: bool = True, base: int = 0) -> Sequence:
    ids = list(range(base, base + prompt)) if isinstance(prompt, int) else list(prompt)
    return Sequence(rid, ids, [7] * n_out, n_out, "length", record_times=times)


def cfg(**kw: object) -> SimConfig:
    base: dict[str, object] = dict(time_scale=1.0, step_ms=2.0, decode_per_seq_ms=0.5, prefill_per_token_ms=0.05,
                                   prefill_per_token2_ms=1e-5, prefix_cache=False)
    base.update(kw)
    return SimConfig(**base)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- timing model
@settings(deadline=None, max_examples=40)
@given(prompt=st.integers(1, 8000), chunked=st.booleans(), budget=st.integers(64, 4096),
       scale=st.sampled_from([1.0, 0.1, 0.0]))
def test_lone_request_ttft_equals_prediction(prompt: int, chunked: bool, budget: int, scale: float) -> None:
    c = cfg(chunked_prefill=chunked, max_num_batched_tokens=budget, time_scale=scale)
    e = Engine(c)
    s = seq(0, prompt, 3)
    run_virtual(e, [(0, s)])
    assert s.first_token_ns == pytest.approx(c.predicted_ttft_s(prompt) * 1e9, abs=2 * c.prefill_iterations(prompt))
    assert s.queue_ns == 0
    assert s.prefill_ns == s.first_token_ns
    # the two decode iterations after the first token take predicted_itl_s(1) each
    gaps = [b - a for a, b in zip(s.emit_ns, s.emit_ns[1:])]  # type: ignore[arg-type]
    assert gaps == [pytest.approx(c.predicted_itl_s(1) * 1e9, abs=1)] * 2


@pytest.mark.parametrize("batch", [1, 4, 16])
def test_decode_itl_matches_prediction_per_batch_size(batch: int) -> None:
    c = cfg()
    e = Engine(c)
    seqs = [seq(i, 32, 20, base=1000 * i) for i in range(batch)]
    run_virtual(e, [(0, s) for s in seqs])
    for s in seqs:  # all prefilled in one iteration, then `batch` sequences decode together
        gaps = [b - a for a, b in zip(s.emit_ns, s.emit_ns[1:])]  # type: ignore[arg-type]
        assert gaps == [pytest.approx(c.predicted_itl_s(batch) * 1e9, abs=1)] * 19


@pytest.mark.parametrize("chunked", [False, True])
def test_long_prompt_stall_matches_predicted_max_itl(chunked: bool) -> None:
    c = cfg(chunked_prefill=chunked, max_num_batched_tokens=256)
    e = Engine(c)
    runner = seq(0, 16, 200)
    long = seq(1, 4000, 2, base=10_000)
    t_arrive = round(10 * c.predicted_itl_s(1) * 1e9) + 1  # while `runner` decodes
    run_virtual(e, [(0, runner), (t_arrive, long)])
    gaps = [b - a for a, b in zip(runner.emit_ns, runner.emit_ns[1:])]  # type: ignore[arg-type]
    assert max(gaps) == pytest.approx(c.predicted_max_itl_s(4000, 1) * 1e9, rel=1e-6, abs=2)
    if chunked:  # bounded by one chunk: far below the whole-prefill stall
        assert max(gaps) < cfg(chunked_prefill=False).predicted_max_itl_s(4000, 1) * 1e9 / 5


def test_ttft_grows_superlinearly_with_context() -> None:
    c = cfg()
    t = {L: c.predicted_prefill_s(L) for L in (1000, 2000, 4000, 8000)}
    assert t[8000] / t[4000] > t[2000] / t[1000] > 2.0  # a*L + b*L^2: attention term dominates late
    e = Engine(c)
    ss = {L: seq(i, L, 1, base=100_000 * i) for i, L in enumerate(t)}
    for L, s in ss.items():  # one at a time (spaced far apart), measured on the virtual clock
        run_virtual(e, [(0, s)])
        assert s.prefill_ns == pytest.approx(c.predicted_ttft_s(L) * 1e9, abs=1)


# ----------------------------------------------------------------------------- KV / preemption
def test_capacity_prediction_separates_no_preemption_from_preemption() -> None:
    c = cfg(kv_capacity_tokens=1024, block_size=16)  # 64 blocks
    cap = c.kv_capacity_requests(64, 64)
    assert cap == 8
    e = Engine(c)
    run_virtual(e, [(0, seq(i, 64, 64, base=1000 * i)) for i in range(cap)])
    assert e.counters.num_preemptions == 0
    e = Engine(c)
    many = [seq(i, 64, 64, base=1000 * i) for i in range(3 * cap)]
    run_virtual(e, [(0, s) for s in many])
    assert e.counters.num_preemptions > 0
    assert e.counters.requests_preempted == sum(1 for s in many if s.preemptions)
    assert e.counters.preempted_tokens == sum(s.preempted_tokens for s in many) > 0
    assert all(s.num_emitted == 64 and s.status == "finished" for s in many)
    assert e.kv.num_used == 0


def test_request_that_can_never_fit_is_rejected() -> None:
    e = Engine(cfg(kv_capacity_tokens=256, context_window=4096))
    with pytest.raises(Exception, match="KV cache"):
        e.add(seq(0, 200, 100), 0)


def test_waiting_queue_bound() -> None:
    e = Engine(cfg(max_waiting=2))
    e.add(seq(0, 8, 1), 0)
    e.add(seq(1, 8, 1), 0)
    with pytest.raises(QueueFullError):
        e.add(seq(2, 8, 1), 0)


@settings(deadline=None, max_examples=60)
@given(data=st.data(), chunked=st.booleans(), prefix=st.booleans(), blocks=st.integers(8, 40),
       bs=st.sampled_from([4, 16]), max_seqs=st.integers(1, 12))
def test_kv_accounting_invariants_random_workload(data: st.DataObject, chunked: bool, prefix: bool,
                                                  blocks: int, bs: int, max_seqs: int) -> None:
    c = cfg(kv_capacity_tokens=blocks * bs, block_size=bs, chunked_prefill=chunked, prefix_cache=prefix,
            max_num_seqs=max_seqs, max_num_batched_tokens=data.draw(st.integers(max_seqs + 1, 200)),
            context_window=100_000)
    cap = blocks * bs
    e = Engine(c)
    shared = list(range(50_000, 50_000 + 3 * bs))
    n = data.draw(st.integers(1, 25))
    arrivals = []
    for i in range(n):
        total = data.draw(st.integers(2, cap))
        p = data.draw(st.integers(1, total - 1))
        ids = (shared + list(range(1000 * i, 1000 * i + p)))[:p] if data.draw(st.booleans()) else \
            list(range(1000 * i, 1000 * i + p))
        arrivals.append((data.draw(st.integers(0, 50)) * MS, Sequence(i, ids, [3] * (total - p), total - p, "length")))
    pending = sorted(arrivals, key=lambda a: a[0])
    now = 0
    emitted_before: dict[int, int] = {}
    for _ in range(100_000):
        while pending and pending[0][0] <= now:
            t, s = pending.pop(0)
            e.add(s, t)
        it = e.plan(now)
        if it is None:
            if not pending:
                break
            now = pending[0][0]
            continue
        e.check_invariants()
        now += it.duration_ns
        e.commit(it, now, now)
        e.check_invariants()
        for _, s in arrivals:  # tokens are never taken back, one per iteration at most
            assert 0 <= s.num_emitted - emitted_before.get(s.rid, 0) <= 1
            emitted_before[s.rid] = s.num_emitted
    else:
        raise AssertionError("did not finish")
    assert all(s.status == "finished" and s.num_emitted == s.n_out for _, s in arrivals)
    assert e.kv.num_used == 0 and not e.running and not e.waiting
    assert e.counters.requests_preempted == sum(1 for _, s in arrivals if s.preemptions)


# ----------------------------------------------------------------------------- prefix cache
def test_prefix_cache_hits_and_saves_predicted_prefill() -> None:
    c = cfg(prefix_cache=True, block_size=16)
    shared = list(range(100, 100 + 1000))
    a = seq(0, shared + [1, 2, 3], 1)
    b = seq(1, shared + [4, 5, 6, 7], 1)
    e = Engine(c)
    run_virtual(e, [(0, a)])
    run_virtual(e, [(0, b)])
    assert a.cached_tokens == 0
    assert b.cached_tokens == 1000 // 16 * 16
    assert b.prefill_ns == pytest.approx(c.predicted_ttft_s(1004, b.cached_tokens) * 1e9, abs=1)
    assert e.counters.prefix_cache_hit_tokens == b.cached_tokens
    assert e.counters.prefix_cache_queried_tokens == 1003 + 1004
    # identical prompt: all but the last (partial or full) block is served, >= 1 token computed
    d = seq(2, shared + [4, 5, 6, 7], 1)
    run_virtual(e, [(0, d)])
    assert d.cached_tokens == 1000 // 16 * 16
    # off: no hits, and turning it off flushes
    e.set_prefix_cache(False)
    f = seq(3, shared + [9], 1)
    run_virtual(e, [(0, f)])
    assert f.cached_tokens == 0 and not e.kv.cached


def test_prefix_cache_lru_eviction() -> None:
    bm = BlockManager(4, 2, prefix_cache=True)
    got = [bm.allocate() for _ in range(4)]
    for i, b in enumerate(got):
        bm.register(b, 1000 + i)
    bm.release(got[:2])  # released in reverse: got[1] becomes LRU-first, then got[0]
    bm.release(got[2:])
    assert bm.num_free == 4 and bm.num_used == 0
    assert bm.match([1000, 1001], 2) == got[:2]
    first = bm.allocate()
    assert first == got[1] and 1001 not in bm.cached  # least recently released evicted first
    assert bm.match([1000, 1001], 2) == [got[0]]
    bm.check_invariants()
    bm.flush()
    assert bm.num_free == 3 and not bm.cached
    bm.check_invariants()


# ----------------------------------------------------------------------------- determinism
def _trace(seed: int) -> list[tuple[int, list[int], list[int]]]:
    c = cfg(seed=seed, kv_capacity_tokens=512, prefix_cache=True, eos_mean_tokens=20)
    rng = random.Random(1)
    e = Engine(c)
    seqs = []
    arrivals = []
    for i in range(30):
        prompt = [rng.randrange(50_000) for _ in range(rng.randrange(1, 100))]
        rs = request_seed(c, prompt, None, 0.8, i)
        plan = plan_output(c, rs, 100)
        s = Sequence(i, prompt, plan.output_ids, 100, plan.finish_reason, record_times=True)
        seqs.append(s)
        arrivals.append((rng.randrange(0, 200) * MS, s))
    run_virtual(e, arrivals)
    return [(s.n_out, s.output_ids, s.emit_ns) for s in seqs]  # type: ignore[misc]


def test_deterministic_by_seed() -> None:
    assert _trace(5) == _trace(5)
    assert _trace(5) != _trace(6)


# ----------------------------------------------------------------------------- output plans
@settings(deadline=None, max_examples=60)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 300))
def test_output_words_retokenize_to_exactly_completion_tokens(seed: int, n: int) -> None:
    c = SimConfig()
    plan = plan_output(c, seed, n, ignore_eos=True)
    ids = get_tokenizer().encode(plan.text)
    assert ids == plan.output_ids and len(ids) == n
    assert plan.finish_reason == "length"


def test_vocabulary_is_single_tokens_with_leading_space() -> None:
    v = get_vocabulary()
    tok = get_tokenizer()
    assert len(v) == 1024
    for w, i in zip(v.words, v.ids):
        assert w.startswith(" ") and tok.encode(w) == [i]


def test_eos_min_tokens_ignore_eos() -> None:
    c = SimConfig(eos_mean_tokens=30)
    plans = [plan_output(c, s, 100) for s in range(300)]
    lengths = [len(p.output_ids) for p in plans]
    stops = [p for p in plans if p.finish_reason == "stop"]
    assert stops and all(len(p.output_ids) < 100 for p in stops)
    assert 20 < sum(lengths) / len(lengths) < 40  # geometric, mean ~30, truncated at 100
    assert all(len(plan_output(c, s, 100, min_tokens=60).output_ids) >= 60 for s in range(100))
    assert all(len(plan_output(c, s, 100, ignore_eos=True).output_ids) == 100 for s in range(20))
    assert plan_output(c, 7, 100).output_ids == plan_output(c, 7, 100).output_ids


def test_stop_string_truncates_text_and_counts_generated_tokens() -> None:
    c = SimConfig()
    full = plan_output(c, 3, 50, ignore_eos=True)
    words = full.text.split(" ")[1:]
    stop_word = words[10]
    cut = full.text.index(" " + stop_word)
    p = plan_output(c, 3, 50, ignore_eos=True, stop=[" " + stop_word])
    assert p.finish_reason == "stop" and p.text == full.text[:cut]
    assert len(p.output_ids) == full.text[: cut + len(stop_word) + 1].count(" ")


def test_guardrail_refusals_are_seeded_and_at_the_configured_rate() -> None:
    c = SimConfig(guardrails="full", guardrail_refusal_rate=0.3)
    seeds = [request_seed(c, [i, i + 1], None, 0.0, 0) for i in range(2000)]
    inp = sum(input_refused(c, s) for s in seeds)
    out = sum(plan_output(c, s, 20).finish_reason == "content_filter" for s in seeds)
    assert 0.25 < inp / 2000 < 0.35 and 0.25 < out / 2000 < 0.35
    assert [input_refused(c, s) for s in seeds[:50]] == [input_refused(c, s) for s in seeds[:50]]
    none = SimConfig(guardrails="none", guardrail_refusal_rate=0.3)
    assert not any(input_refused(none, s) for s in seeds)


def test_config_validation_names_the_field(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SimConfigError, match="guardrails"):
        SimConfig(guardrails="sometimes")
    with pytest.raises(SimConfigError, match="block_size"):
        SimConfig(block_size=0)
    with pytest.raises(SimConfigError, match="step_ms"):
        SimConfig(step_ms=-1.0)
    with pytest.raises(SimConfigError, match="unknown"):
        SimConfig.from_dict({"nope": 1})
    f = tmp_path / "sim.toml"
    f.write_text('[simulator]\nstep_ms = 4\nchunked_prefill = true\n')
    c = SimConfig.from_file(f)
    assert c.step_ms == 4.0 and c.chunked_prefill
    j = tmp_path / "sim.json"
    j.write_text('{"seed": 3, "time_scale": 0}')
    assert SimConfig.from_file(j).time_scale == 0.0


def test_seeds_are_the_same_in_every_process() -> None:
    import os
    import subprocess
    import sys

    code = ("from pytest_llmbench.simulator.config import SimConfig\n"
            "from pytest_llmbench.simulator.generation import request_seed, plan_output\n"
            "c = SimConfig(seed=5, guardrails='full')\n"
            "print([plan_output(c, request_seed(c, [1, 2, 3], s, t, 9), 30).output_ids[:5]\n"
            "       for s, t in ((None, 0.0), (None, 1.0), (42, 1.0))])\n")
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(h)}).stdout for h in (1, 2)}
    assert len(outs) == 1
