"""Stored runs for comparison and history (pytest-benchmark's conventions, §6).

A stored run is a directory under the storage root (default ``.llmbench/``)::

    .llmbench/0001_<commit>_<YYYYmmddTHHMMSSZ>/     (or 0001_<NAME>/ with save(name=NAME))
        results.json    the session's results document, as written to llmbench-report/
        samples.npz     per run and distribution metric, the sorted float32 per-request samples
        meta.json       id, counter, name, commit, time, machine and SUT fingerprints, sample index

The samples are what a percentile's confidence interval (and the bootstrap of a change) needs;
``results.json`` alone keeps only summaries. Like pytest-benchmark's ``FileStorage``, the store keeps
what the session produced and never recomputes: the session wrote each measured run's samples beside
its records (``runs/…/samples.npz``, :mod:`pytest_llmbench.measure.samples`) and :func:`save` copies
them. A report directory written before runs kept that file is summarised again once, by a
``resummarize`` callable handed in from above the gate (the gate does not import the summariser);
the file is written then, and a note says so (``meta.json`` ``notes``).

A run is referred to by its counter (``3`` or ``0003``), its directory name, its NAME, a PATH (a
stored-run directory, a report directory holding ``results.json``, or a ``results.json`` file) or
``latest``.
"""

from __future__ import annotations

import io
import json
import os
import platform
import re
import socket
import subprocess
import sys
import time
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from ..common.files import write_bytes_atomic, write_json_atomic
from ..common.storage import RECORDS_FILE
from ..measure.samples import (
    SAMPLES_FILE,
    Resummarize,
    RunSamplesError,
    read_run_samples,
    samples_of,
    write_run_samples,
)

__all__ = [
    "DEFAULT_STORAGE",
    "GateStorageError",
    "SampleKey",
    "StoredRun",
    "collect_samples",
    "git_commit",
    "list_runs",
    "load_run",
    "machine_fingerprint",
    "primary_label",
    "repetition_key",
    "repetition_views",
    "save",
    "sut_fingerprint",
]

DEFAULT_STORAGE = ".llmbench"
RESULTS = "results.json"
SAMPLES = "samples.npz"
META = "meta.json"
META_SCHEMA = "pytest-llmbench/stored-run/1"
_DIR_RE = re.compile(r"^(?P<num>[0-9]{4,})_(?P<rest>.+)$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")

#: (procedure key, run label, metric)
SampleKey = tuple[str, str, str]


class GateStorageError(ValueError):
    """A stored run cannot be saved, found or read (names the path or reference)."""


# --------------------------------------------------------------------------------------------
# fingerprints
# --------------------------------------------------------------------------------------------


