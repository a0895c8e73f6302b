"""Property tests for metrics.summarize: record order invariance and basic invariants."""

from __future__ import annotations

import itertools
import math
import random

import numpy as np
from factories import MS, make_record
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_llmbench.common.records import ErrorType, RequestRecord
from pytest_llmbench.measure.summary import summarize


@st.composite
def records(draw: st.DrawFn) -> list[RequestRecord]:
    n = draw(st.integers(1, 8))
    out = []
    for i in range(n):
        isl, max_tokens = draw(st.integers(1, 5000)), draw(st.integers(1, 64))
        sent = draw(st.integers(0, 500))  # ms
        lag = draw(st.integers(0, 5))
        gaps = draw(st.lists(st.integers(0, 300), min_size=0, max_size=10))
        toks = draw(st.lists(st.integers(0, 3), min_size=len(gaps), max_size=len(gaps)))
        ttft = draw(st.integers(1, 400))
        times = list(itertools.accumulate(gaps, initial=sent + ttft))[1:]  # the first gap follows the TTFT
        end = (times[-1] if times else sent) + draw(st.integers(0, 5))
        kind = draw(st.sampled_from([None, None, None, ErrorType.TIMEOUT, ErrorType.CANCELLED]))
        # a chunk without tokens has no text: the first token is the first chunk with tokens
        out.append(make_record(i, spec_input_tokens=isl, max_tokens=max_tokens, sent=sent, chunks=times, tokens=toks,
                               text=["x" if k else "" for k in toks], end=end, intended_ns=(sent - lag) * MS,
                               error_type=kind))
    return out


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


@settings(deadline=None, max_examples=40)
@given(records(), st.randoms(use_true_random=False))
def test_metrics_invariant_to_record_order(recs: list[RequestRecord], rnd: random.Random) -> None:
    a = summarize(recs)
    shuffled = list(recs)
    rnd.shuffle(shuffled)
    b = summarize(shuffled)
    assert a.scalars.keys() == b.scalars.keys()
    for k in a.scalars:
        assert _same(a.scalars[k].value, b.scalars[k].value), k
    assert a.distributions.keys() == b.distributions.keys()
    for k, d in a.distributions.items():
        e = b.distributions[k]
        assert d.n == e.n, k
        for p, est in d.percentiles.items():
            assert _same(est.value, e.percentiles[p].value), (k, p)
    assert a.errors_by_type == b.errors_by_type


@settings(deadline=None, max_examples=40)
@given(records())
def test_itl_sample_count_matches_tokens(recs: list[RequestRecord]) -> None:
    m = summarize(recs, itl_option="B")
    pr = m.per_request
    # §5.4.3: per request, ITL samples = content tokens from the first content token on - 1;
    # pooled count = sum of per-request counts (5.4.3-PARAM-2/3)
    assert m.distributions["itl"].n == int(pr["itl_count"].sum())
    ok = pr["ok"]
    for i, r in enumerate(sorted(recs, key=lambda r: (r.sent_ns, r.index))):
        n_tok = sum(k for k in r.chunk_tokens) if ok[i] else 0
        assert pr["itl_count"][i] == max(n_tok - 1, 0)
    # latencies are non-negative and TTFT never exceeds E2E
    assert (m.distributions["itl"].samples >= 0).all()
    both = ~np.isnan(pr["ttft"]) & ~np.isnan(pr["e2e"])
    assert (pr["ttft"][both] <= pr["e2e"][both]).all()
    fi = pr["fluidity"][~np.isnan(pr["fluidity"])]
    assert ((fi >= 0) & (fi <= 1)).all()
