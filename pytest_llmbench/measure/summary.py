"""A run's records -> :class:`RunMetrics` (in progress: the summariser moves here from ``metrics.py``)."""

from __future__ import annotations

from .metrics import *  # noqa: F401,F403
from .metrics import RunMetrics, summarize  # noqa: F401
