"""The embedded simulator (``pytest_llmbench/simulator``): its ``llmbench_timing`` extension.

Asked for with ``"llmbench_timing": true`` in the body (``ClientConfig.request_server_timing``),
the simulator adds to a stream's finish chunk the monotonic time it wrote each token
(``token_ns``, the same clock as the client's ``perf_counter_ns`` on Linux: §4.6.3 option C,
§4.7.1) and per-request figures (:data:`SERVER_TIMING_FIELDS`: queue wait and prefill §5.1.4.2,
preemptions §5.8.4, cached tokens). Not a detection candidate: the plugin knows when the SUT is the
embedded simulator; one started by hand behind ``--llm-endpoint`` is an OpenAI-compatible server,
whose generic adapter reads this extension too.
"""

from __future__ import annotations

from typing import Any

from ...common.records import RequestRecord
from .base import ServerAdapter

__all__ = ["SERVER_TIMING_FIELDS", "SIMULATOR", "SIMULATOR_KIND", "SimulatorAdapter"]

SIMULATOR_KIND = "llmbench-simulator"
#: Per-request fields the simulator sends in ``llmbench_timing`` (into ``RequestRecord.server_timing``).
SERVER_TIMING_FIELDS = ("queue_ns", "prefill_ns", "preemptions", "preempted_tokens", "cached_tokens",
                        "reasoning_tokens", "thinking_end_ns")  # the thinking (--reasoning, issue 49)
_KEYS = frozenset({"llmbench_timing"})


class SimulatorAdapter(ServerAdapter):
    @property
    def extension_keys(self) -> frozenset[str]:
        return _KEYS

    def parse_extensions(self, obj: dict[str, Any], rec: RequestRecord) -> None:
        """``llmbench_timing`` -> ``rec.server_token_ns`` (appended) and ``rec.server_timing``; the
        first token's unix - monotonic offset is kept once (``unix_minus_monotonic_ns``)."""
        timing = obj.get("llmbench_timing")
        if not timing:
            return
        tok = timing.get("token_ns")
        if tok:
            if rec.server_token_ns is None:
                rec.server_token_ns = []
            rec.server_token_ns.extend(tok)
        st = rec.server_timing
        if st is None:
            st = rec.server_timing = {}
        unix = timing.get("token_unix_ns")
        if tok and unix and "unix_minus_monotonic_ns" not in st:
            st["unix_minus_monotonic_ns"] = unix[0] - tok[0]
        for k in SERVER_TIMING_FIELDS:
            if k in timing:
                st[k] = timing[k]


SIMULATOR = SimulatorAdapter(
    kind=SIMULATOR_KIND,
    title="pytest-llmbench embedded simulator",
    reasoning=("as its --reasoning says: streamed -> delta.reasoning_content (chat), choices[0].reasoning_content "
               "(completions); tags -> <think>...</think> in the content; hidden -> only usage."
               "completion_tokens_details.reasoning_tokens"),
    metrics={
        "waiting": ("llmbench:num_requests_waiting",),
        "running": ("llmbench:num_requests_running",),
        "preemptions": ("llmbench:num_preemptions_total",),
        "kv_usage": ("llmbench:kv_cache_usage_perc",),
        "prefix_hits": ("llmbench:prefix_cache_hit_tokens_total",),
        "prefix_queries": ("llmbench:prefix_cache_queried_tokens_total",),
        "requests_preempted": ("llmbench:requests_preempted_total",),
        "requests_finished": ("llmbench:requests_finished_total",),
    },
    honours=("ignore_eos", "min_tokens", "llmbench_timing", "token-id prompts"),
    tested_live=True,
    documented="pytest_llmbench/simulator (this package)",
)
