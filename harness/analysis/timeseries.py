"""Per-bin time series of a run, rebuilt exactly from the request records and the link log.

Queue depths and utilisations are time averages over each bin of step functions that the
records already define (a request is "queued for prefill" from arrival to prefill start, and so
on), so nothing is sampled during the run and nothing costs events on the hot path.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


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
    n_bins = max(1, int(np.ceil(t_end / bin_s)))
    edges = np.arange(n_bins + 1, dtype=float) * bin_s
    frame = {"deployment": deployment, "t_s": edges[:-1]}
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
