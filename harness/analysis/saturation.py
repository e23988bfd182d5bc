"""Capacity from a closed-loop (saturation) run: its steady window and how completions are counted.

In a closed loop each completion sends the next request, so a send-time window would shift with the
in-flight count. The window instead runs from the completion of the first `warmup_fraction` of the
requests to that of all but the last `warmup_fraction`, never past the last send after which the loop
was back at its full in-flight count (past it the loop has run out of requests and drains).

With several routes (PrfaaS-PD: `local`, `prfaas`) each route is measured the same way over its own
requests, and the slowest route per unit of its share of the workload sets the rate: the routes'
queues may be working on parts of the trace far apart, and the loop's total would count whichever
is ahead.

A route whose prefill pool was busy (>= 90%) in its window counts its completions in units of its
mean request: each weighs its prefill occupancy (`prefill_end_s - prefill_start_s`) over the mean
occupancy of all the route's completed requests. Why: a conversation trace's later turns wait for
the turn they continue (`harness.runs.closed_loop.offer_saturation`), and behind a deep queue they
wait long, so which requests a pool completes inside its window depends on the in-flight count. On
the Mooncake conversation trace the held turns are light (their prefix is cached): at 4x the
automatic count PrfaaS-PD's remote window held 38% continuations instead of 42%, its cached share
fell from 32% to 26% of the prompt tokens and its mean prefill rose 6%, so a plain count read 4.1%
low while the pool was 100% busy at both settings (the trace's cached share over the whole run:
30.9% / 30.8%). A pool busy throughout completes its instances' worth of occupancy per second
whatever the order; counted in mean requests that is the same rate at any in-flight count. A route
whose pool idled follows the loop's pace instead, and counts one per completion (so does every
route without prefill stamps: some live/url runs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.analysis.metrics import completed_mask

# The requests columns `closed_loop_capacity` reads (a run read back from requests.parquet reads only these).
COLUMNS = ("arrival_s", "finish_s", "error", "route", "prefill_instance", "prefill_start_s", "prefill_end_s")

# A route's prefill pool at least this busy in its window sets the route's pace (the same 90% below
# which the saturation summary calls a bottleneck pool starved: harness/runs/closed_loop.py).
BUSY_POOL = 0.9


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
    pool_busy: float = math.nan  # its prefill pool's busy fraction in the window (NaN: no stamps)
    mean_requests: bool = False  # counted in mean requests (its pool was busy), else one per completion


@dataclass(frozen=True)
class ClosedLoopCapacity:
    rate_rps: float  # NaN: too few completions for a window
    start_s: float  # the whole loop's window (every route's requests); NaN when there is none
    end_s: float
    routes: tuple[RouteWindow, ...] = ()  # empty with a single route
    only_route: str | None = None  # the one route every request took (single-route deployments)
    ran_out: bool = False  # the loop ran out of requests before the warm-up share had completed: no window

    def slowest(self) -> RouteWindow | None:
        """The route that set the rate (None with a single route)."""
        finite = [r for r in self.routes if math.isfinite(r.rate_rps)]
        return min(finite, key=lambda r: r.rate_rps) if finite else None

    def counted_by(self) -> tuple[str | None, str | None]:
        """(route that set the rate, how its completions were counted: `mean requests` or `completions`);
        the one route of a single-route loop; (None, None) when there is no rate."""
        slowest = self.slowest()
        if slowest is not None:
            return slowest.route, "mean requests" if slowest.mean_requests else "completions"
        if not math.isfinite(self.rate_rps):
            return None, None
        return self.only_route, "completions"  # the loop's own count (no route, or no route had a window)

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
    if not end > start:  # no window (the loop ran out of requests before `start`, or too few completed)
        return math.nan, math.nan, 0, math.nan
    inside = (ends > start) & (ends <= end)
    w = np.ones(ends.size) if weight is None else weight[ok][order]
    return start, end, int(inside.sum()), float(w[inside].sum()) / (end - start)


def pool_busy_fraction(df: pd.DataFrame, mine: np.ndarray, start_s: float, end_s: float) -> float:
    """How busy the prefill instances the route's requests ran on were in [start_s, end_s]: the union
    of each instance's prefill passes inside the window over instances x window (NaN without stamps)."""
    if "prefill_instance" not in df.columns or not end_s > start_s:
        return math.nan
    names = df["prefill_instance"].astype("string").fillna("").to_numpy()[mine]
    begin = np.clip(_column(df, "prefill_start_s")[mine], start_s, end_s)
    finish = np.clip(_column(df, "prefill_end_s")[mine], start_s, end_s)
    instances = [name for name in np.unique(names) if name]
    if not instances:
        return math.nan
    busy = 0.0
    for name in instances:
        ok = (names == name) & np.isfinite(begin) & np.isfinite(finish)
        order = np.argsort(begin[ok], kind="stable")
        reach = start_s
        for b, f in zip(begin[ok][order], finish[ok][order], strict=True):  # merge overlapping passes
            busy += max(0.0, f - max(b, reach))
            reach = max(reach, f)
    return busy / (len(instances) * (end_s - start_s))


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
    ends = np.sort(finish[np.isfinite(finish)])
    k0 = min(max(math.ceil(warmup_fraction * len(df)), 0), ends.size - 1)
    ran_out = bool(ends.size >= 4 and last_send <= ends[k0])  # full in flight only before the warm-up ended
    if "route" not in df.columns:
        return ClosedLoopCapacity(rate, start, end, ran_out=ran_out)
    routes = df["route"].astype("string").fillna("").to_numpy()
    sent = routes != ""
    names = [str(name) for name in np.unique(routes[sent])]
    if len(names) < 2:
        return ClosedLoopCapacity(rate, start, end, only_route=names[0] if names else None, ran_out=ran_out)
    per_route = []
    for name in names:
        mine = routes == name
        share = float(mine[sent].mean())
        r_start, r_end, count, r = completion_window(finish[mine], int(mine.sum()), warmup_fraction, last_send)
        busy = pool_busy_fraction(df, mine, r_start, r_end)
        weight = mean_request_weights(df, mine, done) if busy >= BUSY_POOL else None
        if weight is not None:  # the route's own pool set its pace: count its completions in mean requests
            r_start, r_end, count, r = completion_window(finish[mine], int(mine.sum()), warmup_fraction,
                                                         last_send, weight)
        per_route.append(RouteWindow(name, share, r_start, r_end, count, r / share if share > 0 else math.nan,
                                     busy, weight is not None))
    rates = [r.rate_rps for r in per_route if math.isfinite(r.rate_rps)]
    return ClosedLoopCapacity(min(rates) if rates else rate, start, end, tuple(per_route), ran_out=ran_out)
