"""Workload generation speed (prints figures; no assertions). Run: python bench/workloads.py"""

from __future__ import annotations

import time

from pytest_llmbench.common.tokenizer import get_tokenizer
from pytest_llmbench.workloads import build_workload, text_factory


def timed(label: str, fn) -> None:
    t = time.perf_counter()
    wl = fn()
    dt = time.perf_counter() - t
    toks = sum(s.input_tokens for s in wl.specs)
    mism = wl.declaration.retokenization["mismatched"] if wl.declaration.retokenization else "n/a"
    print(f"{label:<44} {dt:7.2f} s  {len(wl):6d} specs  {toks / dt / 1e6:5.2f} M prompt tok/s  mismatched={mism}")


if __name__ == "__main__":
    t = time.perf_counter()
    text_factory(get_tokenizer())
    print(f"{'word pool (once per tokenizer)':<44} {time.perf_counter() - t:7.2f} s")
    timed("synthetic-uniform n=10000", lambda: build_workload("synthetic-uniform", n=10000, seed=1))
    timed("synthetic-skewed n=10000", lambda: build_workload("synthetic-skewed", n=10000, seed=1))
    timed("conversation (stand-in) n=5000", lambda: build_workload("conversation", n=5000, seed=1))
    timed("code-completion n=2000", lambda: build_workload("code-completion", n=2000, seed=1))
    timed("long-context 20 x 32K", lambda: build_workload("long-context", n=20, seed=1, lengths=[32768]))
    timed("long-context 4 x 128K", lambda: build_workload("long-context", n=4, seed=1, lengths=[131072]))
