"""Figures of a whole procedure (§5.5-§5.10) that an SLO may name like a run scalar.

E.g. ``assert_slo(result, "max_concurrency >= 8")``: each is read from the procedure result's
measurements (``measurement``, scaled to the base unit by ``scale``), not computed from records.
"""

from __future__ import annotations

from ..registry import declare, figure

declare(
    figure("max_concurrency", "Maximum concurrency", "requests", "higher", "highest concurrency at which every "
           "§5.5.4 criterion held (completion, TTFT P99, no out-of-memory errors)", "§5.5.4", "max_concurrency"),
    figure("capacity_output_throughput", "Output throughput at maximum concurrency", "tokens/s", "higher",
           "output throughput of the §5.5 level at the maximum concurrency", "§5.5.4", "output_throughput_at_max_tps"),
    figure("jain_index", "Jain's fairness index", "ratio", "higher", "Jain's index over the requests' TTFT slowdowns "
           "in the mixed run: 1 = every request served alike", "§5.6.4", "jain_index", count="jain_index_n"),
    figure("short_class_ttft_p99", "Short-class TTFT P99", "s", "lower", "TTFT P99 of the short class in the mixed run",
           "§5.6.4", "short_ttft_p99_ms", 1e-3, count="short_count"),
    figure("short_class_starvation_rate", "Short-class starvation rate", "fraction", "lower", "share of the short "
           "class's requests whose TTFT exceeds 5x the class median in the mixed run", "§5.6.4", "short_starvation_rate",
           count="short_count"),
    figure("warm_cache_ttft_reduction_p50", "Warm-cache TTFT reduction at P50", "fraction", "higher",
           "(TTFT P50 with the cache disabled - TTFT P50 with a warm cache) / TTFT P50 with the cache disabled",
           "§5.7.4", "warm_ttft_reduction_p50_pct", 0.01),
    figure("oversubscription_fail_rate", "Failure rate under oversubscription", "fraction", "lower",
           "highest failure rate (failed / sent; a cancelled request is not a failure) of any §5.8 level", "§5.8.4",
           "max_fail_rate"),
    figure("oversubscription_capacity_errors", "Capacity errors under oversubscription", "requests", "lower",
           "requests that failed with an out-of-memory or capacity error, over every §5.8 level", "§5.8.4",
           "capacity_errors"),
    figure("guardrail_e2e_overhead_p50", "Total guardrail overhead at E2E P50", "s", "lower", "E2E P50 (Full "
           "Filter) - E2E P50 (Baseline) at the report level", "§5.10.4", "total_overhead_e2e_p50_ms", 1e-3),
    figure("guardrail_throughput_loss", "Throughput lost to full guardrails", "fraction", "lower",
           "(max throughput Baseline - max throughput Full Filter) / Baseline (Table 14's reduction, sign reversed)",
           "§5.10.4", "full_throughput_loss"),
)
