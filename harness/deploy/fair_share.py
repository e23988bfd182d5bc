"""Rate allocation on a shared link: pure functions of numbers (no clock, no flows).

- `water_fill`: max-min fair shares of a capacity among demands with individual caps.
- `fifo_fill`: first come, first served: each demand in order takes its cap of what is left.
- `per_connection_bps`: a TCP connection's rate ceiling, the smaller of a fixed cap and the
  Mathis loss ceiling `MSS*8 / (RTT * sqrt(2p/3))` bit/s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def per_connection_bps(cap_bps: float, loss_rate: float, rtt_s: float, mss_bytes: float) -> float:
    """Per-connection ceiling in bit/s: `cap_bps` (inf: none), lowered by Mathis when p, RTT > 0."""
    if loss_rate > 0 and rtt_s > 0:
        mathis_bps = mss_bytes * 8 / (rtt_s * math.sqrt(2 * loss_rate / 3))
        return min(cap_bps, mathis_bps)
    return cap_bps


def water_fill(capacity: float, caps: Sequence[float]) -> tuple[list[float], float]:
    """Max-min fair rates for demands capped at `caps` sharing `capacity`, O(n log n).

    Returns (rate per demand, aggregate rate); the aggregate never exceeds `capacity`.
    Demands whose cap is below the fair level get their cap; the rest split what is left equally.
    """
    n = len(caps)
    rates = [0.0] * n
    remaining, left = capacity, n
    share = 0.0
    for i in sorted(range(n), key=caps.__getitem__):
        share = remaining / left
        if caps[i] > share:
            break  # every later cap is at least as large: all of them get `share`
        rates[i] = caps[i]
        remaining -= caps[i]
        left -= 1
    agg = capacity - remaining
    if left:
        for i, cap in enumerate(caps):
            if cap > share:
                rates[i] = share
        agg += share * left
    return rates, min(capacity, agg)


def fifo_fill(capacity: float, caps: Sequence[float]) -> tuple[list[float], float]:
    """First-come-first-served rates: demands in the given order each take min(cap, what is left).

    A single FIFO queue in front of a shaper (tc tbf) serves a few long flows about this way: the
    earliest-started flow gets the rate, the next only what it leaves (a capped or still-producing flow
    leaves some). Returns (rate per demand, aggregate rate); the aggregate never exceeds `capacity`.
    """
    rates = []
    left = capacity
    for cap in caps:
        rate = cap if cap < left else left
        rates.append(rate)
        left -= rate
    return rates, capacity - left
