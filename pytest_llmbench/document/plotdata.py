"""Plot data: what procedures put in ``ProcedureResult.plots`` and its report form.

Procedures write plain JSON under these keys (docs/reports.md, "Plot data"):

=====================  ===========================================================================
key                    value
=====================  ===========================================================================
``<name>_samples_s``   list of samples in seconds, e.g. ``ttft_samples_s`` (histogram + CDF,
                       §5.1.5.4), ``itl_samples_s`` (ITL CDF, §5.4.5), ``e2e_samples_s``
``curve``              ``{"offered": [...], "achieved_tps": [...], "ttft_p99_s": [...],
                       "knee_index": i|None, "saturation_index": j|None, "offered_unit": "req/s"}``
                       (§5.3.4; any other equal-length list, e.g. ``tpot_p99_s``, is kept)
``search``             ``[{"level": x, "passed": bool, "value": y, "label": "..."}, ...]`` or
                       ``{"steps": [...], "level_label": "...", "value_label": "..."}`` (§5.2, §5.5)
``scaling``            ``{"length": [...], "ttft_s": [...], "fit": {"k": .., "c": .., "r2": ..}}``,
                       TTFT = c·L^k (§5.9.4); the fit is computed here when absent
``classes``            ``{"short": {"ttft_p50_s": .., "ttft_p99_s": ..}, "long": {...}}`` (§5.6)
``configs``            ``{"cache off": {"ttft_p50_s": .., ...}, ...}`` (§5.7, §5.10)
=====================  ===========================================================================

:func:`run_overlays` adds, from the runs themselves, one ``cdfs_<metric>`` entry per metric a
procedure declares it compares across runs (``ProcedureResult.overlays``: the series, each a run
or one request class of a run, in the procedure's words): e.g. a CDF per load level (§5.4.5 ITL),
per request class (§5.6.4), per configuration (§5.7.4, §5.10.4). :func:`server_plots` adds the server's
own telemetry (runs[].telemetry, measure/telemetry.py): ``server_timeline`` (running, waiting, KV usage,
preemptions per second beside the client's in-flight count, on the run's clock) and, for a procedure
that declares its levels (``ProcedureResult.server_view``), ``server_levels``. :func:`configuration_differences`
gives the percentile differences the procedure declares against its first series with a bootstrap
CI (measure.stats.significance.percentile_change), so a difference whose interval includes 0 reads "within
noise". Nothing here knows a procedure.

:func:`normalise` turns that into the report form stored in ``results.json``: sample arrays
become ``{"kind": "samples", "n", "stats" (exact quantiles of *all* samples), "histogram" (exact
bin counts), "cdf" (at most :data:`CDF_POINTS` exact order statistics)}`` so large runs stay
small; the other kinds are checked and kept. When a procedure gives no TTFT/ITL samples but has
metrics, they are taken from the primary run's distributions. Bad plot data never breaks a
report: the plot is left out and a note says why.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["CDF_POINTS", "PlotDataError", "configuration_differences", "derived_plots", "normalise", "run_overlays",
           "samples_summary", "server_plots"]

#: Order statistics kept per sample set for the CDF (min and max always included).
CDF_POINTS = 400
MAX_BINS = 50
MIN_BINS = 5
QUANTILES = (50.0, 90.0, 95.0, 99.0, 99.9)


class PlotDataError(ValueError):
    """Plot data that does not follow the convention (names the key and the problem)."""


def _num(v: Any, where: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise PlotDataError(f"{where}: expected a number, got {v!r}")
    f = float(v)
    return f if math.isfinite(f) else None


def _nums(v: Any, where: str) -> list[float | None]:
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if not isinstance(v, (list, tuple)):
        raise PlotDataError(f"{where}: expected a list of numbers, got {type(v).__name__}")
    return [_num(x, f"{where}[{i}]") for i, x in enumerate(v)]


def _index(v: Any, n: int, where: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= int(v) < n:
        raise PlotDataError(f"{where}: expected an index in 0..{n - 1} or null, got {v!r}")
    return int(v)


def samples_summary(samples: Any, name: str, *, source: str = "procedure") -> dict[str, Any]:
    """Exact quantiles, an exact histogram and a thinned CDF of ``samples`` (seconds).

    Compact sorted samples (:class:`~..measure.stats.SortedSamples`, a long run's pooled ITL) are
    read where they are: quantiles and the CDF by index, the histogram by counting the samples below
    each edge, so the figures are numpy's without a float64 copy of the whole set (issue 30)."""
    from ..measure.stats import SortedSamples

    x = samples if isinstance(samples, SortedSamples) else _sorted_finite(samples)
    n = int(x.size)
    if n == 0:
        raise PlotDataError(f"{name}: no finite samples")
    stats = _stats(x)
    bins = int(min(MAX_BINS, max(MIN_BINS, math.ceil(2.0 * n ** (1.0 / 3.0)))))
    lo, hi = float(x[0]), float(x[-1])
    if hi == lo:
        pad = abs(lo) * 0.05 or 1e-3
        lo, hi, bins = lo - pad, hi + pad, 1
    counts, edges = _histogram_sorted(x, bins, lo, hi)
    return {
        "kind": "samples",
        "name": name,
        "unit": "s",
        "n": n,
        "source": source,
        "stats": stats,
        "histogram": {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]},
        "cdf": _cdf(x),
    }


