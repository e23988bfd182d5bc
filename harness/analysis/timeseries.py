"""Per-bin time series of a run, rebuilt exactly from the request records and the link log.

Queue depths and utilisations are time averages over each bin of step functions that the
records already define (a request is "queued for prefill" from arrival to prefill start, and so
on), so nothing is sampled during the run and nothing costs events on the hot path. A request that
left without finishing (cancelled, or cut off by a stop) has `ended_s`: a stamp it never reached
(its `finish_s`, or its prefill start if it left the queue) is taken as then, so the place it held
counts until it left.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd

from harness.analysis.columns import Frame
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
    log.warning("time series: a %.4g s run at analysis.timeseries.bin_s=%g would need %.4g bins; binned at "
                "%.6g s instead (at most %d bins)", t_end, bin_s, n_bins, width, max_bins)
    return float(width)


def bin_edges(t_end: float, bin_s: float, max_bins: int = MAX_BINS) -> tuple[np.ndarray, float]:
    """Edges of the bins covering [0, t_end) (at least one bin) and the width used (see bin_width)."""
    width = bin_width(t_end, bin_s, max_bins)
    n_bins = max(1, math.ceil(t_end / width))
    return np.arange(n_bins + 1, dtype=float) * width, width


def _integral_of(points: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Integral over [0, x] of the number of `points` (sorted, finite) at or before x, at each x in
    edges: x * count - sum of those points. Only one array the size of `points` is made."""
    count = np.searchsorted(points, edges, side="left")
    sums = np.empty(points.size + 1)
    sums[0] = 0.0
    np.cumsum(points, out=sums[1:])
    return edges * count - sums[count]


def _integral(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Integral over [0, x] of the number of open intervals [start, end), at each x in edges."""
    ok = np.isfinite(starts) & np.isfinite(ends) & (ends > starts)
    a = starts[ok]
    a.sort()
    opened = _integral_of(a, edges)
    del a
    b = ends[ok]
    del ok
    b.sort()
    return opened - _integral_of(b, edges)


def occupancy(starts, ends, edges: np.ndarray) -> np.ndarray:
    """Time-averaged number of open intervals in each bin [edges[k], edges[k+1])."""
    integral = _integral(np.asarray(starts, float), np.asarray(ends, float), edges)
    return np.diff(integral) / np.diff(edges)


def link_series(
    edges: np.ndarray,
    bin_s: float,
    *,
    link=None,
    reverse_link=None,
    roles_log: list[tuple[float, int, int]] | None = None,
    evictions: list[tuple[float, int]] | None = None,
) -> dict[str, np.ndarray]:
    """The columns the emulator's logs define (egress, capacity, evictions, active roles), by name.

    A long run computes them before it releases the emulator, then the request columns from the file."""
    n_bins = len(edges) - 1
    out: dict[str, np.ndarray] = {}
    if link is not None:
        _, egress, capacity = link.egress_series(edges[-1], bin_s)
        out["egress_gbps"] = egress[:n_bins]
        out["link_capacity_gbps"] = capacity[:n_bins]
    else:
        out["egress_gbps"] = np.zeros(n_bins)
        out["link_capacity_gbps"] = np.zeros(n_bins)
    if reverse_link is not None:
        out["reverse_egress_gbps"] = reverse_link.egress_series(edges[-1], bin_s)[1][:n_bins]
    if evictions is not None:
        t_ev = np.array([t for t, _ in evictions], dtype=float)
        n_ev = np.array([n for _, n in evictions], dtype=float)
        out["cache_evictions_per_s"] = np.histogram(t_ev, edges, weights=n_ev)[0] / bin_s
    if roles_log:
        t_roles = np.array([t for t, _, _ in roles_log])
        at = np.searchsorted(t_roles, edges[:-1], side="right") - 1
        out["n_prefill_active"] = np.array([roles_log[max(i, 0)][1] for i in at])
        out["n_decode_active"] = np.array([roles_log[max(i, 0)][2] for i in at])
    return out


# Columns from the emulator's logs that come after the request-derived ones, in this order.
_LATE_LINK_COLUMNS = ("cache_evictions_per_s", "n_prefill_active", "n_decode_active")


def build_timeseries(
    requests: Frame,
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
    link_columns: dict[str, np.ndarray] | None = None,
) -> pd.DataFrame:
    """The time series of a run: `link_columns` (from `link_series` on the same edges) stand for
    link/reverse_link/roles_log/evictions when the emulator is already gone.

    Each request column is read when it is needed and not held after (`requests` may be a
    `ParquetColumns`), so the peak is a few columns, not the frame."""
    edges, bin_s = bin_edges(t_end, bin_s)
    n_bins = len(edges) - 1
    if link_columns is None:
        link_columns = link_series(edges, bin_s, link=link, reverse_link=reverse_link, roles_log=roles_log,
                                   evictions=evictions)
    frame: dict[str, object] = {"deployment": deployment, "t_s": edges[:-1], "bin_s": np.full(n_bins, bin_s)}
    frame.update({k: v for k, v in link_columns.items() if k not in _LATE_LINK_COLUMNS})

    def col(name: str) -> np.ndarray:
        return requests[name].to_numpy(float)

    ended = col("ended_s") if "ended_s" in requests else None  # see the module's note

    def until(name: str) -> np.ndarray:
        """An interval's end: the stamp, or when the request left if it never reached it."""
        values = col(name)
        return values if ended is None else np.where(np.isnan(values), ended, values)

    routes = requests["route"]
    masks = {cluster: routes.eq(cluster).fillna(False).to_numpy(dtype=bool) for cluster in ("local", "prfaas")}
    del routes
    for cluster, n in (("local", n_prefill), ("prfaas", n_prfaas)):
        mask = masks[cluster]
        frame[f"prefill_queue_{cluster}"] = occupancy(col("arrival_s")[mask], until("prefill_start_s")[mask], edges)
        busy = occupancy(col("prefill_start_s")[mask], until("prefill_end_s")[mask], edges)
        frame[f"util_prefill_{cluster}"] = busy / n if n else np.zeros(n_bins)
    del masks
    frame["decode_waiting"] = occupancy(col("kv_ready_s"), until("first_token_s"), edges)
    running = occupancy(col("first_token_s"), until("finish_s"), edges)
    frame["decode_running"] = running
    slots = decode_slots if decode_slots is not None else n_decode
    frame["util_decode"] = running / slots if slots else np.zeros(n_bins)  # share of batch slots in use
    frame["arrivals_per_s"] = np.histogram(col("arrival_s"), edges)[0] / bin_s
    finish = col("finish_s")
    frame["completions_per_s"] = np.histogram(finish[np.isfinite(finish)], edges)[0] / bin_s
    del finish
    if "cache_hit_tokens" in requests:
        frame["cache_hit_tokens_per_s"] = np.histogram(col("arrival_s"), edges,
                                                       weights=col("cache_hit_tokens"))[0] / bin_s
    frame.update({k: link_columns[k] for k in _LATE_LINK_COLUMNS if k in link_columns})
    return pd.DataFrame(frame)
