"""Ramp-up: the first `ramp_up_s` of a run offered at a rate that grows linearly to the full rate.

The trace's own arrival pattern is kept; only its clock is stretched: with the rate factor
f(t) = f0 + (1 - f0) t / T for t < T (1 afterwards), a request at offset u in the unramped run goes
out at the t where the integral of f from 0 to t equals u. Late in the run (t >= T) that is
u + (1 - f0) T / 2: the whole run is shifted by the requests the ramp held back. `linear` is
vLLM's `--ramp-up-strategy` name (there the rate ramps between two given rates over the whole run).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from harness.errors import require
from harness.workload.request import Request

STRATEGIES = ("linear",)


def ramp_offset(u: float, ramp_up_s: float, start_fraction: float) -> float:
    """The ramped send offset t of an unramped offset u (both run-clock seconds from the start)."""
    T, f0 = ramp_up_s, start_fraction
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
    t0 = min((r.arrival_s for r in requests), default=0.0)
    return [dataclasses.replace(r, arrival_s=t0 + ramp_offset(r.arrival_s - t0, ramp_up_s, start_fraction))
            for r in requests]
