"""A measured run's per-request samples on disk: ``samples.npz`` beside its ``records.jsonl``.

A percentile's confidence interval, and the bootstrap CI of a change between two runs (§6.3), need
the samples, not only the summaries ``results.json`` keeps. The session writes this file while the
run's summary (``RunMetrics``) is in memory; the regression gate stores a session by copying what
these files hold and never summarises records itself (its import contract forbids the summariser).
This module is the one definition of the format, for the writer and the gate's reader:

* an ``.npz`` archive, one array per distribution metric of the summary (its registry name), holding
  that distribution's samples (NaN-free) as sorted float32;
* ``__format__``: :data:`SAMPLES_FORMAT`, so a reader can refuse a file it does not understand.

A run written before runs kept this file is summarised again once, by a :data:`Resummarize` callable
a layer above the gate supplies (``session.resummarize_run``), and the file is written then.
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..common.files import atomic_binary_file
from .stats import SortedSamples

__all__ = ["SAMPLES_FILE", "SAMPLES_FORMAT", "Resummarize", "RunSamplesError", "Summary", "read_run_samples",
           "samples_of", "write_run_samples"]

SAMPLES_FILE = "samples.npz"
SAMPLES_FORMAT = "pytest-llmbench/run-samples/1"
_FORMAT_KEY = "__format__"
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.]*$")


class Summary(Protocol):
    """What the samples are taken from: a run's summary (``RunMetrics``), each distribution with
    its kept ``samples`` (None when it did not keep them)."""

    @property
    def distributions(self) -> Mapping[str, Any]: ...


#: ``resummarize(run_dir, itl_option) -> summary``: a run's measured records summarised again with the
#: §4.6.3 ITL option the run used; supplied from above the gate (``session.resummarize_run``).
Resummarize = Callable[[Path, str], Summary]


class RunSamplesError(ValueError):
    """A samples file that cannot be written or read (names the file and what is wrong)."""


def samples_of(summary: Summary) -> dict[str, np.ndarray]:
    """Sorted float32 samples of every distribution of ``summary`` that kept a non-empty sample set."""
    return {name: np.concatenate(list(parts)) for name, _, parts in _sample_sets(summary)}


_BLOCK = 1 << 20  # samples converted to float32 at once while writing


def _kept(summary: Summary) -> Iterator[tuple[str, Any]]:
    """(name, kept samples) of each distribution of ``summary`` with a non-empty kept sample set."""
    for name, dist in summary.distributions.items():
        s = getattr(dist, "samples", None)
        if s is not None and len(s):
            yield str(name), s


def _sample_sets(summary: Summary) -> Iterator[tuple[str, int, Iterator[np.ndarray]]]:
    """(name, count, sorted float32 blocks) of each distribution with a non-empty kept sample set. Samples
    are kept sorted (float64, or compact ``SortedSamples``) and float32 rounding keeps their order, so the
    blocks are converted in order, never the whole set at once."""
    for name, s in _kept(summary):
        if isinstance(s, SortedSamples):
            yield name, s.size, (s.floats(a, min(a + _BLOCK, s.size)).astype(np.float32)
                                      for a in range(0, s.size, _BLOCK))
        else:
            x = np.sort(np.asarray(s, dtype=np.float32))
            yield name, int(x.size), iter((x,))


def write_run_samples(run_dir: str | os.PathLike[str], summary: Summary) -> Path:
    """Write ``summary``'s samples to ``run_dir/samples.npz`` (atomically); returns the path. Written
    array by array, block by block (an ``.npz`` is a zip of ``.npy`` files), so that a long run's pooled
    samples are never held as one float32 copy."""
    bad = [name for name, _ in _kept(summary) if not _NAME_RE.match(name)]
    if bad:
        raise RunSamplesError(f"{run_dir}: distribution names {bad} cannot be keys of {SAMPLES_FILE} "
                              "(letters, digits, '_' and '.', starting with a letter)")
    path = Path(run_dir) / SAMPLES_FILE
    with atomic_binary_file(path) as f, zipfile.ZipFile(f, "w", compression=zipfile.ZIP_DEFLATED) as z:
        with z.open(f"{_FORMAT_KEY}.npy", "w") as out:
            np.lib.format.write_array(out, np.array(SAMPLES_FORMAT))
        for name, count, parts in _sample_sets(summary):
            with z.open(f"{name}.npy", "w", force_zip64=True) as out:
                np.lib.format.write_array_header_1_0(
                    out, {"descr": np.lib.format.dtype_to_descr(np.dtype("<f4")), "fortran_order": False,
                          "shape": (count,)})
                for part in parts:
                    out.write(part.astype("<f4", copy=False).tobytes())
    return path


def read_run_samples(run_dir: str | os.PathLike[str]) -> dict[str, np.ndarray] | None:
    """The samples written beside a run's records, per distribution; None when the run has no file
    (written before runs kept it). Raises :class:`RunSamplesError` on a file of another format."""
    path = Path(run_dir) / SAMPLES_FILE
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            fmt = str(z[_FORMAT_KEY]) if _FORMAT_KEY in z.files else None
            if fmt != SAMPLES_FORMAT:
                raise RunSamplesError(f"{path}: samples format {fmt!r}, this version reads {SAMPLES_FORMAT!r}; "
                                      f"delete the file to have the run summarised from its records again")
            return {name: z[name] for name in z.files if name != _FORMAT_KEY}
    except (OSError, ValueError) as exc:
        if isinstance(exc, RunSamplesError):
            raise
        raise RunSamplesError(f"{path}: cannot read the run's samples ({exc}); delete the file to have the run "
                              "summarised from its records again") from None
