"""From records to figures: per-request metrics and run summaries (``metrics``, ``metrics_extra``,
``experience``), statistics with confidence intervals (``stats``), the metric registry and units
(``registry``, ``units``), SLO expressions (``slo``), token counts (``tokencount``), refusal
detection (``refusals``), HTTP phases (``http_phases``) and the AIPerf export. Pure computation:
nothing here sends a request."""
