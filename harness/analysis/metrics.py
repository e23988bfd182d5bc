"""Metrics as functions of the per-request frame (and the time-series frame), units declared once.

A request *completed* when it has no error and a finite finish time; everything else *failed*,
except a request still in flight when a live/url run was stopped (`interrupted`): it counts in
`n_requests` and `interrupted`, never in `failed` nor SLO attainment (the target did not fail it).
Failed requests count in `n_requests`, `failed` and against SLO attainment, never in latency
statistics. Percentiles use numpy's linear interpolation (the convention of `vllm bench serve`).

Time-series statistics of the whole run (egress, link and stage utilisation) cover the run span
(`run_span`: first arrival .. last finish of a completed request), not every bin of the series: a
`harness-serve` series covers the server's uptime, idle before and after its load. A bin counts
when its start lies in the span, the rule of the steady-window versions, so about one bin per bin
width of span counts (the partial bin at the start is left out, the one at the end counted); a span
inside one bin, where no bin starts, is that bin.

The per-request frame may be a `ParquetColumns` (a long run's requests.parquet read a column at a
time): every function here reads columns by name, and the masks they share are computed once per
file (`memo`). The vLLM-named statistics and the per-chunk metrics are in vllm_metrics.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.analysis.columns import Frame, memo


@dataclass(frozen=True)
class Metric:
    unit: str
    display: str  # how reports print it
    doc: str


# The metric table: one entry per summary metric, so units and display names live in one place.
METRICS: dict[str, Metric] = {
    "n_requests": Metric("requests", "requests", "requests offered"),
    "completed": Metric("requests", "requests", "requests with no error and a finish time"),
    "failed": Metric("requests", "requests", "n_requests - completed - interrupted - abandoned"),
    "interrupted": Metric("requests", "requests", "requests in flight when the run was stopped (not failures)"),
    "throughput_rps": Metric("req/s", "req/s", "completed / duration_s"),
    "output_tokens_per_s": Metric("tok/s", "tok/s", "output tokens of completed requests / duration_s"),
    "total_tokens_per_s": Metric("tok/s", "tok/s", "input + output tokens of completed requests / duration_s"),
    "steady_throughput_rps": Metric("req/s", "req/s", "completions per second inside the steady window"),
    "steady_window_s": Metric("s", "s", "length of the steady window (0: too short, whole-run throughput used)"),
    "ttft_mean_s": Metric("s", "s", "mean time to first token"),
    "ttft_p50_s": Metric("s", "s", "median TTFT"),
    "ttft_p90_s": Metric("s", "s", "90th percentile TTFT"),
    "ttft_p99_s": Metric("s", "s", "99th percentile TTFT"),
    "tpot_mean_s": Metric("s", "ms", "mean time per output token after the first"),
    "tpot_p50_s": Metric("s", "ms", "median TPOT"),
    "tpot_p90_s": Metric("s", "ms", "90th percentile TPOT"),
    "tpot_p99_s": Metric("s", "ms", "99th percentile TPOT"),
    "e2e_mean_s": Metric("s", "s", "mean end-to-end latency"),
    "e2e_p50_s": Metric("s", "s", "median end-to-end latency"),
    "e2e_p90_s": Metric("s", "s", "90th percentile end-to-end latency"),
    "e2e_p99_s": Metric("s", "s", "99th percentile end-to-end latency"),
    "slo_attainment": Metric("fraction", "%", "share of all requests meeting both the TTFT and TPOT SLO"),
    "goodput_rps": Metric("req/s", "req/s", "completed requests meeting the SLO / duration_s"),
    "egress_gbps_mean": Metric("Gbps", "Gbps", "mean cross-DC egress over the run span (bins starting in it)"),
    "egress_gbps_p99": Metric("Gbps", "Gbps", "99th percentile of per-bin egress over the run span"),
    "steady_egress_gbps_mean": Metric("Gbps", "Gbps", "mean cross-DC egress inside the steady window"),
    "link_util_mean": Metric("fraction", "%", "mean of egress / link capacity per bin over the run span"),
    "link_util_p99": Metric("fraction", "%", "99th percentile of egress / link capacity per bin over the run span"),
    "offload_fraction": Metric("fraction", "%", "share of routed requests prefilled on the PrfaaS cluster"),
    "cache_hit_token_frac": Metric("fraction", "%", "sum cache_hit_tokens / sum input_tokens (pool KV hits)"),
    "cached_token_frac": Metric("fraction", "%", "sum cached_tokens / sum input_tokens (prefill skipped)"),
    "prefill_tokens_computed": Metric("tokens", "tokens", "sum of input_tokens - cached_tokens"),
    "kv_bytes_prfaas_total": Metric("bytes", "GB", "KV bytes moved cross-DC (route prfaas)"),
    "arrival_rps": Metric("req/s", "req/s", "measured arrival rate: (n - 1) / arrival span"),
    "duration_s": Metric("s", "s", "last finish - first arrival, in the deployment's clock"),
    "lateness_mean_s": Metric("s", "ms", "load generator: mean of sent - scheduled"),
    "lateness_p99_s": Metric("s", "ms", "load generator: P99 of sent - scheduled"),
    "lateness_max_s": Metric("s", "ms", "load generator: max of sent - scheduled"),
    "capacity_rps": Metric("req/s", "req/s", "max steady throughput over a deployment's load sweep"),
}

# Relative slack when comparing a latency with its SLO: a TPOT equal to the SLO up to float rounding
# (a decode step time set exactly to the SLO) is a hit, not a miss.
_SLO_RTOL = 1e-9


def _values(df: Frame, column: str) -> np.ndarray:
    if column not in df.columns:
        return np.full(len(df), np.nan)
    return df[column].to_numpy(dtype=float, na_value=np.nan)


def _counts(df: Frame, column: str) -> np.ndarray:
    """A token-count column: 0 where the frame has no such column (none counted), NaN where a row's
    count is unknown (null)."""
    if column not in df.columns:
        return np.zeros(len(df))
    return _values(df, column)


def _finite(values: np.ndarray) -> np.ndarray:
    return values[np.isfinite(values)]


def mean(values: np.ndarray) -> float:
    """Mean of the finite values; NaN (no warning) when there are none."""
    v = _finite(np.asarray(values, dtype=float))
    return float(v.mean()) if v.size else float("nan")


def percentile(values: np.ndarray, q: float) -> float:
    """Linear-interpolated percentile (0..100) of the finite values; NaN when there are none."""
    v = _finite(np.asarray(values, dtype=float))
    return float(np.percentile(v, q)) if v.size else float("nan")


def completed_mask(df: Frame) -> np.ndarray:
    """True for requests that completed: no error (null or '') and a finite finish time."""
    return memo(df, "completed_mask", lambda: _completed_mask(df))


def _completed_mask(df: Frame) -> np.ndarray:
    if "error" in df.columns:
        err = df["error"]
        no_error = (err.isna() | (err.astype("string").fillna("") == "")).to_numpy(dtype=bool)
    else:
        no_error = np.ones(len(df), dtype=bool)
    finish = _values(df, "finish_s")
    if "finish_s" not in df.columns:  # frames that carry only latencies: e2e stands in for finish
        finish = _values(df, "e2e_s")
    return no_error & np.isfinite(finish)


def n_completed(df: Frame) -> int:
    return int(completed_mask(df).sum())


def interrupted_mask(df: Frame) -> np.ndarray:
    """True for requests cut off by stopping the run (column `interrupted`; none when absent)."""
    if "interrupted" not in df.columns:
        return np.zeros(len(df), dtype=bool)
    return memo(df, "interrupted_mask",
                lambda: df["interrupted"].fillna(False).to_numpy(dtype=bool) & ~completed_mask(df))


def n_interrupted(df: Frame) -> int:
    return int(interrupted_mask(df).sum())


def run_span(df: Frame) -> tuple[float, float]:
    """(first arrival, last finish of a completed request): the run span (NaNs with no completion)."""
    done = completed_mask(df)
    if not done.any() or len(df) == 0:
        return float("nan"), float("nan")
    return float(_values(df, "arrival_s").min()), float(_values(df, "finish_s")[done].max())


def duration_s(df: Frame) -> float:
    """Run span: last finish of a completed request - first arrival (NaN with no completion)."""
    start, end = run_span(df)
    return end - start


def arrival_rps(df: Frame) -> float:
    """Measured arrival rate, (n - 1) / (last - first arrival): the load actually offered."""
    arr = _finite(_values(df, "arrival_s"))
    span = arr.max() - arr.min() if arr.size else 0.0
    return float((arr.size - 1) / span) if span > 0 else float("nan")


def throughput_rps(df: Frame) -> float:
    """Completed requests per second over the run span (vLLM's request_throughput)."""
    d = duration_s(df)
    return n_completed(df) / d if d > 0 else float("nan")


def output_tokens_per_s(df: Frame) -> float:
    d = duration_s(df)
    out = _values(df, "output_tokens")[completed_mask(df)]
    return float(out.sum() / d) if d > 0 else float("nan")


def total_tokens_per_s(df: Frame) -> float:
    d = duration_s(df)
    done = completed_mask(df)
    total = _values(df, "output_tokens")[done].sum() + _values(df, "input_tokens")[done].sum()
    return float(total / d) if d > 0 else float("nan")


def steady_window(df: Frame, warmup_fraction: float) -> tuple[float, float]:
    """(start_s, end_s) of the steady window on the run clock.

    It spans the arrivals after the first `warmup_fraction` of the arrival span, up to the last
    arrival (after which the system only drains). It also starts no earlier than the first
    completion, so a short warm-up never counts the pipeline-fill interval (no request can finish
    before one prefill plus its whole decode) as zero throughput.
    """
    arr = _finite(_values(df, "arrival_s"))
    if arr.size == 0:
        return float("nan"), float("nan")
    first, last = float(arr.min()), float(arr.max())
    start = first + warmup_fraction * (last - first)
    finish = _finite(_values(df, "finish_s")[completed_mask(df)])
    if finish.size:
        start = max(start, float(finish.min()))
    return start, last


def steady_throughput_rps(df: Frame, warmup_fraction: float, closed_loop: bool = False) -> float:
    """Completions per second inside the steady window: the offered rate under light load, the
    capacity under overload. Falls back to `throughput_rps` when the window is empty.

    `closed_loop` (a saturation run: each completion sends the next request): the window runs from
    the completion of the first `warmup_fraction` of the requests to that of all but the last
    `warmup_fraction` (never past the last send), so it covers the same part of the trace whatever
    the in-flight count (a larger count otherwise shifts the window's requests by that many, which
    on a drifting trace is a different mix). With several routes each is measured the same way over
    its own requests, and the slowest per unit of its share of the workload sets the rate: the
    routes' queues may be working on parts of the trace far apart, and the loop's total would count
    whichever is ahead (a FIFO pool busy throughout then measures the same service times whatever
    the in-flight count), in units of the route's mean request (harness/analysis/saturation.py).
    NaN when the loop ran out of requests before the warm-up share had completed (no steady state).
    """
    if closed_loop:
        from harness.analysis.saturation import closed_loop_capacity  # it reads this module's masks

        capacity = closed_loop_capacity(df, warmup_fraction)
        if math.isfinite(capacity.rate_rps):
            return capacity.rate_rps
        if capacity.ran_out:  # too few requests for the in-flight count: the loop only filled and drained
            return float("nan")
    start, end = steady_window(df, warmup_fraction)
    if not end > start:
        return throughput_rps(df)
    finish = _values(df, "finish_s")[completed_mask(df)]
    inside = (finish >= start) & (finish <= end)
    return float(inside.sum() / (end - start))


def latency(df: Frame, column: str, stat: str) -> float:
    """`stat` ('mean' or 'pNN') of a latency column over completed requests."""
    values = _values(df, column)[completed_mask(df)]
    if stat == "mean":
        return mean(values)
    return percentile(values, float(stat.removeprefix("p")))


def ttft(df: Frame, stat: str = "mean") -> float:
    return latency(df, "ttft_s", stat)


def tpot(df: Frame, stat: str = "mean") -> float:
    return latency(df, "tpot_s", stat)


def e2e(df: Frame, stat: str = "mean") -> float:
    return latency(df, "e2e_s", stat)


def slo_met_mask(df: Frame, ttft_slo_s: float, tpot_slo_s: float) -> np.ndarray:
    """Completed requests meeting both SLOs. A request with one output token has no TPOT: it only
    needs the TTFT SLO."""
    ttft_s = _values(df, "ttft_s")
    tpot_s = _values(df, "tpot_s")
    ttft_ok = ttft_s <= ttft_slo_s * (1 + _SLO_RTOL)
    tpot_ok = np.isnan(tpot_s) | (tpot_s <= tpot_slo_s * (1 + _SLO_RTOL))
    return completed_mask(df) & ttft_ok & tpot_ok


def abandoned_mask(df: Frame) -> np.ndarray:
    """True for requests whose client hung up before they ended (harness-serve's column `abandoned`;
    none when absent): neither completed nor failed by the target."""
    if "abandoned" not in df.columns:
        return np.zeros(len(df), dtype=bool)
    return memo(df, "abandoned_mask",
                lambda: df["abandoned"].fillna(False).to_numpy(dtype=bool) & ~completed_mask(df))


def n_abandoned(df: Frame) -> int:
    return int(abandoned_mask(df).sum())


def slo_attainment(df: Frame, ttft_slo_s: float, tpot_slo_s: float) -> float:
    """Share of requests (failed ones count as misses, interrupted and abandoned ones not at all)
    meeting both SLOs."""
    counted = ~(interrupted_mask(df) | abandoned_mask(df))
    met = slo_met_mask(df, ttft_slo_s, tpot_slo_s)[counted]
    return float(met.mean()) if met.size else float("nan")


def goodput_rps(df: Frame, ttft_slo_s: float, tpot_slo_s: float) -> float:
    """Completed requests meeting both SLOs per second of run span."""
    d = duration_s(df)
    return float(slo_met_mask(df, ttft_slo_s, tpot_slo_s).sum() / d) if d > 0 else float("nan")


def offload_fraction(df: Frame) -> float:
    """Share of routed requests (route non-empty) that went to the PrfaaS cluster."""
    if "route" not in df.columns:
        return float("nan")
    route = df["route"].astype("string").fillna("")
    routed = route != ""
    return float((route[routed] == "prfaas").mean()) if routed.any() else float("nan")


def cached_token_frac(df: Frame) -> float:
    """Share of prompt tokens the prefills skipped: sum cached_tokens / sum input_tokens, over the rows
    whose count is known (null: a url target that reported none for it); NaN when no row's is."""
    return _known_share(df, "cached_tokens")


def cache_hit_token_frac(df: Frame) -> float:
    """Prefix-cache pool token hit rate (block-level KV matches); falls back to cached_tokens. Over the
    rows whose count is known; NaN when none is (url mode: a client cannot see the target's pool)."""
    return _known_share(df, "cache_hit_tokens" if "cache_hit_tokens" in df else "cached_tokens")


def _known_share(df: Frame, column: str) -> float:
    counts = _counts(df, column)
    known = ~np.isnan(counts)
    total = np.nansum(_values(df, "input_tokens")[known])
    return float(counts[known].sum() / total) if total > 0 else float("nan")


def prefill_tokens_computed(df: Frame) -> float:
    """Prompt tokens actually computed by prefills (input minus the skipped prefix), over the rows whose
    skipped prefix is known; NaN when none is."""
    cached = _counts(df, "cached_tokens")
    known = ~np.isnan(cached)
    if len(cached) and not known.any():
        return float("nan")
    return float(np.nansum(_values(df, "input_tokens")[known]) - cached[known].sum())


def kv_bytes_prfaas_total(df: Frame) -> float:
    """KV bytes moved cross-DC: sum of kv_bytes_sent over route prfaas. NaN when the run knows neither
    any request's route nor its KV bytes (url mode: the client sees no KV transfer)."""
    if "route" not in df.columns:
        return 0.0
    route = df["route"].astype("string")
    if len(df) and route.isna().all() and not np.isfinite(_values(df, "kv_bytes_sent")).any():
        return float("nan")
    remote = (route.fillna("") == "prfaas").to_numpy(dtype=bool)
    return float(np.nansum(_values(df, "kv_bytes_sent")[remote]))


def lateness(df: Frame, stat: str) -> float:
    """Load-generator lateness (sent - scheduled) statistic; NaN when the run has no such column."""
    values = _values(df, "lateness_s")
    if stat == "max":
        v = _finite(values)
        return float(v.max()) if v.size else float("nan")
    return mean(values) if stat == "mean" else percentile(values, float(stat.removeprefix("p")))


def _in_window(ts: pd.DataFrame, start_s: float, end_s: float, one_bin: bool = False) -> pd.DataFrame:
    """The bins whose start lies in [start_s, end_s]; `one_bin`: a window inside one bin (no bin
    starts in it) is that bin (the run span's rule: see the module's docstring)."""
    if ts is None or len(ts) == 0 or np.isnan(start_s) or np.isnan(end_s):
        return ts.iloc[0:0] if ts is not None else pd.DataFrame()
    t = _values(ts, "t_s")
    inside = (t >= start_s) & (t <= end_s)
    if one_bin and not inside.any() and end_s >= start_s:
        inside = (t <= start_s) & (start_s < t + _values(ts, "bin_s"))
    return ts[inside]


def egress_gbps(ts: pd.DataFrame, stat: str, start_s: float = -np.inf, end_s: float = np.inf,
                one_bin: bool = False) -> float:
    """Egress statistic ('mean' or 'pNN') over the time bins whose start lies in [start_s, end_s]."""
    values = _values(_in_window(ts, start_s, end_s, one_bin), "egress_gbps")
    return mean(values) if stat == "mean" else percentile(values, float(stat.removeprefix("p")))


def link_util(ts: pd.DataFrame, stat: str, start_s: float = -np.inf, end_s: float = np.inf,
              one_bin: bool = False) -> float:
    """Per-bin egress / capacity (capacity may change over the run), then 'mean' or 'pNN'."""
    win = _in_window(ts, start_s, end_s, one_bin)
    cap = _values(win, "link_capacity_gbps")
    with np.errstate(divide="ignore", invalid="ignore"):
        util = np.where(cap > 0, _values(win, "egress_gbps") / cap, np.nan)
    return mean(util) if stat == "mean" else percentile(util, float(stat.removeprefix("p")))


def stage_util_means(ts: pd.DataFrame, start_s: float = -np.inf, end_s: float = np.inf,
                     prefix: str = "", one_bin: bool = False) -> dict[str, float]:
    """Mean of every `util_*` column of the time series: `{prefix}util_decode_mean`, ..."""
    win = _in_window(ts, start_s, end_s, one_bin)
    cols = [c for c in (ts.columns if ts is not None else []) if c.startswith("util_")]
    return {f"{prefix}{c}_mean": mean(_values(win, c)) for c in cols}
