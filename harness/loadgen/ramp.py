"""Ramp-up: the first `ramp_up_s` of a run offered at a rate that grows to the full rate.

The trace's own arrival pattern is kept; only its clock is stretched: with a rate factor f(t) that
starts at f0 = `ramp_up_start_fraction` and reaches 1 at t = T (and stays there), a request at offset
u in the unramped run goes out at the t where the integral of f from 0 to t equals u.
- `linear`: f(t) = f0 + (1 - f0) t / T. After the ramp a request goes out at u + (1 - f0) T / 2.
- `exponential`: f(t) = f0 (1 / f0)^(t / T), f0 > 0 (the rate multiplies by the same factor each second).
The names are vLLM's `--ramp-up-strategy` values (there the rate ramps between two given rates over
the whole run; here over the first T seconds of a trace or generated workload, at its own rate after).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from harness.errors import require
from harness.workload.request import Request

STRATEGIES = ("linear", "exponential")


def ramp_offset(u: float, ramp_up_s: float, start_fraction: float, strategy: str = "linear") -> float:
    """The ramped send offset t of an unramped offset u (both run-clock seconds from the start)."""
    T, f0 = ramp_up_s, start_fraction
    if strategy == "exponential" and f0 < 1:
        k = math.log(1 / f0) / T  # f(t) = f0 e^(k t); its integral to t is f0 (e^(k t) - 1) / k
        reached = (1 - f0) / k
        if u >= reached:
            return u - reached + T
        return math.log1p(u * k / f0) / k
    reached = (1 + f0) * T / 2  # unramped seconds offered by the end of the ramp
    if u >= reached:
        return u - reached + T
    a = (1 - f0) / (2 * T)  # solve a t^2 + f0 t - u = 0 for t >= 0
    if a == 0:
        return u / f0
    return (-f0 + math.sqrt(f0 * f0 + 4 * a * u)) / (2 * a)


def apply_ramp(requests: Sequence[Request], ramp_up_s: float | None, start_fraction: float = 0.0,
               strategy: str = "linear") -> list[Request]:
    """The requests with ramped arrival offsets (unchanged when ramp_up_s is null or 0)."""
    if not ramp_up_s:
        return list(requests)
    require(strategy in STRATEGIES, f"loadgen.ramp_up_strategy={strategy!r}; valid: {', '.join(STRATEGIES)}")
    require(math.isfinite(ramp_up_s) and ramp_up_s > 0, f"loadgen.ramp_up_s must be > 0 (or null), got {ramp_up_s}")
    require(0 <= start_fraction <= 1, f"loadgen.ramp_up_start_fraction must be in [0, 1], got {start_fraction}")
    require(strategy != "exponential" or start_fraction > 0,
            "loadgen.ramp_up_strategy=exponential needs loadgen.ramp_up_start_fraction > 0 (a rate that starts at 0 "
            "never grows by a factor)")
    t0 = min((r.arrival_s for r in requests), default=0.0)
    return [dataclasses.replace(r, arrival_s=t0 + ramp_offset(r.arrival_s - t0, ramp_up_s, start_fraction, strategy))
            for r in requests]
