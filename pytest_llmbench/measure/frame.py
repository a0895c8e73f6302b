"""A run's records as columns (in progress: today the builder still keeps the records).

:class:`FrameBuilder` takes each :class:`~pytest_llmbench.common.records.RequestRecord` as the load
generator finishes it (``add``), and :meth:`FrameBuilder.build` gives what ``summary.summarize``
accepts. The columnar version keeps only the arrays the metrics need, not the records.
"""

from __future__ import annotations

from ..common.records import RequestRecord

__all__ = ["FrameBuilder"]


class FrameBuilder:
    """Collects a run's records for the summariser, one ``add`` per finished request."""

    def __init__(self, phase: str | None = "measure") -> None:
        self.phase = phase
        self._records: list[RequestRecord] = []

    def add(self, record: RequestRecord) -> None:
        if self.phase is None or record.phase == self.phase:
            self._records.append(record)

    def __len__(self) -> int:
        return len(self._records)

    def build(self) -> list[RequestRecord]:
        return list(self._records)
