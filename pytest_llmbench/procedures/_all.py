"""Imports every procedure module so that each registers itself (base.register)."""

from . import p5_1_ttft  # noqa: F401
from . import p5_6_fairness  # noqa: F401
from . import p5_2_throughput  # noqa: F401
from . import p5_5_capacity  # noqa: F401
from . import p5_8_memory_pressure  # noqa: F401
from . import p5_7_prefix_cache  # noqa: F401
from . import p5_10_guardrails  # noqa: F401
from . import p5_9_long_context  # noqa: F401
from . import p5_3_tradeoff  # noqa: F401
from . import p5_4_itl  # noqa: F401
