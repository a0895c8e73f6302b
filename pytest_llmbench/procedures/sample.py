"""The measured sample as sent: the workload as run (§4.3) and its hygiene (§4.4, §4.5.1, §5.7).

:func:`as_run` describes a standard workload the profile or the tester altered as the custom
workload it became; :func:`prompt_hygiene` counts measured prompts the warm-up sent too, measured
repeats, the measured prefix-cache hit fraction and how per-chunk token counts were obtained, so
contamination of the measured sample is visible in every procedure's report.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..common.records import RequestRecord
from ..measure import tokencount
from .facts import CountingTally, RunRecords, tokenizer_facts
from .helpers import CacheHits

if TYPE_CHECKING:  # pragma: no cover
    from .base import ProcedureContext
    from .run import Measured

__all__ = ["PromptTally", "as_run", "prompt_hygiene"]


def as_run(workload: Mapping[str, Any], cap: int | None, records: Iterable[RequestRecord]) -> dict[str, Any]:
    """The workload as run (§4.3-MUST-1, §4.3.2-PARAM-1): a standard workload the profile or the
    tester altered (output cap that bound some request, synthetic stand-in for a dataset workload)
    is a custom workload, described by the distributions actually sent. ``records``: re-iterable
    (read at most twice)."""
    w = dict(workload)
    if not w:
        return w
    sent = array("q"), array("q")  # input and output lengths as sent, one pass
    for r in records:
        sent[0].append(r.spec_input_tokens)
        sent[1].append(r.max_tokens)
    ins, outs = np.frombuffer(sent[0], dtype=np.int64), np.frombuffer(sent[1], dtype=np.int64)
    if not ins.size:
        return w
    capped = cap is not None and bool((outs >= cap).any())
    standin = bool(w.get("synthetic_standin") or (w.get("dataset") or {}).get("synthetic_standin"))
    if not (capped or standin):
        return w
    why = []
    if capped:
        why.append(f"output capped at {cap} tokens")
    if standin:
        why.append(f"synthetic stand-in for the {w.get('name')} dataset")

    def dist(a: np.ndarray) -> dict[str, Any]:
        return {"type": "empirical (as sent)", "params": {"min": int(a.min()), "p50": float(np.median(a)),
                                                          "mean": round(float(a.mean()), 2), "max": int(a.max())}}

    base = w.get("base") or w.get("name")
    prior = list(w.get("altered_by") or [])  # a procedure's own reasons (5.9's lengths) come first
    why = prior + [x for x in why if x not in prior]
    w.update(name=f"{base} (custom: {'; '.join(why)})", custom=True, standard=False, base=base, altered_by=why)
    w["input_length"] = {**(w.get("input_length") or {}), **dist(ins), "unit": "tokens",
                         "tokenizer": (w.get("input_length") or {}).get("tokenizer") or "reference"}
    w["output_length"] = {**(w.get("output_length") or {}), **dist(outs), "unit": "tokens",
                          "control": "max_tokens" + (f" (capped at {cap})" if capped else "")}
    return w


_HEX16 = re.compile(r"[0-9a-f]{16}")  # RequestSpec.prompt_hash


class PromptTally:
    """The measured records' prompt hashes, one record at a time: how many the warm-up sent too,
    and each kept as an 8-byte integer (a hash that is not 16 hex digits is kept as it is)."""

    def __init__(self, warmup: set[str]) -> None:
        self.warmup = warmup
        self.seen = 0
        self.keys = array("Q")
        self.other: list[str] = []

    def add(self, r: RequestRecord) -> None:
        h = r.prompt_hash
        if h is None:
            return
        self.seen += h in self.warmup
        if _HEX16.fullmatch(h):
            self.keys.append(int(h, 16))
        else:
            self.other.append(h)

    def repeats(self) -> int:
        """Measured prompts that repeat an earlier measured one."""
        distinct = int(np.unique(np.frombuffer(self.keys, dtype=np.uint64)).size) + len(set(self.other))
        return len(self.keys) + len(self.other) - distinct


def prompt_hygiene(ctx: ProcedureContext, measured: Sequence[Measured], warmup_prompts: set[str]) -> dict[str, Any]:
    """Measured prompts that the warm-up sent (``warmup_prompts``: their hashes), measured repeats, the
    measured cache-hit fraction, and how per-chunk token counts were obtained (share exact in server
    tokens, §4.4, §4.6).

    Values for the results document (measurements), so contamination of the measured sample
    by a prefix cache is visible in every procedure's report (§4.5.1, §5.7).
    """
    hits, methods, used = CacheHits(), tokencount.MethodTally(), CountingTally()
    prompts = PromptTally(warmup_prompts)
    for r in RunRecords(measured, phase="measure"):  # one pass; nothing held per request
        hits.add(r)
        methods.add(r)
        used.add(r)
        prompts.add(r)
    hit, counting, tok = hits.summary(), methods.shares(), tokenizer_facts(ctx, used.used())
    repeats, seen = prompts.repeats(), prompts.seen
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
