"""The load generator (§4.2): open and closed loops against an absolute schedule (``load``),
warm-up (``warmup``, §4.5), the client's own self-check (``selfcheck``, §4.2.5) and the same load
split over processes or Ray (``shards``). It drives ``client`` and writes ``common.records``."""