def _sorted_finite(samples: Any) -> np.ndarray:
    x = np.asarray(samples, dtype=np.float64).ravel()
    return np.sort(x[np.isfinite(x)])


def _histogram_sorted(x: Any, bins: int, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """``np.histogram(x, bins, range=(lo, hi))`` of sorted samples inside the range: bin ``i`` counts
    ``edges[i] <= x < edges[i+1]``, the last bin its right edge too (numpy's rule), from the number of
    samples below each inner edge."""
    edges = np.histogram_bin_edges(np.empty(0), bins=bins, range=(lo, hi))
    inner = edges[1:-1]
    below = x.searchsorted(inner)  # an ndarray's method, or SortedSamples' (side "left" for both)
    return np.diff(np.concatenate(([0], below, [x.size]))), edges


def _stats(x: Any, quantiles: tuple[float, ...] = QUANTILES) -> dict[str, float]:
    """min, the ``quantiles`` (linear rule, numpy's bit for bit), max and mean of sorted finite samples."""
    from ..measure.stats import numpy_percentiles_sorted

    qs = numpy_percentiles_sorted(x, quantiles)
    return {"min": float(x[0]), **{f"p{q:g}": float(v) for q, v in zip(quantiles, qs)},
            "max": float(x[-1]), "mean": float(x.mean())}


def _cdf(x: np.ndarray) -> dict[str, list[float]]:
    """At most :data:`CDF_POINTS` exact order statistics of sorted samples, first and last included."""
    n = int(x.size)
    idx = np.unique(np.round(np.linspace(0, n - 1, min(n, CDF_POINTS))).astype(np.int64))
    return {"x": [float(v) for v in x[idx]], "p": [float((i + 1) / n) for i in idx]}


def _curve(v: Any) -> dict[str, Any]:
    if not isinstance(v, Mapping):
        raise PlotDataError("curve: expected an object with offered, achieved_tps, ttft_p99_s")
    out: dict[str, Any] = {"kind": "curve"}
    for key in ("offered", "achieved_tps", "ttft_p99_s"):
        if key not in v:
            raise PlotDataError(f"curve: missing {key!r}")
        out[key] = _nums(v[key], f"curve.{key}")
    n = len(out["offered"])
    if n == 0:
        raise PlotDataError("curve: no load levels")
    for key, val in v.items():
        if key in out or key in ("knee_index", "saturation_index"):
            continue
        if isinstance(val, (list, tuple, np.ndarray)):
            out[key] = _nums(val, f"curve.{key}")
        elif isinstance(val, (str, int, float)) or val is None:
            out[key] = val
    for key, val in out.items():
        if isinstance(val, list) and len(val) != n:
            raise PlotDataError(f"curve: {key} has {len(val)} entries, offered has {n}")
    out["knee_index"] = _index(v.get("knee_index"), n, "curve.knee_index")
    out["saturation_index"] = _index(v.get("saturation_index"), n, "curve.saturation_index")
    out.setdefault("offered_unit", "req/s")
    return out


def _search(v: Any) -> dict[str, Any]:
    meta: Mapping[str, Any] = {}
    steps = v
    if isinstance(v, Mapping):
        meta, steps = v, v.get("steps")
    if not isinstance(steps, (list, tuple)) or not steps:
        raise PlotDataError("search: expected a non-empty list of {level, passed, value} steps")
    out_steps = []
    for i, s in enumerate(steps):
        if not isinstance(s, Mapping) or "level" not in s or "passed" not in s:
            raise PlotDataError(f"search[{i}]: each step needs 'level' and 'passed'")
        level = _num(s["level"], f"search[{i}].level")
        if level is None:
            raise PlotDataError(f"search[{i}].level: must be finite")
        step: dict[str, Any] = {"level": level, "passed": bool(s["passed"]),
                                "value": _num(s.get("value"), f"search[{i}].value")}
        if s.get("label") is not None:
            step["label"] = str(s["label"])
        out_steps.append(step)
    return {"kind": "search", "steps": out_steps,
            "level_label": str(meta.get("level_label", "load level")),
            "value_label": str(meta.get("value_label", "value"))}


def _scaling(v: Any) -> dict[str, Any]:
    if not isinstance(v, Mapping) or "length" not in v or "ttft_s" not in v:
        raise PlotDataError("scaling: expected {'length': [...], 'ttft_s': [...], 'fit': {...}}")
    length, ttft = _nums(v["length"], "scaling.length"), _nums(v["ttft_s"], "scaling.ttft_s")
    if len(length) != len(ttft) or not length:
        raise PlotDataError(f"scaling: length has {len(length)} entries, ttft_s has {len(ttft)}")
    fit = v.get("fit")
    out_fit: dict[str, Any] | None = None
    if isinstance(fit, Mapping):
        out_fit = {k: _num(fit.get(k), f"scaling.fit.{k}") for k in ("k", "c", "r2")}
        out_fit["source"] = "procedure"
    elif fit is None:
        pairs = [(a, b) for a, b in zip(length, ttft) if a and b and a > 0 and b > 0]
        if len({a for a, _ in pairs}) >= 2:
            from ..measure.stats import scaling_fit

            f = scaling_fit([a for a, _ in pairs], [b for _, b in pairs])
            out_fit = {"k": f.exponent, "c": f.power_coefficient, "r2": f.r2_loglog,
                       "source": "least squares on log-log, computed for the document (stats.scaling_fit)"}
    else:
        raise PlotDataError("scaling.fit: expected {'k', 'c', 'r2'} or null")
    return {"kind": "scaling", "length": length, "ttft_s": ttft, "fit": out_fit}


def _groups(key: str, v: Any) -> dict[str, Any]:
    if not isinstance(v, Mapping) or not v:
        raise PlotDataError(f"{key}: expected {{name: {{metric: value}}}}")
    groups: dict[str, dict[str, float | None]] = {}
    for name, metrics in v.items():
        if not isinstance(metrics, Mapping):
            raise PlotDataError(f"{key}.{name}: expected {{metric: value}}")
        groups[str(name)] = {str(m): _num(x, f"{key}.{name}.{m}") for m, x in metrics.items()
                             if not isinstance(x, (str, Mapping, list, tuple))}
    return {"kind": "groups", "groups": groups}


def _plain(v: Any) -> Any:
    """JSON-ready copy of an unknown plot entry (numpy arrays become lists, NaN null)."""
    if isinstance(v, np.ndarray):
        v = v.tolist()
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        f = float(v)
        return f if math.isfinite(f) else None
    if isinstance(v, (str, int, bool)) or v is None:
        return v
    return str(v)


def normalise(raw: Mapping[str, Any] | None, metrics: Any = None) -> tuple[dict[str, Any], list[str]]:
    """Report form of a procedure's plot data (see the module docstring) and notes on problems."""
    raw = dict(raw or {})
    out: dict[str, Any] = {}
    notes: list[str] = []
    # TTFT / ITL from the primary run's metrics when the procedure gave none
    dists = getattr(metrics, "distributions", None) or {}
    for key, dist_name in (("ttft_samples_s", "ttft"), ("itl_samples_s", "itl")):
        if key in raw:
            continue
        d = dists.get(dist_name)
        samples = getattr(d, "samples", None)
        if samples is not None and len(samples):
            try:
                out[key] = samples_summary(samples, getattr(d, "name", dist_name), source="primary run metrics")
            except PlotDataError as exc:  # pragma: no cover - finite samples checked above
                notes.append(f"plot {key!r} not drawn: {exc}")
    for key in sorted(raw):
        value = raw[key]
        try:
            if key.endswith("_samples_s"):
                vals = value if isinstance(value, np.ndarray) else \
                    [math.nan if v is None else v for v in _nums(value, key)]
                out[key] = samples_summary(vals, key[: -len("_samples_s")])
            elif key == "curve":
                out[key] = _curve(value)
            elif key == "search":
                out[key] = _search(value)
            elif key == "scaling":
                out[key] = _scaling(value)
            elif key in ("classes", "configs"):
                out[key] = _groups(key, value)
            else:
                out[key] = {"kind": "other", "value": _plain(value)}
        except PlotDataError as exc:
            notes.append(f"plot {key!r} not drawn: {exc}")
    return out, notes


# --------------------------------------------------------------------------------------------
# overlaid CDFs and configuration differences, from the runs of a procedure
# --------------------------------------------------------------------------------------------

#: Quantiles kept per overlaid series (P1 lets the report choose a log axis).
SERIES_QUANTILES = (1.0, 50.0, 90.0, 99.0, 99.9)
DIFF_CONFIDENCE = 0.95


def _dist_samples(metrics: Any, name: str) -> np.ndarray:
    d = (getattr(metrics, "distributions", None) or {}).get(name)
    samples = getattr(d, "samples", None)
    return _sorted_finite(samples) if samples is not None else np.empty(0)


def _class_samples(metrics: Any, name: str, cls: str) -> np.ndarray:
    """``name`` of the successful requests of class ``cls`` in a mixed run (§5.6)."""
    pr = getattr(metrics, "per_request", None)
    try:
        vals, classes, ok = pr[name], pr["request_class"], pr["ok"]
    except (KeyError, TypeError):
        return np.empty(0)
    keep = np.asarray(ok, dtype=bool) & np.asarray([str(c) == cls for c in classes], dtype=bool)
    return _sorted_finite(np.asarray(vals, dtype=float)[keep])


#: A series: (label, colour group, dashed, samples getter by metric name)
_Series = tuple[str, int, bool, Any]


def _result_series(result: Any) -> list[_Series]:
    """The series a procedure result declares (``result.overlays``, base.Overlays), each a memoised
    getter of its run's samples (or of one request class of it): the overlays and the differences
    read the same samples, extracted and sorted once. A series whose run is not reported is left out."""
    spec = getattr(result, "overlays", None)
    if spec is None:
        return []
    runs: dict[str, Any] = {}
    for r in getattr(result, "runs", None) or []:
        runs.setdefault(r.label, r)
    out: list[_Series] = []
    for s in spec.series:
        run = runs.get(s.run)
        if run is None:
            continue
        if s.request_class is not None:
            def get(m: str, run: Any = run, cls: str = s.request_class) -> np.ndarray:
                return _class_samples(run.metrics, m, cls)
        else:
            def get(m: str, run: Any = run) -> np.ndarray:
                return _dist_samples(run.metrics, m)
        out.append((s.label, s.group, s.dashed, functools.cache(get)))
    return out


def run_overlays(result: Any, series: list[_Series] | None = None) -> dict[str, dict[str, Any]]:
    """``cdfs_<metric>`` plot entries: one empirical CDF per run the procedure declares it compares
    (``result.overlays``); nothing when fewer than two runs have samples."""
    from ..measure.registry import METRICS

    spec = getattr(result, "overlays", None)
    if spec is None:
        return {}
    by, metrics, section = spec.by, spec.metrics, spec.section
    series = series if series is not None else _result_series(result)
    out: dict[str, dict[str, Any]] = {}
    for metric in metrics:
        entries = []
        for label, group, dashed, get in series:
            x = get(metric)
            if x.size:
                entries.append({"label": label, "group": group, "dashed": dashed, "n": int(x.size),
                                "stats": _stats(x, SERIES_QUANTILES), "cdf": _cdf(x)})
        if len(entries) >= 2:
            m = METRICS[metric]
            out[f"cdfs_{metric}"] = {"kind": "cdfs", "metric": metric, "title": m.title, "unit": m.unit,
                                     "section": section, "definition": m.section, "by": by, "series": entries}
    return out


def configuration_differences(result: Any, series: list[_Series] | None = None) -> dict[str, Any] | None:
    """The percentile differences a procedure declares (``result.overlays.differences``, e.g. §5.7 cache
    on − off, §5.10 guardrails on − off) against its first series, each with a bootstrap CI
    (measure.stats.significance.percentile_change); ``within_noise`` when the interval includes 0. None when it
    declares none or without a baseline's samples."""
    from ..measure.stats import required_samples
    from ..measure.stats.significance import BOOTSTRAP_RESAMPLES, DEFAULT_SEED, percentile_change

    spec = getattr(getattr(result, "overlays", None), "differences", None)
    if not spec:
        return None
    series = series if series is not None else _result_series(result)
    if len(series) < 2:
        return None
    base_label, _, _, base_get = series[0]
    rows: list[dict[str, Any]] = []
    for metric, pcts in spec:  # (metric, percentiles)
        xb = base_get(metric)
        for label, _, _, get in series[1:]:
            xn = get(metric)
            if not (xb.size and xn.size):
                continue
            for p in pcts:
                ch = percentile_change(xb, xn, p, confidence=DIFF_CONFIDENCE)
                lo, hi = ch.diff_ci
                rows.append({"series": label, "baseline": base_label, "metric": metric, "statistic": f"p{p:g}",
                             "unit": "s", "baseline_value": ch.baseline, "value": ch.new, "diff": ch.diff,
                             "ci_low": lo, "ci_high": hi, "n_baseline": ch.n_baseline, "n": ch.n_new,
                             "p_value": ch.p_value, "within_noise": bool(lo <= 0.0 <= hi),
                             "undersampled": bool(min(ch.n_baseline, ch.n_new) < required_samples(p))})
    if not rows:
        return None
    method = (f"percentile bootstrap of the difference of the two sample percentiles ({BOOTSTRAP_RESAMPLES} "
              f"resamples per side, seed {DEFAULT_SEED}; measure.stats.significance.percentile_change)")
    return {"kind": "differences", "baseline": base_label, "confidence": DIFF_CONFIDENCE, "method": method,
            "rows": rows}


def derived_plots(result: Any) -> tuple[dict[str, Any], list[str]]:
    """:func:`run_overlays` and :func:`configuration_differences` of a procedure result; a failure
    leaves them out with a note instead of losing the report."""
    out: dict[str, Any] = {}
    notes: list[str] = []
    try:
        series = _result_series(result) if getattr(result, "overlays", None) is not None else None
        out.update(run_overlays(result, series))
        diff = configuration_differences(result, series)
        if diff is not None:
            out["differences"] = diff
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        notes.append(f"overlaid CDFs / configuration differences not drawn: {exc}")
    try:
        server, server_notes = server_plots(result)
        out.update(server)
        notes.extend(server_notes)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        notes.append(f"server telemetry not drawn: {exc}")
    return out, notes


# --------------------------------------------------------------------------------------------
# the server's own telemetry (measure/telemetry.py): time series and per-level views
# --------------------------------------------------------------------------------------------

#: Points kept per drawn time series: longer runs are bucketed (gauges: the bucket's largest value,
#: so peaks stay visible; counters: their rate over the bucket).
TIMELINE_POINTS = 400
#: Gauge roles drawn as request counts, in drawing order, with their labels.
_REQUEST_ROLES = (("running", "server running"), ("waiting", "server waiting"))


def _buckets(n: int) -> list[tuple[int, int]]:
    """[start, end) index ranges cutting ``n`` points into at most :data:`TIMELINE_POINTS` buckets."""
    k = max(1, math.ceil(n / TIMELINE_POINTS))
    return [(i, min(i + k, n)) for i in range(0, n, k)]


def _bucket_max(vals: list[Any], spans: list[tuple[int, int]]) -> list[float | None]:
    out: list[float | None] = []
    for a, b in spans:
        got = [float(v) for v in vals[a:b] if v is not None]
        out.append(max(got) if got else None)
    return out


def _bucket_rates(t: list[float], vals: list[Any], spans: list[tuple[int, int]]) -> list[float | None]:
    """A counter's rate per second over each bucket, from the reading before it to its last (reset-aware)."""
    out: list[float | None] = []
    for a, b in spans:
        lo = max(a - 1, 0)
        pts = [(t[i], float(vals[i])) for i in range(lo, b) if vals[i] is not None]
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            out.append(None)
            continue
        inc = math.fsum(v1 - v0 if v1 >= v0 else v1 for (_, v0), (_, v1) in zip(pts, pts[1:]))
        out.append(inc / (pts[-1][0] - pts[0][0]))
    return out


def _timeline(label: str, tel: Mapping[str, Any], section: str) -> dict[str, Any]:
    """A run's server series on the run's clock, with the client's in-flight count (kind ``timeline``)."""
    t = [float(x) for x in tel.get("t_s") or []]
    vals = tel.get("values") or {}
    spans = _buckets(len(t))
    requests: dict[str, list[float | None]] = {}
    if tel.get("client_in_flight"):
        requests["client in flight"] = _bucket_max(list(tel["client_in_flight"]), spans)
    for role, name in _REQUEST_ROLES:
        if role in vals:
            requests[name] = _bucket_max(list(vals[role]), spans)
    return {"kind": "timeline", "run": label, "section": section, "interval_s": tel.get("interval_s"),
            "t_s": [t[b - 1] for _, b in spans], "bucket": spans[0][1] - spans[0][0] if spans else 1,
            "requests": requests,
            "kv_usage": _bucket_max(list(vals["kv_usage"]), spans) if "kv_usage" in vals else None,
            "preemptions_per_s": _bucket_rates(t, list(vals["preemptions"]), spans) if "preemptions" in vals else None,
            "names": dict(tel.get("names") or {}), "scrapes": len(t), "failed": tel.get("failed", 0)}


def _level_row(tel: Mapping[str, Any]) -> dict[str, float | None]:
    """One level's server figures: peak waiting, mean running, peak KV usage, preemption events."""
    from ..measure.telemetry import TelemetrySeries

    s = TelemetrySeries.from_json(tel)
    kv = s.peak("kv_usage")
    return {"peak waiting": s.peak("waiting"), "mean running": s.mean("running"),
            "peak KV usage (%)": None if kv is None else kv * 100.0, "preemption events": s.increase("preemptions")}


def server_plots(result: Any) -> tuple[dict[str, Any], list[str]]:
    """The server's telemetry as plot entries: ``server_timeline[_<i>]`` per run the procedure shows on
    a time axis (``result.server_view``, base.ServerView; without one the primary run's), and
    ``server_levels`` for its levels; a note for runs whose server exposed no series ("not exposed")."""
    runs: dict[str, Any] = {}
    for r in getattr(result, "runs", None) or []:
        runs.setdefault(r.label, r)
    view = getattr(result, "server_view", None)
    primary = result.primary_summary() if hasattr(result, "primary_summary") else None
    shown = list(view.runs) if view is not None else ([primary.label] if primary is not None else [])
    section = view.section if view is not None else ""
    out: dict[str, Any] = {}
    notes: list[str] = []
    unexposed = sorted({f"{(r.telemetry or {}).get('status')}"
                        + (f": {(r.telemetry or {}).get('detail')}" if (r.telemetry or {}).get("detail") else "")
                        for r in runs.values() if getattr(r, "telemetry", None)
                        and r.telemetry.get("status") not in ("sampled", "off")})
    if unexposed:
        notes.append("server telemetry " + "; ".join(unexposed) + " (no server series; client figures only)")
    timelines = [(lab, runs[lab].telemetry) for lab in shown
                 if lab in runs and (getattr(runs[lab], "telemetry", None) or {}).get("status") == "sampled"]
    for i, (lab, tel) in enumerate(timelines):
        if tel.get("t_s"):
            out["server_timeline" if i == 0 else f"server_timeline_{i}"] = _timeline(lab, tel, section)
    levels = [(name, runs[lab].telemetry) for name, lab in (view.levels if view is not None else [])
              if lab in runs and (getattr(runs[lab], "telemetry", None) or {}).get("status") == "sampled"]
    if len(levels) >= 2:
        rows = {name: _level_row(tel) for name, tel in levels}
        names = {k: v for _, tel in levels for k, v in (tel.get("names") or {}).items()}
        out["server_levels"] = {"kind": "server_levels", "by": view.by, "section": section,  # type: ignore[union-attr]
                                "levels": [n for n, _ in levels], "rows": rows, "names": names}
    return out, notes
