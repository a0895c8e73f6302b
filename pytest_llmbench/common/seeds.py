"""One seed allocator: named, independent random streams derived from the session seed (§4.3.3).

Every random choice a procedure makes (warm-up prompts, measured prompts, arrival gaps, a retried
level's fresh prompts, ...) draws from its own stream, named by ``(procedure, purpose, index)``.
Each stream is a :class:`numpy.random.SeedSequence` whose entropy is the session seed and whose
spawn key is a stable hash of the names plus the index, so

- the same session seed and names always give the same stream (reproducible, §4.3.3);
- different names or indices give statistically independent streams (no hand-picked offsets
  that could collide: warm-up prompts never repeat the measured ones by construction).

``WORKLOAD_GENERATOR_VERSION`` is recorded with every run; it changes whenever the derivation of
prompts or arrivals from the session seed changes, so stored runs are never compared across it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

__all__ = ["WORKLOAD_GENERATOR_VERSION", "Seeds", "derive_seed", "seed_sequence"]

# 1: hand-picked offsets from the session seed (before issue 12).
# 2: SeedSequence streams named by (procedure, purpose, index).
WORKLOAD_GENERATOR_VERSION = 2

_SEED_BITS = 53  # integer seeds stay exact in JSON readers that use doubles (report.html)


def _name_key(name: str) -> int:
    """A stable 32-bit key for a stream name (SHA-256, so independent of PYTHONHASHSEED)."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a seed stream name must be a non-empty string, got {name!r}")
    return int.from_bytes(hashlib.sha256(name.encode("utf-8")).digest()[:4], "big")


def seed_sequence(session_seed: int, procedure: str, purpose: str, index: int = 0) -> np.random.SeedSequence:
    """The stream for ``(procedure, purpose, index)`` under ``session_seed``."""
    if not isinstance(index, (int, np.integer)) or isinstance(index, bool) or index < 0:
        raise ValueError(f"a seed stream index must be an integer >= 0, got {index!r}")
    if not isinstance(session_seed, (int, np.integer)) or isinstance(session_seed, bool) or session_seed < 0:
        raise ValueError(f"the session seed must be an integer >= 0, got {session_seed!r}")
    return np.random.SeedSequence(entropy=int(session_seed),
                                  spawn_key=(_name_key(procedure), _name_key(purpose), int(index)))


def derive_seed(session_seed: int, procedure: str, purpose: str, index: int = 0) -> int:
    """An integer seed (< 2**53) for APIs that take one (workload builders, arrival processes)."""
    state = seed_sequence(session_seed, procedure, purpose, index).generate_state(1, dtype=np.uint64)[0]
    return int(state) >> (64 - _SEED_BITS)


@dataclass(frozen=True)
class Seeds:
    """A procedure's view of the allocator: ``seeds.derive("warmup")``, ``seeds.derive("level", k)``."""

    session_seed: int
    procedure: str

    def derive(self, purpose: str, index: int = 0) -> int:
        return derive_seed(self.session_seed, self.procedure, purpose, index)

    def sequence(self, purpose: str, index: int = 0) -> np.random.SeedSequence:
        return seed_sequence(self.session_seed, self.procedure, purpose, index)

    def rng(self, purpose: str, index: int = 0) -> np.random.Generator:
        return np.random.default_rng(self.sequence(purpose, index))
