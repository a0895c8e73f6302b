"""One conversion of the package's objects to plain JSON values (App. C: ``results.json``).

Every ``to_json`` that holds free-form values (a check's evidence, run facts, a workload spec) and the
results document itself convert them here, so a value reads the same wherever it is written.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["jsonable"]


def jsonable(x: Any) -> Any:
    """A JSON-ready copy: objects with ``to_json``, dataclasses, numpy values, enums, paths (as text); NaN -> null."""
    if hasattr(x, "to_json") and callable(x.to_json) and not isinstance(x, type):
        return jsonable(x.to_json())
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return jsonable(dataclasses.asdict(x))
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in x]
    if isinstance(x, enum.Enum):
        return jsonable(x.value)
    if isinstance(x, bool) or x is None or isinstance(x, str):
        return x
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    try:
        import numpy as np

        if isinstance(x, np.ndarray):
            return jsonable(x.tolist())
        if isinstance(x, np.generic):
            return jsonable(x.item())
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    return str(x)  # a path, or anything else: its text
