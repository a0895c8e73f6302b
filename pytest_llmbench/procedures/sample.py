"""The measured sample as sent: the workload as run (§4.3) and its hygiene (§4.4, §4.5.1, §5.7).

:func:`as_run` describes a standard workload the profile or the tester altered as the custom
workload it became; :func:`prompt_hygiene` counts measured prompts the warm-up sent too, measured
repeats, the measured prefix-cache hit fraction and how per-chunk token counts were obtained, so
contamination of the measured sample is visible in every procedure's report.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..common.records import RequestRecord
from ..measure import tokencount
from .facts import tokenizer_facts
from .tally import CacheHits, CountingTally, PromptKeys, SentLengths, tallies

if TYPE_CHECKING:  # pragma: no cover
    from .base import ProcedureContext
    from .run import Measured

__all__ = ["as_run", "prompt_hygiene"]


def as_run(workload: Mapping[str, Any], cap: int | None,
           records: Iterable[RequestRecord] | SentLengths) -> dict[str, Any]:
    """The workload as run (§4.3-MUST-1, §4.3.2-PARAM-1): a standard workload the profile or the
    tester altered (output cap that bound some request, synthetic stand-in for a dataset workload)
    is a custom workload, described by the distributions actually sent. ``records``: the records sent,
    or their lengths as tallied when they finished (:class:`.tally.SentLengths`)."""
    w = dict(workload)
    if not w:
        return w
    sent = records if isinstance(records, SentLengths) else _lengths(records)
    if not sent.n:
        return w
    ins, outs = _Histogram(sent.inputs), _Histogram(sent.outputs)
    capped = cap is not None and outs.max >= cap
    standin = bool(w.get("synthetic_standin") or (w.get("dataset") or {}).get("synthetic_standin"))
    if not (capped or standin):
        return w
    why = []
    if capped:
        why.append(f"output capped at {cap} tokens")
    if standin:
        why.append(f"synthetic stand-in for the {w.get('name')} dataset")

    def dist(a: _Histogram) -> dict[str, Any]:
        return {"type": "empirical (as sent)", "params": {"min": a.min, "p50": a.median(), "mean": round(a.mean(), 2),
                                                          "max": a.max}}

    base = w.get("base") or w.get("name")
    prior = list(w.get("altered_by") or [])  # a procedure's own reasons (5.9's lengths) come first
    why = prior + [x for x in why if x not in prior]
    w.update(name=f"{base} (custom: {'; '.join(why)})", custom=True, standard=False, base=base, altered_by=why)
    w["input_length"] = {**(w.get("input_length") or {}), **dist(ins), "unit": "tokens",
                         "tokenizer": (w.get("input_length") or {}).get("tokenizer") or "reference"}
    w["output_length"] = {**(w.get("output_length") or {}), **dist(outs), "unit": "tokens",
                          "control": "max_tokens" + (f" (capped at {cap})" if capped else "")}
    return w


def _lengths(records: Iterable[RequestRecord]) -> SentLengths:
    out = SentLengths()
    for r in records:
        out.add(r)
    return out


class _Histogram:
    """A histogram of integer lengths (length -> records) read as the sorted lengths it stands for: the
    same minimum, maximum, median (``np.median``: the middle one, or the mean of the two middle ones) and
    mean (the exact sum over the count) as the array of the lengths."""

    def __init__(self, counts: Mapping[int, int]) -> None:
        self.values = np.array(sorted(counts), dtype=np.int64)
        self.counts = np.array([counts[v] for v in self.values.tolist()], dtype=np.int64)
        self.n = int(self.counts.sum())
        self.min, self.max = int(self.values[0]), int(self.values[-1])

    def _at(self, k: int) -> int:
        """The ``k``-th smallest length (0-based)."""
        return int(self.values[int(np.searchsorted(np.cumsum(self.counts), k, side="right"))])

    def median(self) -> float:
        n = self.n
        return float(self._at(n // 2)) if n % 2 else (float(self._at(n // 2 - 1)) + float(self._at(n // 2))) / 2

    def mean(self) -> float:
        return float(sum(v * c for v, c in zip(self.values.tolist(), self.counts.tolist()))) / self.n


def prompt_hygiene(ctx: ProcedureContext, measured: Sequence[Measured], warmup_prompts: set[str]) -> dict[str, Any]:
    """Measured prompts that the warm-up sent (``warmup_prompts``: their hashes), measured repeats, the
    measured cache-hit fraction, and how per-chunk token counts were obtained (share exact in server
    tokens, §4.4, §4.6).

    Values for the results document (measurements), so contamination of the measured sample
    by a prefix cache is visible in every procedure's report (§4.5.1, §5.7).
    """
    counted = list(tallies(measured))  # the measured records as they finished: no pass over them
    hits, methods = CacheHits(), tokencount.MethodTally()
    for t in counted:
        hits.merge(t.hits)
        methods.merge(t.methods)
    used = CountingTally.merged(t.counting for t in counted)
    hit, counting, tok = hits.summary(), methods.shares(), tokenizer_facts(ctx, used.used())
    prompts = [t.prompts for t in counted]
    repeats, seen = PromptKeys.repeats(prompts), PromptKeys.seen_in(prompts, warmup_prompts)
    return {
        "token_counts_exact_share": counting["exact_share"],
        "token_count_methods": ", ".join(f"{k} {n}" for k, n in sorted(counting["methods"].items())) or "n/a",
        # §4.4.2 option and the tokenizer the counts are in: part of the gate's comparability key (§6.1)
        "token_counting_option": tok["counting_option"],
        "token_counting_tokenizer": tok["name"] or f"server-native:{ctx.sut.model}",
        "measured_cache_hit_fraction": hit["fraction"],
        "measured_requests_over_half_cached": (
            f"{hit['requests_over_half_cached']} of {hit['requests_reporting']}"
            if hit["requests_reporting"] else "not reported by the server"),
        "measured_prompts_seen_in_warmup": seen,
        "measured_prompt_repeats": repeats,
    }
