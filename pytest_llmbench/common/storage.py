"""Run storage: a run is a directory that a report can be rebuilt from (docs/architecture.md).

* ``records.jsonl`` — one :class:`RequestRecord` per line, appended and flushed as each request
  completes, so an interrupted run keeps everything it measured and memory stays bounded.
* ``run.json`` — the run's metadata (:class:`RunMetadata`: parameters, profile, workload and
  seed, tokenizer declaration, :class:`ClockAnchor`, warm-up and probe results, sampled server
  ``/metrics``, configuration switches, load results, plugin version), written atomically
  (temporary file, fsync, ``os.replace``), so it is either the old or the new version.

:func:`load_run` reads a directory back; a torn last line (the process died mid-write) is
skipped and counted, any other bad line is an error naming the file and line. A measured run is
read through a :class:`RecordsView` (:meth:`RunWriter.view`): re-iterable, each iteration streams
the records from disk, so nothing per request stays in memory after it is written.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, overload

import orjson

from .files import LineSpool, atomic_text_file, write_json_atomic
from .records import RECORDS_FORMAT, ClockAnchor, RequestRecord
from .seeds import WORKLOAD_GENERATOR_VERSION

__all__ = [
    "RECORDS_FILE",
    "RUN_FILE",
    "RecordsView",
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
    them after the run. :meth:`view` reads this writer's records back from disk, as often as
    needed, without keeping them; with ``keep_text=False`` and ``spool_text=True`` the view reads
    them whole (text included, as the client received it) from a spool that has no name in any
    directory and is gone when the last view is (``records.jsonl`` holds no text).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        keep_text: bool = True,
        keep_in_memory: bool = False,
        metadata: RunMetadata | None = None,
        spool_text: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.keep_text = keep_text
        self.records: list[RequestRecord] | None = [] if keep_in_memory else None
        self.metadata = metadata if metadata is not None else RunMetadata()
        self.metadata.keep_text = keep_text
        if self.metadata.clock_anchor is None:
            self.metadata.clock_anchor = ClockAnchor.now()
        self._f: IO[str] | None = open(self.directory / RECORDS_FILE, "a", encoding="utf-8")
        self._offset = self._f.tell()  # a run directory written before: this writer's records start here
        self._spool = _Spool(self.directory) if spool_text and not keep_text else None
        self._lines = RecordLines(self._f, keep_text=keep_text, spool=self._spool)
        self.write_metadata()

    @property
    def count(self) -> int:
        """Records this writer wrote (or its last :meth:`rewriting` did)."""
        return self._lines.count

    def write(self, record: RequestRecord) -> None:
        """Append one record and flush it to the OS."""
        if self._f is None:
            raise StorageError(f"run writer for {self.directory} is closed")
        self._lines.write(record)
        self._f.flush()
        if self.records is not None:
            self.records.append(record)

    def view(self) -> RecordsView:
        """This writer's records so far, read back from disk on each iteration (:class:`RecordsView`)."""
        if self._f is not None:
            self._f.flush()
        if self._spool is not None:
            return RecordsView(self.directory, self.count, spool=self._spool)
        return RecordsView(self.directory, self.count, offset=self._offset)

    def rewrite(self, records: Iterable[RequestRecord]) -> int:
        """Replace the run's records after the run (e.g. recounted, tokencount.py) by ``records``
        (which may be this writer's own :meth:`view`); see :meth:`rewriting`. Returns how many."""
        with self.rewriting() as out:
            for r in records:
                out.write(r)
        return out.count

    @contextlib.contextmanager
    def rewriting(self) -> Iterator[RecordLines]:
        """Replace the run's records after the run, one ``write(record)`` at a time: ``records.jsonl``
        (and the text spool) change atomically when the block ends, not at all on an exception, so
        a view read inside the block still reads the old records. The writer must be closed."""
        if self._f is not None:
            raise StorageError(f"run writer for {self.directory} is still open: close it before rewriting")
        spool = _Spool(self.directory) if self._spool is not None else None
        with atomic_text_file(self.directory / RECORDS_FILE) as f:
            out = RecordLines(f, keep_text=self.keep_text, spool=spool)
            yield out
        self._lines, self._offset, self._spool = out, 0, spool

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


