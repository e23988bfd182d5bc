"""Is an open-loop run stable? The verdict a capacity search bisects on.

A run offered at rate r is judged over the second half of its arrival window W = [T/2, T] (T: the
last arrival), where a stable system has forgotten its empty start:

- **goodput**: requests completed per second in W, at least `min_goodput` (0.99) of the requests
  offered per second in W. The completions are counted as the arrivals in W less the growth of the
  requests in the system across W, each end read as the mean over a tenth of W (a completion count
  cut at two instants would swing with the ~sqrt(L) requests that happen to be in flight there),
  less the requests that failed in W.
- **no growth**: the number of requests in the system N(t), sampled evenly over W and averaged in
  `batches` consecutive batches (batch means: N(t) is strongly autocorrelated, its batch means far
  less), shows no increasing trend: Kendall's tau of the batch means against time, one-sided, is not
  significant at `alpha`. A fixed slope threshold would depend on the rate and the trace; a test
  with a stated significance does not.

Both must hold. An unstable system fails at least one: past capacity the queue grows without bound,
so N(t) trends up and the completions fall short of the arrivals by the growth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_GOODPUT = 0.99  # completions over arrivals in the window
ALPHA = 0.01  # significance of the growth test (one-sided)
BATCHES = 10  # batch means of N(t) over the window
SAMPLES_PER_BATCH = 20
MIN_REQUESTS = 200  # fewer arrivals in the window cannot be judged


@dataclass(frozen=True)
class Verdict:
    stable: bool
    reason: str  # one line: why
    goodput_ratio: float  # completions / arrivals in the window
    trend_tau: float  # Kendall's tau of N(t)'s batch means against time
    trend_p: float  # one-sided p-value of an increasing trend
    window_start_s: float
    window_end_s: float
    arrivals_in_window: int
    in_system_start: float  # mean requests in the system over the window's first tenth
    in_system_end: float  # and over its last tenth


def in_system(arrival_s: np.ndarray, ended_s: np.ndarray, t: np.ndarray) -> np.ndarray:
    """N(t): requests that arrived at or before t and had not ended by t (NaN ends: never ended)."""
    arrivals = np.sort(arrival_s)
    ends = np.sort(ended_s[np.isfinite(ended_s)])
    return (np.searchsorted(arrivals, t, side="right") - np.searchsorted(ends, t, side="right")).astype(float)


def judge(arrival_s: np.ndarray, ended_s: np.ndarray, failed: np.ndarray, *, min_goodput: float = MIN_GOODPUT,
          alpha: float = ALPHA, batches: int = BATCHES) -> Verdict:
    """The verdict on one open-loop run from each request's arrival, end (finish or failure; NaN if it
    never ended) and whether it failed."""
    from scipy.stats import kendalltau

    arrival_s = np.asarray(arrival_s, dtype=float)
    ended_s = np.asarray(ended_s, dtype=float)
    failed = np.asarray(failed, dtype=bool)
    last = float(arrival_s.max()) if arrival_s.size else math.nan
    start, end = last / 2, last
    inside = (arrival_s >= start) & (arrival_s <= end)
    n_in = int(inside.sum())
    nan = math.nan
    if not n_in >= MIN_REQUESTS or not end > start:
        return Verdict(False, f"too few requests to judge: {n_in} arrivals in the second half of the run "
                              f"(needs {MIN_REQUESTS}); raise workload.num_requests",
                       nan, nan, nan, start, end, n_in, nan, nan)
    t = np.linspace(start, end, batches * SAMPLES_PER_BATCH, endpoint=False) + (end - start) / (
        2 * batches * SAMPLES_PER_BATCH)
    n_t = in_system(arrival_s, ended_s, t)
    means = n_t.reshape(batches, SAMPLES_PER_BATCH).mean(axis=1)
    first, final = float(means[0]), float(means[-1])
    failed_in = int((failed & np.isfinite(ended_s) & (ended_s >= start) & (ended_s <= end)).sum())
    completions = n_in - (final - first) - failed_in
    ratio = completions / n_in
    if np.ptp(means) == 0:
        tau, p = 0.0, 1.0
    else:
        res = kendalltau(np.arange(batches), means, alternative="greater")
        tau, p = float(res.statistic), float(res.pvalue)
    growing = p < alpha
    short = ratio < min_goodput
    detail = (f"goodput {ratio:.1%} of offered, requests in system {first:.0f} -> {final:.0f} "
              f"(tau {tau:+.2f}, p {p:.3g})")
    if growing or short:
        why = " and ".join(w for w, bad in (("requests in the system grew", growing),
                                            (f"goodput under {min_goodput:.0%}", short)) if bad)
        return Verdict(False, f"unstable: {why}: {detail}", ratio, tau, p, start, end, n_in, first, final)
    return Verdict(True, f"stable: {detail}", ratio, tau, p, start, end, n_in, first, final)
