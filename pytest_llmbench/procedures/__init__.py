"""The draft's ten benchmarking procedures (§5.1–§5.10), one module each; see base.py and pipeline.py.

Importing this package registers every procedure (each module's ``ProcedureRun`` subclass
registers itself). The modules below import ``base``/``common``/``helpers``/``pipeline``, never
this package's list and never each other.
"""

from . import (  # noqa: F401
    p5_1_ttft,
    p5_2_throughput,
    p5_3_tradeoff,
    p5_4_itl,
    p5_5_capacity,
    p5_6_fairness,
    p5_7_prefix_cache,
    p5_8_memory_pressure,
    p5_9_long_context,
    p5_10_guardrails,
)
