"""Per-bin time series of a run, rebuilt exactly from the request records and the link log.

Queue depths and utilisations are time averages over each bin of step functions that the
records already define (a request is "queued for prefill" from arrival to prefill start, and so
on), so nothing is sampled during the run and nothing costs events on the hot path.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd

from harness.errors import require

# At most this many rows per time series, whatever the run's span: a 2-request trace 1e12 ms long
# at 1 s bins would otherwise need 1e9 rows (7.45 GiB) per column. Past it, bins widen (see bin_width).
MAX_BINS = 100_000

log = logging.getLogger(__name__)


def bin_width(t_end: float, bin_s: float, max_bins: int = MAX_BINS) -> float:
    """`bin_s`, or its smallest whole multiple that covers [0, t_end) in at most `max_bins` bins.

    A whole multiple keeps every bin edge on the grid of the requested width. The width used is the
    `bin_s` column of the time series (and `timeseries_bin_s` in the summary).
    """
    require(math.isfinite(bin_s) and bin_s > 0, f"analysis.timeseries.bin_s must be a finite number > 0, got {bin_s}")
    require(math.isfinite(t_end), f"time series: the run's end time must be finite, got {t_end}")
    n_bins = math.ceil(max(t_end, 0.0) / bin_s)
    if n_bins <= max_bins:
        return float(bin_s)
    width = bin_s * math.ceil(n_bins / max_bins)
    while math.ceil(t_end / width) > max_bins:  # float rounding at the boundary
        width += bin_s
    log.warning("time series: a %.4g s run at analysis.timeseries.bin_s=%g would need %d bins; binned at "
                "%.6g s instead (at most %d bins)", t_end, bin_s, n_bins, width, max_bins)
    return float(width)


def bin_edges(t_end: float, bin_s: float, max_bins: int = MAX_BINS) -> tuple[np.ndarray, float]:
    """Edges of the bins covering [0, t_end) (at least one bin) and the width used (see bin_width)."""
    width = bin_width(t_end, bin_s, max_bins)
    n_bins = max(1, math.ceil(t_end / width))
    return np.arange(n_bins + 1, dtype=float) * width, width


def _integral(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Integral over [0, x] of the number of open intervals [start, end), at each x in edges."""
    ok = np.isfinite(starts) & np.isfinite(ends) & (ends > starts)
    a = np.sort(starts[ok])
    b = np.sort(ends[ok])
    ca = np.searchsorted(a, edges, side="left")
    cb = np.searchsorted(b, edges, side="left")
    sa = np.concatenate([[0.0], np.cumsum(a)])[ca]
    sb = np.concatenate([[0.0], np.cumsum(b)])[cb]
    return (edges * ca - sa) - (edges * cb - sb)


def occupancy(starts, ends, edges: np.ndarray) -> np.ndarray:
    """Time-averaged number of open intervals in each bin [edges[k], edges[k+1])."""
    integral = _integral(np.asarray(starts, float), np.asarray(ends, float), edges)
    return np.diff(integral) / np.diff(edges)


def build_timeseries(
    requests: pd.DataFrame,
    *,
    deployment: str,
    t_end: float,
    bin_s: float,
    n_prefill: int,
    n_prfaas: int,
    n_decode: int,
    decode_slots: int | None = None,
    link=None,
    reverse_link=None,
    roles_log: list[tuple[float, int, int]] | None = None,
    evictions: list[tuple[float, int]] | None = None,
) -> pd.DataFrame:
    edges, bin_s = bin_edges(t_end, bin_s)
    n_bins = len(edges) - 1
    frame = {"deployment": deployment, "t_s": edges[:-1], "bin_s": np.full(n_bins, bin_s)}
    if link is not None:
        _, egress, capacity = link.egress_series(edges[-1], bin_s)
        frame["egress_gbps"] = egress[:n_bins]
        frame["link_capacity_gbps"] = capacity[:n_bins]
    else:
        frame["egress_gbps"] = np.zeros(n_bins)
        frame["link_capacity_gbps"] = np.zeros(n_bins)
    if reverse_link is not None:
        frame["reverse_egress_gbps"] = reverse_link.egress_series(edges[-1], bin_s)[1][:n_bins]
    col = {name: requests[name].to_numpy(float) for name in
           ("arrival_s", "prefill_start_s", "prefill_end_s", "kv_ready_s", "first_token_s", "finish_s")}
    route = requests["route"].to_numpy()
    for cluster, n in (("local", n_prefill), ("prfaas", n_prfaas)):
        mask = route == cluster
        frame[f"prefill_queue_{cluster}"] = occupancy(col["arrival_s"][mask], col["prefill_start_s"][mask], edges)
        busy = occupancy(col["prefill_start_s"][mask], col["prefill_end_s"][mask], edges)
        frame[f"util_prefill_{cluster}"] = busy / n if n else np.zeros(n_bins)
    frame["decode_waiting"] = occupancy(col["kv_ready_s"], col["first_token_s"], edges)
    running = occupancy(col["first_token_s"], col["finish_s"], edges)
    frame["decode_running"] = running
    slots = decode_slots if decode_slots is not None else n_decode
    frame["util_decode"] = running / slots if slots else np.zeros(n_bins)  # share of batch slots in use
    frame["arrivals_per_s"] = np.histogram(col["arrival_s"], edges)[0] / bin_s
    frame["completions_per_s"] = np.histogram(col["finish_s"][np.isfinite(col["finish_s"])], edges)[0] / bin_s
    if "cache_hit_tokens" in requests:
        frame["cache_hit_tokens_per_s"] = np.histogram(col["arrival_s"], edges,
                                                       weights=requests["cache_hit_tokens"].to_numpy(float))[0] / bin_s
    if evictions is not None:
        t_ev = np.array([t for t, _ in evictions], dtype=float)
        n_ev = np.array([n for _, n in evictions], dtype=float)
        frame["cache_evictions_per_s"] = np.histogram(t_ev, edges, weights=n_ev)[0] / bin_s
    if roles_log:
        t_roles = np.array([t for t, _, _ in roles_log])
        at = np.searchsorted(t_roles, edges[:-1], side="right") - 1
        frame["n_prefill_active"] = np.array([roles_log[max(i, 0)][1] for i in at])
        frame["n_decode_active"] = np.array([roles_log[max(i, 0)][2] for i in at])
    return pd.DataFrame(frame)
