"""Rebuild the stored-run fixtures from real smoke 5.1 report directories (trimmed to stay small).

    pytest suites/test_5_1_ttft.py --llm-capacity rate=20 --llm-time-scale 0.25 --llm-report R1
    (again into R2), then --llm-time-scale 0.30 --llm-report R3
    python tests/data/gate/make_fixtures.py R1 R2 R3
"""

import shutil
import sys
from pathlib import Path

from pytest_llmbench.gate.storage import StoredRun, collect_samples, save

KEEP_DIST = ("ttft", "tpot", "e2e")
HERE = Path(__file__).parent / "store"


def _trim_metrics(m):
    return {"itl_option": m.get("itl_option"),
            "distributions": {k: v for k, v in (m.get("distributions") or {}).items() if k in KEEP_DIST},
            "scalars": m.get("scalars")}


def trim(doc):
    out = {k: doc[k] for k in ("schema_version", "tool", "started", "finished", "duration_s", "settings", "sut",
                               "declarations", "tests")}
    out["procedures"] = []
    for p in doc["procedures"]:
        r = p["result"]
        facts = r.get("facts") or {}
        out["procedures"].append({
            **{k: p[k] for k in ("key", "procedure", "title", "profile", "tests", "configuration", "run_dirs", "figures")},
            "result": {"params": r["params"], "facts": {"load": facts.get("load")},
                       "metrics": _trim_metrics(r["metrics"]),
                       "runs": [{"label": x["label"], "run_dir": x["run_dir"], "metrics": _trim_metrics(x["metrics"])}
                                for x in r["runs"]]}})
    return out


if __name__ == "__main__":
    shutil.rmtree(HERE, ignore_errors=True)
    for rep, name in zip(sys.argv[1:], ("base", "rerun", "slow")):
        doc = StoredRun(Path(rep), {}).document
        samples = {k: v for k, v in collect_samples(doc, rep).items() if k[2] in KEEP_DIST}
        save(trim(doc), HERE, name=name, samples=samples, commit="fixture")