def _loads(line: str | bytes) -> Any:
    """One JSON line: orjson, else the standard parser (NaN and Infinity, which ``json.dumps`` writes)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return json.loads(line)


def iter_records(directory: str | os.PathLike[str], *, stats: dict[str, int] | None = None) -> Iterator[RequestRecord]:
    """Stream the records of a run directory (bounded memory). A torn final line is skipped
    (counted in ``stats["torn_lines"]`` when a dict is passed)."""
    return _iter_file(directory, 0, stats)


def _iter_file(directory: str | os.PathLike[str], offset: int, stats: dict[str, int] | None) -> Iterator[RequestRecord]:
    path = Path(directory) / RECORDS_FILE
    if not path.is_file():
        raise StorageError(f"{path}: no such records file (is {directory} a run directory?)")
    with open(path, encoding="utf-8") as f:
        f.seek(offset)
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
                d = _loads(line)
            except json.JSONDecodeError as exc:
                if pending is None and not line.endswith("\n"):
                    if stats is not None:
                        stats["torn_lines"] = stats.get("torn_lines", 0) + 1
                    return
                raise StorageError(f"{path}:{lineno}: not a JSON record ({exc.msg})") from None
            yield _record(d, str(path), lineno)


class RecordLines:
    """Records as JSON lines into an open text file (and whole into a text spool): a record sink."""

    def __init__(self, f: IO[str], *, keep_text: bool, spool: _Spool | None = None) -> None:
        self._f, self._keep_text, self._spool = f, keep_text, spool
        self.count = 0

    def write(self, record: RequestRecord) -> None:
        self._f.write(record.dumps(keep_text=self._keep_text) + "\n")
        if self._spool is not None:
            self._spool.write(record)
        self.count += 1


class _Spool:
    """Whole records (text included) in a :class:`~.files.LineSpool`."""

    def __init__(self, directory: Path) -> None:
        self._lines = LineSpool(directory)

    def write(self, record: RequestRecord) -> None:
        self._lines.append(record.dumps(keep_text=True).encode("utf-8"))

    def records(self, where: str) -> Iterator[RequestRecord]:
        for lineno, line in enumerate(self._lines.lines(), 1):
            yield _record(_loads(line), where, lineno)


def _record(d: Any, where: str, lineno: int) -> RequestRecord:
    try:
        return RequestRecord.from_json(d)
    except (TypeError, ValueError) as exc:
        raise StorageError(f"{where}:{lineno}: not a RequestRecord ({exc})") from None


class RecordsView(Sequence[RequestRecord]):
    """One run's records, read-only and re-iterable in bounded memory: every iteration streams them
    from ``records.jsonl`` (from ``offset``, where this run's writer started) or from the writer's
    text spool. ``len()`` is known without reading; an index or a slice reads up to it."""

    def __init__(self, directory: str | os.PathLike[str], count: int, *, offset: int = 0,
                 spool: _Spool | None = None) -> None:
        self.directory = Path(directory)
        self._count = count
        self._offset = offset
        self._spool = spool

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[RequestRecord]:
        if self._spool is not None:
            return self._spool.records(f"{self.directory / RECORDS_FILE} (text spool)")
        return itertools.islice(_iter_file(self.directory, self._offset, None), self._count)

    @overload
    def __getitem__(self, index: int) -> RequestRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[RequestRecord]: ...

    def __getitem__(self, index: int | slice) -> RequestRecord | list[RequestRecord]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._count)
            if step < 0:
                return list(self)[index]
            return list(itertools.islice(iter(self), start, stop, step))
        i = index + self._count if index < 0 else index
        if not 0 <= i < self._count:
            raise IndexError(f"record {index} of a run of {self._count}")
        return next(itertools.islice(iter(self), i, None))

    def __repr__(self) -> str:
        return f"RecordsView({str(self.directory)!r}, {self._count} records)"


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