def git_commit(cwd: str | os.PathLike[str] | None = None) -> tuple[str, bool]:
    """``(short commit id, dirty)`` of the git checkout at ``cwd``; ``("nocommit", False)`` outside one."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=cwd, capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                                    capture_output=True, text=True, timeout=10).stdout.strip())
        return (sha or "nocommit"), dirty
    except (OSError, subprocess.SubprocessError):
        return "nocommit", False


def machine_fingerprint() -> dict[str, Any]:
    """The host the harness ran on (pytest-benchmark's ``machine_info``)."""
    return {
        "node": socket.gethostname(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
        "system": platform.system(),
        "release": platform.release(),
        "python_implementation": platform.python_implementation(),
        "python_version": platform.python_version(),
    }


def sut_fingerprint(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Model, declared engine/version and hardware, boundary, API, plugin version of a results document."""
    sut = doc.get("sut") or {}
    decl = (doc.get("declarations") or {}).get("values") or {}
    engine = decl.get("engine") or {}
    model = decl.get("model") or {}
    info = sut.get("server_info") or {}
    return {
        "model": sut.get("model"),
        "model_declared": model if isinstance(model, Mapping) else {"name": model},
        "engine": engine.get("name") if isinstance(engine, Mapping) else engine,
        "engine_version": engine.get("version") if isinstance(engine, Mapping) else None,
        "hardware": decl.get("hardware"),
        "boundary": sut.get("boundary"),
        "api": sut.get("api"),
        "embedded_simulator": bool(sut.get("embedded_simulator")),
        "server_config": {k: v for k, v in info.items() if k != "runtime_fields"} if info else None,
        "plugin_version": (doc.get("tool") or {}).get("version"),
    }


# --------------------------------------------------------------------------------------------
# samples
# --------------------------------------------------------------------------------------------


def primary_label(result: Mapping[str, Any]) -> str | None:
    """The label of a procedure result's primary run: the one it declares (``primary_run``, results.json
    1.4); in an older document, the run whose metrics equal ``result.metrics``."""
    runs = result.get("runs") or []
    declared = result.get("primary_run")
    if declared is not None and any(str(r.get("label")) == str(declared) for r in runs):
        return str(declared)
    primary = result.get("metrics")
    for run in runs:
        if primary is not None and run.get("metrics") == primary:
            return str(run.get("label"))
    return str(runs[-1].get("label")) if runs else None


def collect_samples(doc: Mapping[str, Any], report_dir: str | os.PathLike[str], *,
                    resummarize: Resummarize | None = None, notes: list[str] | None = None
                    ) -> dict[SampleKey, np.ndarray]:
    """Per procedure, run and distribution: the sorted float32 samples the session wrote beside each
    run's records under ``report_dir/runs/`` (``samples.npz``).

    A run without that file (a report directory written before runs kept it) is summarised again from
    its records by ``resummarize`` (with the ITL option the run used), once: the file is written beside
    the records, and a sentence saying so is appended to ``notes``. Without ``resummarize`` such a run
    is refused (:class:`GateStorageError`).
    """
    root = Path(report_dir)
    out: dict[SampleKey, np.ndarray] = {}
    done: dict[Path, dict[str, np.ndarray]] = {}
    again: list[Path] = []
    unwritten: list[str] = []
    for proc in _with_repetitions(doc.get("procedures") or []):
        for run in (proc.get("result") or {}).get("runs") or []:
            rel = run.get("run_dir")
            if not rel:
                continue
            run_dir = root / rel
            if run_dir not in done:
                done[run_dir] = _run_samples(run_dir, str((run.get("metrics") or {}).get("itl_option") or "B"),
                                             resummarize, again, unwritten)
            for metric, arr in done[run_dir].items():
                out[(str(proc["key"]), str(run.get("label")), metric)] = arr
    if again and notes is not None:
        note = (f"{len(again)} run(s) under {root.as_posix()} had no {SAMPLES_FILE} (written by a version before "
                f"runs kept their samples): summarised again once from their {RECORDS_FILE}")
        note += (f"; {SAMPLES_FILE} written beside the records, so it is not done again" if not unwritten else
                 f"; could not write {SAMPLES_FILE} ({'; '.join(unwritten)}): they will be summarised again "
                 "next time")
        notes.append(note)
    return out


def _run_samples(run_dir: Path, itl_option: str, resummarize: Resummarize | None, again: list[Path],
                 unwritten: list[str]) -> dict[str, np.ndarray]:
    """One run's samples: its samples file, else its records summarised again by ``resummarize``."""
    try:
        kept = read_run_samples(run_dir)
    except RunSamplesError as exc:
        raise GateStorageError(str(exc)) from None
    if kept is not None:
        return kept
    if not (run_dir / RECORDS_FILE).is_file():
        raise GateStorageError(f"{run_dir}: run records missing and no {SAMPLES_FILE}; cannot store per-request "
                               f"samples (save right after the session, from its report directory)")
    if resummarize is None:
        raise GateStorageError(
            f"{run_dir}: no {SAMPLES_FILE} beside the run records (a report directory written before runs kept "
            f"their samples), and the gate does not summarise records itself: compare or store it through "
            f"`python -m pytest_llmbench compare` or the pytest plugin (--llm-compare PATH), which summarise such "
            f"a run once and write its {SAMPLES_FILE}; from Python, pass "
            f"resummarize=pytest_llmbench.session.resummarize_run")
    summary = resummarize(run_dir, itl_option)
    again.append(run_dir)
    try:
        write_run_samples(run_dir, summary)
    except OSError as exc:
        unwritten.append(f"{run_dir}: {exc.strerror or exc}")
    return samples_of(summary)


def repetition_key(key: str, k: int) -> str:
    """The procedure key of repetition ``k`` (1-based) of ``--llm-runs``: ``key`` itself for the first."""
    return key if k <= 1 else f"{key}#rep{k}"


def _with_repetitions(procs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Each procedure entry, then one entry per further ``--llm-runs`` repetition (keyed ``key#repK``)."""
    out: list[Mapping[str, Any]] = []
    for proc in procs:
        out.append(proc)
        for k, rep in enumerate((proc.get("repetitions") or {}).get("runs") or [], start=1):
            if k > 1:
                out.append({**proc, **rep, "key": repetition_key(str(proc.get("key")), k)})
    return out


def repetition_views(run: StoredRun) -> list[StoredRun]:
    """A run of ``--llm-runs N`` as N runs (one per repetition, §6.3); any other run as itself.

    View ``k`` has every repeated procedure's result, run directories and configuration replaced
    by repetition ``k``'s (keyed ``key#repK`` so its stored samples are found); the comparability
    key (load, seed, workload ...) is the first repetition's, so the views compare with each other.
    """
    doc = run.document
    n = max((len((p.get("repetitions") or {}).get("runs") or []) for p in doc.get("procedures") or []), default=0)
    if n <= 1:
        return [run]
    views = []
    for k in range(1, n + 1):
        procs = []
        for p in doc.get("procedures") or []:
            reps = (p.get("repetitions") or {}).get("runs") or []
            if k <= len(reps) and k > 1:
                rep = reps[k - 1]
                procs.append({**p, "key": repetition_key(str(p.get("key")), k), "result": rep.get("result"),
                              "run_dirs": rep.get("run_dirs") or []})
            else:
                procs.append(p)
        view = StoredRun(run.path, {**run.meta, "id": f"{run.id}#{k}"}, {**doc, "procedures": procs}, run._samples,
                         resummarize=run.resummarize)
        views.append(view)
    if run._samples is None:  # share one lazily read sample table between the views
        for v in views:
            v._samples_owner = run
    return views


# --------------------------------------------------------------------------------------------
# the stored run
# --------------------------------------------------------------------------------------------


@dataclass
class StoredRun:
    """One stored run (or a report directory read in place)."""

    path: Path
    meta: dict[str, Any]
    _doc: dict[str, Any] | None = field(default=None, repr=False)
    _samples: dict[SampleKey, np.ndarray] | None = field(default=None, repr=False)
    _samples_owner: StoredRun | None = field(default=None, repr=False)  # a repetition view reads its run's
    #: summarises a run of a report directory again when it has no samples file (from above the gate)
    resummarize: Resummarize | None = field(default=None, repr=False, compare=False)

    @property
    def id(self) -> str:
        return str(self.meta.get("id") or self.path.name)

    @property
    def number(self) -> int | None:
        n = self.meta.get("number")
        return int(n) if n is not None else None

    @property
    def name(self) -> str | None:
        return self.meta.get("name")

    @property
    def commit(self) -> str:
        return str(self.meta.get("commit") or "nocommit")

    @property
    def saved(self) -> str:
        return str(self.meta.get("saved") or self.document.get("finished") or "")

    @property
    def document(self) -> dict[str, Any]:
        if self._doc is None:
            p = self.path / RESULTS if self.path.is_dir() else self.path
            try:
                self._doc = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise GateStorageError(f"{p}: cannot read the results document ({exc})") from None
            if not isinstance(self._doc, dict) or "procedures" not in self._doc:
                raise GateStorageError(f"{p}: not a pytest-llmbench results document (no 'procedures')")
        return self._doc

    @property
    def notes(self) -> list[str]:
        """What was done to read this run that its user should know (e.g. runs summarised again)."""
        return list(self.meta.get("notes") or [])

    @property
    def samples(self) -> dict[SampleKey, np.ndarray]:
        """Per (procedure key, run label, metric) sorted samples: the store's ``samples.npz``, or for a
        report directory the samples files beside its runs' records (:func:`collect_samples`)."""
        if self._samples is None and self._samples_owner is not None:
            self._samples = self._samples_owner.samples
        if self._samples is None:
            npz = self.path / SAMPLES
            if npz.is_file():
                index = self.meta.get("samples") or []
                try:
                    with np.load(npz) as z:
                        self._samples = {(e["procedure"], e["run"], e["metric"]): z[f"s{i}"]
                                         for i, e in enumerate(index)}
                except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
                    raise GateStorageError(f"{npz}: stored samples unreadable ({type(exc).__name__}: {exc}); "
                                           "save this run again") from None
            else:
                base = self.path if self.path.is_dir() else self.path.parent
                notes: list[str] = []
                self._samples = collect_samples(self.document, base, resummarize=self.resummarize, notes=notes)
                if notes:
                    self.meta["notes"] = [*self.notes, *notes]
        return self._samples

    @classmethod
    def in_memory(cls, doc: Mapping[str, Any], *, report_dir: str | os.PathLike[str] = ".",
                  samples: Mapping[SampleKey, np.ndarray] | None = None, id: str = "this session",
                  resummarize: Resummarize | None = None) -> StoredRun:
        """The current session as a run to compare, without storing it (samples read from the files
        beside ``report_dir/runs/``'s records on first use unless given)."""
        return cls(Path(report_dir), {"id": id}, dict(doc), dict(samples) if samples is not None else None,
                   resummarize=resummarize)

    def to_ref(self) -> dict[str, Any]:
        return {"id": self.id, "path": self.path.as_posix(), "commit": self.commit, "name": self.name,
                "saved": self.saved}


def _utc_stamp(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _next_number(root: Path) -> int:
    nums = [int(m.group("num")) for p in root.iterdir() if p.is_dir() and (m := _DIR_RE.match(p.name))] \
        if root.is_dir() else []
    return max(nums, default=0) + 1


def save(report: str | os.PathLike[str] | Mapping[str, Any], storage: str | os.PathLike[str] = DEFAULT_STORAGE, *,
         name: str | None = None, report_dir: str | os.PathLike[str] | None = None,
         samples: Mapping[SampleKey, np.ndarray] | None = None, commit: str | None = None,
         extra: Mapping[str, Any] | None = None, now: float | None = None,
         resummarize: Resummarize | None = None, machine: Mapping[str, Any] | None = None) -> StoredRun:
    """Store a session's results document and per-request samples; returns the stored run.

    ``report`` is a report directory (holding ``results.json`` and ``runs/``), a ``results.json``
    path or the document itself (then give ``report_dir`` for the runs, or ``samples``). The samples
    are copied from the files the session wrote beside each run's records; a run without one is
    summarised again by ``resummarize`` (refused without it), which the stored ``meta.json`` notes
    (``notes``, also :attr:`StoredRun.notes` of the result). ``commit`` defaults to the current git
    commit (``nocommit`` outside a checkout); ``extra`` is recorded in ``meta.json`` (e.g.
    ``{"compare_forced": true}``); ``machine`` defaults to :func:`machine_fingerprint` of this host.
    """
    if name is not None and not _NAME_RE.match(name):
        raise GateStorageError(f"save name {name!r}: use 1-80 letters, digits, '.', '_' or '-' "
                               f"(starting with a letter or digit)")
    if isinstance(report, Mapping):
        doc = dict(report)
        base = Path(report_dir) if report_dir is not None else None
    else:
        p = Path(report)
        rp = p / RESULTS if p.is_dir() else p
        if not rp.is_file():
            raise GateStorageError(f"{p}: no results.json to store (run a session first, or give the report directory)")
        doc = StoredRun(rp, {}).document
        base = Path(report_dir) if report_dir is not None else rp.parent
    notes: list[str] = []
    if samples is None:
        if base is None:
            raise GateStorageError("save(): give report_dir (with runs/) or samples for a document passed in memory")
        samples = collect_samples(doc, base, resummarize=resummarize, notes=notes)
    root = Path(storage)
    root.mkdir(parents=True, exist_ok=True)
    sha, dirty = git_commit() if commit is None else (commit, False)
    t = time.time() if now is None else now
    for _ in range(100):  # another process may take the same counter: retry with the next one
        number = _next_number(root)
        dirname = f"{number:04d}_{name}" if name else f"{number:04d}_{sha}_{_utc_stamp(t)}"
        target = root / dirname
        try:
            target.mkdir()
            break
        except FileExistsError:
            continue
    else:  # pragma: no cover - 100 concurrent savers
        raise GateStorageError(f"{root}: could not allocate a run number")
    keys = sorted(samples)
    index = [{"procedure": k[0], "run": k[1], "metric": k[2], "n": int(samples[k].size)} for k in keys]
    buf = io.BytesIO()
    np.savez_compressed(buf, **{f"s{i}": np.sort(np.asarray(samples[k], dtype=np.float32))
                                for i, k in enumerate(keys)})
    write_bytes_atomic(target / SAMPLES, buf.getvalue())
    write_json_atomic(target / RESULTS, doc)
    meta = {
        "schema": META_SCHEMA,
        "id": dirname,
        "number": number,
        "name": name,
        "commit": sha,
        "dirty": dirty,
        "saved": datetime.fromtimestamp(t, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "machine": dict(machine) if machine is not None else machine_fingerprint(),
        "sut": sut_fingerprint(doc),
        "argv": list(sys.argv),
        "samples": index,
        "records_format": _records_format_of(doc, base),
        "extra": dict(extra or {}),
        "notes": notes,
    }
    write_json_atomic(target / META, meta)
    return StoredRun(target, meta, doc, {k: np.asarray(samples[k], dtype=np.float32) for k in keys})


def _records_format_of(doc: Mapping[str, Any], base: Path | None) -> str:
    """The ``run.json`` schema and records-format major of the session's run records (this plugin's
    when none can be read): runs whose records define T_submit differently (records format 2.0,
    App. B.1.1) are never compared."""
    for proc in doc.get("procedures") or []:
        for rel in proc.get("run_dirs") or []:
            p = base / rel / "run.json" if base is not None else None
            if p is not None and p.is_file():
                return records_format_key(p)
    return records_format_key(None)


def records_format_key(run_json: Path | None) -> str:
    """``"<run.json schema> records <major>.x"`` of one ``run.json`` (this plugin's when unreadable)."""
    from ..common.records import RECORDS_FORMAT
    from ..common.storage import SCHEMA

    meta: dict[str, Any] = {"schema": SCHEMA, "records_format": RECORDS_FORMAT}
    if run_json is not None:
        try:
            meta = json.loads(run_json.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            pass
    major = str(meta.get("records_format") or "1.0").split(".")[0]
    return f"{meta.get('schema') or SCHEMA} records {major}.x"


def _read_meta(d: Path) -> dict[str, Any]:
    try:
        return json.loads((d / META).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise GateStorageError(f"{d / META}: cannot read stored-run metadata ({exc})") from None


def list_runs(storage: str | os.PathLike[str] = DEFAULT_STORAGE) -> list[StoredRun]:
    """Every stored run under ``storage``, oldest (lowest counter) first."""
    root = Path(storage)
    if not root.is_dir():
        return []
    runs = []
    for d in root.iterdir():
        m = _DIR_RE.match(d.name)
        if m and d.is_dir() and (d / META).is_file() and (d / RESULTS).is_file():
            runs.append((int(m.group("num")), d))
    return [StoredRun(d, _read_meta(d)) for _, d in sorted(runs)]


def load_run(ref: str | os.PathLike[str] | None = None, storage: str | os.PathLike[str] = DEFAULT_STORAGE, *,
             resummarize: Resummarize | None = None) -> StoredRun:
    """Find a stored run by counter (``3``/``0003``), directory name, NAME, PATH or ``latest`` (None).

    ``resummarize`` serves a PATH to a report directory whose runs have no samples file (see
    :func:`collect_samples`); a stored run never needs it."""
    runs = list_runs(storage)
    if ref is None or str(ref) == "latest":
        if not runs:
            raise GateStorageError(f"{storage}: no stored runs (save one first: --llm-autosave or --llm-save NAME)")
        return runs[-1]
    text = str(ref)
    if text.isdigit():
        hits = [r for r in runs if r.number == int(text)]
        if hits:
            return hits[-1]
    hits = [r for r in runs if r.id == text or r.name == text or r.id.startswith(text + "_")]
    if hits:
        return hits[-1]  # a NAME saved twice: the newest
    p = Path(text)
    if p.exists():
        if p.is_dir() and (p / META).is_file():
            return StoredRun(p, _read_meta(p))
        if (p / RESULTS if p.is_dir() else p).is_file():
            return StoredRun(p, {"id": p.as_posix()}, resummarize=resummarize)
    known = ", ".join(r.id for r in runs[-10:]) or "none"
    raise GateStorageError(f"no stored run matches {text!r} in {storage} (not a counter, name or path); "
                           f"latest stored: {known}")


def load_runs(refs: Sequence[str], storage: str | os.PathLike[str] = DEFAULT_STORAGE, *,
              resummarize: Resummarize | None = None) -> list[StoredRun]:
    """:func:`load_run` for each reference."""
    return [load_run(r, storage, resummarize=resummarize) for r in refs]
