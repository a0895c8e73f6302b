"""Run storage: a run is a directory that a report can be rebuilt from (docs/architecture.md).

* ``records.jsonl`` — one :class:`RequestRecord` per line, appended and flushed as each request
  completes, so an interrupted run keeps everything it measured and memory stays bounded.
* ``run.json`` — the run's metadata (:class:`RunMetadata`: parameters, profile, workload and
  seed, tokenizer declaration, :class:`ClockAnchor`, warm-up and probe results, sampled server
  ``/metrics``, configuration switches, load results, plugin version), written atomically
  (temporary file, fsync, ``os.replace``), so it is either the old or the new version.

:func:`load_run` reads a directory back; a torn last line (the process died mid-write) is
skipped and counted, any other bad line is an error naming the file and line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from .files import write_json_atomic
from .records import RECORDS_FORMAT, ClockAnchor, RequestRecord
from .seeds import WORKLOAD_GENERATOR_VERSION

__all__ = [
    "RECORDS_FILE",
    "RUN_FILE",
    "Run",
    "RunMetadata",
    "RunWriter",
    "StorageError",
    "iter_records",
    "load_run",
    "write_json_atomic",
]

RECORDS_FILE = "records.jsonl"
RUN_FILE = "run.json"
SCHEMA = "pytest-llmbench/run/1"
#: Records-format majors :func:`load_run` reads: 1.x records load unchanged (their ``sent_ns`` is the
#: hand-over to the transport, ``queued_ns`` is absent; records.RECORDS_FORMAT 2.0).
READABLE_MAJORS = ("1", RECORDS_FORMAT.split(".")[0])


class StorageError(ValueError):
    """A run directory or file is missing or malformed (names the file and the problem)."""


def _plugin_version() -> str:
    try:
        from importlib.metadata import version

        return version("pytest-llmbench")
    except Exception:  # pragma: no cover - not installed (running from a checkout)
        return "unknown"


@dataclass
class RunMetadata:
    """What ``run.json`` holds. Free-form parts are plain JSON-ready dicts."""

    parameters: dict[str, Any] = field(default_factory=dict)  # procedure parameters
    profile: str | None = None
    workload: str | None = None
    seed: int | None = None
    tokenizer: dict[str, Any] | None = None  # TokenizerDeclaration.to_json()
    clock_anchor: ClockAnchor | None = None
    warmup: dict[str, Any] | None = None  # WarmupResult.to_json()
    probes: list[dict[str, Any]] = field(default_factory=list)
    server_metrics: list[dict[str, Any]] = field(default_factory=list)  # sampled /metrics
    switches: dict[str, Any] = field(default_factory=dict)  # configuration switches
    client: dict[str, Any] | None = None  # LLMClient.describe()
    loads: list[dict[str, Any]] = field(default_factory=list)  # LoadResult.to_json()
    cold_start: bool = False
    keep_text: bool = True
    plugin_version: str = field(default_factory=_plugin_version)
    workload_generator_version: int = WORKLOAD_GENERATOR_VERSION  # seeds.py: runs compare only within one
    extra: dict[str, Any] = field(default_factory=dict)
    schema: str = SCHEMA
    records_format: str = RECORDS_FORMAT  # records.jsonl format (records.RECORDS_FORMAT)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["clock_anchor"] = asdict(self.clock_anchor) if self.clock_anchor else None
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunMetadata:
        d = dict(d)
        d.setdefault("records_format", "1.0")  # written before the format was recorded
        if d.get("clock_anchor") is not None:
            d["clock_anchor"] = ClockAnchor(**d["clock_anchor"])
        names = set(cls.__dataclass_fields__)
        extra = {k: v for k, v in d.items() if k not in names}
        meta = cls(**{k: v for k, v in d.items() if k in names})
        meta.extra.update(extra)
        return meta


class RunWriter:
    """Writes one run directory. A :class:`load.RecordSink`: pass it as ``sink=``.

    ``keep_text=False`` blanks chunk text in stored records (timing and counts stay).
    ``keep_in_memory=True`` also keeps the records in :attr:`records` for procedures that need
    them after the run.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        keep_text: bool = True,
        keep_in_memory: bool = False,
        metadata: RunMetadata | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keep_text = keep_text
        self.records: list[RequestRecord] | None = [] if keep_in_memory else None
        self.metadata = metadata if metadata is not None else RunMetadata()
        self.metadata.keep_text = keep_text
        if self.metadata.clock_anchor is None:
            self.metadata.clock_anchor = ClockAnchor.now()
        self.count = 0
        self._f: IO[str] | None = open(self.directory / RECORDS_FILE, "a", encoding="utf-8")
        self.write_metadata()

    def write(self, record: RequestRecord) -> None:
        """Append one record and flush it to the OS."""
        if self._f is None:
            raise StorageError(f"run writer for {self.directory} is closed")
        self._f.write(record.dumps(keep_text=self.keep_text) + "\n")
        self._f.flush()
        self.count += 1
        if self.records is not None:
            self.records.append(record)

    def write_metadata(self, metadata: RunMetadata | None = None) -> None:
        """(Re)write ``run.json`` atomically; call again whenever the metadata changes."""
        if metadata is not None:
            metadata.keep_text = self.keep_text
            self.metadata = metadata
        write_json_atomic(self.directory / RUN_FILE, self.metadata.to_json())

    def close(self) -> None:
        if self._f is not None:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            self._f = None
            self.write_metadata()

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_records(directory: str | os.PathLike[str], *, stats: dict[str, int] | None = None) -> Iterator[RequestRecord]:
    """Stream the records of a run directory (bounded memory). A torn final line is skipped
    (counted in ``stats["torn_lines"]`` when a dict is passed)."""
    path = Path(directory) / RECORDS_FILE
    if not path.is_file():
        raise StorageError(f"{path}: no such records file (is {directory} a run directory?)")
    with open(path, encoding="utf-8") as f:
        lines = iter(f)
        lineno = 0
        pending: str | None = next(lines, None)
        while pending is not None:
            line = pending
            lineno += 1
            pending = next(lines, None)
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError as exc:
                if pending is None and not line.endswith("\n"):
                    if stats is not None:
                        stats["torn_lines"] = stats.get("torn_lines", 0) + 1
                    return
                raise StorageError(f"{path}:{lineno}: not a JSON record ({exc.msg})") from None
            try:
                yield RequestRecord.from_json(d)
            except (TypeError, ValueError) as exc:
                raise StorageError(f"{path}:{lineno}: not a RequestRecord ({exc})") from None


@dataclass
class Run:
    """A run read back from disk."""

    directory: Path
    metadata: RunMetadata
    records: list[RequestRecord]
    torn_lines: int = 0


def load_run(directory: str | os.PathLike[str]) -> Run:
    """Read ``run.json`` and ``records.jsonl`` of a run directory."""
    directory = Path(directory)
    meta_path = directory / RUN_FILE
    if not meta_path.is_file():
        raise StorageError(f"{meta_path}: no run.json (is {directory} a run directory?)")
    try:
        meta = RunMetadata.from_json(json.loads(meta_path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, TypeError) as exc:
        raise StorageError(f"{meta_path}: malformed run metadata ({exc})") from None
    if str(meta.records_format).split(".")[0] not in READABLE_MAJORS:
        raise StorageError(f"{meta_path}: records format {meta.records_format} is not supported "
                           f"(this version reads {' and '.join(m + '.x' for m in READABLE_MAJORS)})")
    stats: dict[str, int] = {}
    records = list(iter_records(directory, stats=stats))
    return Run(directory, meta, records, stats.get("torn_lines", 0))
