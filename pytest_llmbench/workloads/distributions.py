"""Length distributions of a workload (§4.3.1): type, parameters and unit, and a seeded sampler.

Types: ``fixed`` (value), ``uniform`` (min, max; integers, both ends included), ``normal`` (mean,
std), ``lognormal`` (mu, sigma in log space; App. A.2), ``empirical`` (``values`` sampled with
replacement, or a ``histogram`` of ``edges`` and ``weights``), and ``quantile-lognormal`` (a
log-normal fitted piecewise through given quantiles: the Conversation stand-in, App. A.3.2).
Every type takes an optional ``min`` floor and ``max`` cap. Samples are rounded to the nearest
integer, then clipped at the floor and cap; a distribution whose floor is not set is floored at 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["DISTRIBUTION_PARAMS", "LengthDistribution", "WorkloadError"]


class WorkloadError(ValueError):
    """A workload cannot be built: unknown name, bad parameters, or an incomplete custom spec."""


#: Required parameters per distribution type (``min``/``max`` are optional floor/cap for all but
#: ``uniform``, where they are the range).
DISTRIBUTION_PARAMS: dict[str, tuple[str, ...]] = {
    "fixed": ("value",),
    "uniform": ("min", "max"),
    "normal": ("mean", "std"),
    "lognormal": ("mu", "sigma"),
    "empirical": (),  # values | histogram (checked separately)
    "quantile-lognormal": ("quantiles",),
}

#: Standard-normal scores of the quantiles the Conversation reference gives (App. A.3.2).
_Z = {0.5: 0.0, 0.9: 1.2815515655446004, 0.95: 1.6448536269514722, 0.99: 2.3263478740408408,
      0.999: 3.090232306167813}


@dataclass(frozen=True)
class LengthDistribution:
    """A token-length distribution as the report states it (4.3.1-MUST-1/2)."""

    type: str
    params: dict[str, Any]
    unit: str = "tokens"
    tokenizer: str = "cl100k_base"
    note: str | None = None

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise WorkloadError(f"length distribution {self.type!r}: " + "; ".join(problems))

    # ------------------------------------------------------------------ validation
    def problems(self) -> list[str]:
        """Everything wrong with the type/parameters, as messages (empty when valid)."""
        p = self.params
        if self.type not in DISTRIBUTION_PARAMS:
            return [f"unknown type {self.type!r} (known: {', '.join(DISTRIBUTION_PARAMS)})"]
        out = [f"missing parameter {k!r}" for k in DISTRIBUTION_PARAMS[self.type] if k not in p]
        if out:
            return out
        num = ("value", "min", "max", "mean", "std", "mu", "sigma")
        for k in num:
            if k in p and (not isinstance(p[k], (int, float)) or isinstance(p[k], bool) or not math.isfinite(p[k])):
                out.append(f"parameter {k!r} must be a finite number, got {p[k]!r}")
        if out:
            return out
        if self.type == "fixed" and p["value"] < 1:
            out.append("value must be >= 1")
        if "min" in p and "max" in p and p["min"] > p["max"]:
            out.append(f"min {p['min']} > max {p['max']}")
        if "min" in p and p["min"] < 0:
            out.append("min must be >= 0")
        if self.type in ("normal",) and p["std"] < 0:
            out.append("std must be >= 0")
        if self.type == "lognormal" and p["sigma"] < 0:
            out.append("sigma must be >= 0")
        if self.type == "empirical":
            out.extend(self._empirical_problems())
        if self.type == "quantile-lognormal":
            q = p["quantiles"]
            if not isinstance(q, dict) or 0.5 not in {float(k) for k in q} or len(q) < 2:
                out.append("quantiles must map 0.5 and at least one upper quantile to lengths")
            elif any(float(k) not in _Z for k in q):
                out.append(f"quantiles must be among {sorted(_Z)}")
        return out

    def _empirical_problems(self) -> list[str]:
        p = self.params
        if "values" in p:
            v = p["values"]
            if not isinstance(v, (list, tuple)) or not v or not all(isinstance(x, (int, float)) for x in v):
                return ["empirical 'values' must be a non-empty list of numbers"]
            return []
        if "histogram" in p:
            h = p["histogram"]
            if not isinstance(h, dict) or "edges" not in h or "weights" not in h:
                return ["empirical 'histogram' needs 'edges' and 'weights'"]
            e, w = h["edges"], h["weights"]
            if len(e) != len(w) + 1 or len(w) < 1:
                return ["histogram needs len(edges) == len(weights) + 1"]
            if any(b <= a for a, b in zip(e, e[1:])) or any(x < 0 for x in w) or sum(w) <= 0:
                return ["histogram edges must increase and weights be >= 0 with a positive sum"]
            return []
        if isinstance(p.get("values_summary"), dict):  # a reported (summarized) sample: not samplable
            return []
        return ["empirical distribution needs 'values' or 'histogram'"]

    # ------------------------------------------------------------------ sampling
    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` integer lengths (int64), rounded then clipped to ``[min, max]`` (floor >= 1)."""
        p = self.params
        t = self.type
        if t == "fixed":
            x = np.full(n, float(p["value"]))
        elif t == "uniform":
            x = rng.integers(int(math.ceil(p["min"])), int(math.floor(p["max"])) + 1, size=n).astype(float)
        elif t == "normal":
            x = rng.normal(p["mean"], p["std"], size=n)
        elif t == "lognormal":
            x = rng.lognormal(p["mu"], p["sigma"], size=n)
        elif t == "quantile-lognormal":
            x = self._quantile_lognormal(rng, n)
        elif "values" in p:
            x = rng.choice(np.asarray(p["values"], dtype=float), size=n, replace=True)
        elif "histogram" in p:
            h = p["histogram"]
            w = np.asarray(h["weights"], dtype=float)
            edges = np.asarray(h["edges"], dtype=float)
            b = rng.choice(len(w), size=n, p=w / w.sum())
            x = rng.uniform(edges[b], edges[b + 1])
        else:
            raise WorkloadError("a summarized empirical distribution (values_summary) cannot be sampled")
        lo = p.get("min", 1)
        hi = p.get("max", np.inf)
        return np.clip(np.rint(x), max(lo, 1), hi).astype(np.int64)

    def _quantile_lognormal(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """exp of a piecewise-linear function of a standard normal z through the given quantiles.

        Between known quantiles the log-length is linear in z (a log-normal piece); below the
        median and above the last quantile the nearest segment's slope continues, so the given
        quantiles are reproduced exactly.
        """
        q = sorted((float(k), float(v)) for k, v in self.params["quantiles"].items())
        zs = np.array([_Z[k] for k, _ in q])
        ls = np.log([v for _, v in q])
        z = rng.standard_normal(n)
        slopes = np.diff(ls) / np.diff(zs)
        y = np.interp(z, zs, ls)
        y = np.where(z < zs[0], ls[0] + slopes[0] * (z - zs[0]), y)
        y = np.where(z > zs[-1], ls[-1] + slopes[-1] * (z - zs[-1]), y)
        return np.exp(y)

    # ------------------------------------------------------------------ reporting
    def mean_estimate(self) -> float | None:
        """The nominal mean where it has a closed form (before rounding, floor and cap)."""
        p = self.params
        if self.type == "fixed":
            return float(p["value"])
        if self.type == "uniform":
            return (p["min"] + p["max"]) / 2
        if self.type == "normal":
            return float(p["mean"])
        if self.type == "lognormal":
            return math.exp(p["mu"] + p["sigma"] ** 2 / 2)
        if self.type == "empirical" and "values" in p:
            return float(np.mean(p["values"]))
        return None

    def to_json(self) -> dict[str, Any]:
        params = dict(self.params)
        if self.type == "empirical" and "values" in params and len(params["values"]) > 64:
            v = np.asarray(params["values"], dtype=float)
            params = {k: x for k, x in params.items() if k != "values"}
            params["values_summary"] = {
                "count": int(v.size),
                "mean": float(v.mean()),
                **{f"p{q}": float(np.percentile(v, q)) for q in (1, 50, 95, 99)},
                "min": float(v.min()),
                "max": float(v.max()),
            }
        if self.type == "quantile-lognormal":
            params["quantiles"] = {str(k): v for k, v in params["quantiles"].items()}
        d: dict[str, Any] = {"type": self.type, "params": params, "unit": self.unit, "tokenizer": self.tokenizer}
        if self.note:
            d["note"] = self.note
        return d
