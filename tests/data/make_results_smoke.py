"""Regenerate ``results-smoke.json.gz`` from the ``results.json`` of ``pytest suites`` (smoke profile,
embedded simulator): ``python tests/data/make_results_smoke.py llmbench-report/results.json``.

Each run's metrics keep only what the report renders per run (``itl_option``, the TTFT/E2E/TPOT
distributions' summaries, scalars, errors), which keeps the file small; the procedure-level metrics,
plot data (overlaid CDFs and differences included) and everything else stay as written.
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

RUN_DISTRIBUTIONS = ("ttft", "e2e", "tpot")
DIST_KEYS = ("name", "unit", "n", "mean", "percentiles")


def trim(doc: dict[str, Any]) -> dict[str, Any]:
    for p in doc["procedures"]:
        for r in p["result"].get("runs") or []:
            m = r.get("metrics") or {}
            dists = m.get("distributions") or {}
            r["metrics"] = {"itl_option": m.get("itl_option"),
                            "distributions": {k: {f: dists[k][f] for f in DIST_KEYS if f in dists[k]}
                                              for k in RUN_DISTRIBUTIONS if k in dists},
                            "scalars": m.get("scalars") or {}, "errors_by_type": m.get("errors_by_type") or {}}
    return doc


def main(src: str) -> None:
    doc = trim(json.loads(Path(src).read_text(encoding="utf-8")))
    out = Path(__file__).with_name("results-smoke.json.gz")
    out.write_bytes(gzip.compress(json.dumps(doc, ensure_ascii=False).encode("utf-8"), mtime=0))


if __name__ == "__main__":
    main(sys.argv[1])
