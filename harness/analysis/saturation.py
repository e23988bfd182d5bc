"""Capacity from a closed-loop (saturation) run: its steady window and how completions are counted.

In a closed loop each completion sends the next request, so a send-time window would shift with the
in-flight count. The window instead runs from the completion of the first `warmup_fraction` of the
requests to that of all but the last `warmup_fraction`, never past the last send after which the loop
was back at its full in-flight count (past it the loop has run out of requests and drains).

With several routes (PrfaaS-PD: `local`, `prfaas`) each route is measured the same way over its own
requests, and the slowest route per unit of its share of the workload sets the rate: the routes'
queues may be working on parts of the trace far apart, and the loop's total would count whichever
is ahead. Within a route, completions are counted in units of the route's mean request: each weighs
its prefill occupancy (`prefill_end_s - prefill_start_s`) over the mean occupancy of all the route's
completed requests. Why: a conversation trace's later turns wait for the turn they continue
(`harness.deploy.capacity.offer_saturation`), and with a deep queue in front of a pool they wait
long, so the requests that pool completes inside its window are a different set at a different
in-flight count. On the Mooncake conversation trace the held turns are the light ones (their prefix
is cached): at 4x the automatic count PrfaaS-PD's remote window held 16% fewer of them, its mean
prefill 6% longer, and a plain count read 4% low while the pool was 100% busy at both settings.
A pool busy throughout its window completes its instances' worth of occupancy per second whatever
the order, so counted in mean requests its rate is the same set of service times at any in-flight
count. Without prefill stamps (some live/url runs) each completion counts as one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.analysis.metrics import completed_mask


@dataclass(frozen=True)
class RouteWindow:
    """One route's part of a closed-loop capacity: its window, its share of the requests and its
    rate in requests of the workload's mix per second (its mean-request completions / share)."""

    route: str
    share: float
    start_s: float
    end_s: float
    completions: int
    rate_rps: float


@dataclass(frozen=True)
class ClosedLoopCapacity:
    rate_rps: float  # NaN: too few completions for a window
    start_s: float  # the whole loop's window (every route's requests)
    end_s: float
    routes: tuple[RouteWindow, ...] = ()  # empty with a single route

    def window(self, route: str | None = None) -> tuple[float, float]:
        """(start_s, end_s) of `route`'s window, or the whole loop's when the route has none."""
        for r in self.routes:
            if r.route == route:
                return r.start_s, r.end_s
        return self.start_s, self.end_s


def _column(df: pd.DataFrame, name: str) -> np.ndarray:
    if name not in df.columns:
        return np.full(len(df), np.nan)
    return pd.to_numeric(df[name], errors="coerce").to_numpy(dtype=float, na_value=np.nan)


def last_full_send(sends: np.ndarray, ends: np.ndarray) -> float:
    """The last send after which the loop was back at its full in-flight count: past it the loop
    ran out of requests it could send and the in-flight count decays (a drain, not capacity)."""
    sends = np.sort(sends)
    in_flight = np.arange(1, sends.size + 1) - np.searchsorted(np.sort(ends), sends, side="right")
    full = np.nonzero(in_flight >= in_flight.max())[0]
    return float(sends[full[-1]])


def completion_window(finish: np.ndarray, n: int, warmup_fraction: float, last_send: float,
                      weight: np.ndarray | None = None) -> tuple[float, float, int, float]:
    """(start_s, end_s, completions, rate) between the completion of the first `warmup_fraction` of `n`
    requests and that of all but the last `warmup_fraction` (never past `last_send`); the rate sums
    `weight` (one per completion when None) over the completions inside, per second."""
    ok = np.isfinite(finish)
    ends = finish[ok]
    order = np.argsort(ends, kind="stable")
    ends = ends[order]
    if ends.size < 4:
        return math.nan, math.nan, 0, math.nan
    k0 = min(max(math.ceil(warmup_fraction * n), 0), ends.size - 1)
    k1 = min(max(math.floor((1.0 - warmup_fraction) * n) - 1, 0), ends.size - 1)
    start, end = float(ends[k0]), min(float(ends[k1]), last_send)
    if not end > start:
        return start, end, 0, math.nan
    inside = (ends > start) & (ends <= end)
    w = np.ones(ends.size) if weight is None else weight[ok][order]
    return start, end, int(inside.sum()), float(w[inside].sum()) / (end - start)


def mean_request_weights(df: pd.DataFrame, mine: np.ndarray, done: np.ndarray) -> np.ndarray | None:
    """Each of the route's requests' prefill occupancy over the mean of its completed requests' (None
    when the frame has no usable stamps: every completion then counts as one)."""
    occupancy = _column(df, "prefill_end_s")[mine] - _column(df, "prefill_start_s")[mine]
    counted = done[mine]
    if not counted.any() or not np.isfinite(occupancy[counted]).all():
        return None
    mean = float(occupancy[counted].mean())
    return occupancy / mean if mean > 0 else None


def closed_loop_capacity(df: pd.DataFrame, warmup_fraction: float) -> ClosedLoopCapacity:
    """The steady throughput of a closed-loop run and the windows it was read over (module doc)."""
    done = completed_mask(df)
    finish = np.where(done, _column(df, "finish_s"), np.nan)
    sends = _column(df, "arrival_s")
    sends = sends[np.isfinite(sends)]
    if sends.size == 0 or not done.any():
        return ClosedLoopCapacity(math.nan, math.nan, math.nan)
    last_send = last_full_send(sends, finish[np.isfinite(finish)])
    start, end, _, rate = completion_window(finish, len(df), warmup_fraction, last_send)
    if "route" not in df.columns:
        return ClosedLoopCapacity(rate, start, end)
    routes = df["route"].astype("string").fillna("").to_numpy()
    sent = routes != ""
    names = [str(name) for name in np.unique(routes[sent])]
    if len(names) < 2:
        return ClosedLoopCapacity(rate, start, end)
    per_route = []
    for name in names:
        mine = routes == name
        share = float(mine[sent].mean())
        weight = mean_request_weights(df, mine, done)
        r_start, r_end, count, r = completion_window(finish[mine], int(mine.sum()), warmup_fraction, last_send,
                                                     weight)
        per_route.append(RouteWindow(name, share, r_start, r_end, count, r / share if share > 0 else math.nan))
    rates = [r.rate_rps for r in per_route if math.isfinite(r.rate_rps)]
    return ClosedLoopCapacity(min(rates) if rates else rate, start, end, tuple(per_route))


def closed_loop_throughput(df: pd.DataFrame, warmup_fraction: float) -> float:
    return closed_loop_capacity(df, warmup_fraction).rate_rps
