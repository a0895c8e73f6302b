"""From records to figures: the metrics, one function each (``metrics/``, declared through
``registry``), a run's records as columns (``frame``), the one summariser (``summary``), the math of
the experience metrics (``experience``), statistics with confidence intervals (``stats``), units
(``units``), SLO expressions (``slo``), token counts (``tokencount``), refusal detection
(``refusals``), HTTP phases (``http_phases``) and the AIPerf export. Pure computation: nothing here
sends a request."""
