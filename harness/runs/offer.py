"""How a run offers its requests, read once from `loadgen.*` for every mode.

Open loop: each request at its arrival offset (the workload's own arrival process, at
`loadgen.rate_rps` when set). Closed loop: `loadgen.concurrency` requests in flight, or
`loadgen.saturation_in_flight` when `rate_rps` is inf (saturation). Sim mode injects the requests
on its virtual clock, live and url modes through the HTTP load generator; both take this `Offer`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from harness.deploy.capacity import saturation_in_flight
from harness.errors import require
from harness.loadgen.ramp import apply_ramp
from harness.loadgen.settings import lg_get
from harness.workload import build_workload
from harness.workload.request import Request


@dataclass(frozen=True)
class Offer:
    requests: list[Request]
    concurrency: int | None  # None: open loop
    offered_rps: float  # the rate asked for (or the trace's own); NaN for closed loops without one
    max_duration_s: float | None  # stop offering new requests after this much run time
    saturate: bool = False  # rate_rps=inf: a capacity run (closed loop sized from the planner)


def offered_rate(requests: list[Request], rate_rps: float | None, concurrency: int | None) -> float:
    """The offered rate: the configured one, else (open loop) the span of the arrivals."""
    offered = rate_rps
    if offered is None and concurrency is None and len(requests) > 1:
        span = requests[-1].arrival_s - requests[0].arrival_s
        offered = (len(requests) - 1) / span if span > 0 else math.nan
    return float(offered) if offered is not None else math.nan


def make_offer(cfg: Any) -> Offer:
    """Check `loadgen.*`, build the workload and say how to offer it (one bad value: one line, exit 2)."""
    lg = cfg.loadgen
    require(lg.rate_rps is None or lg.rate_rps > 0,
            f"loadgen.rate_rps must be > 0 (or null for the workload's own rate), got {lg.rate_rps}")
    require(lg.concurrency is None or lg.concurrency >= 1,
            f"loadgen.concurrency must be >= 1 (or null for open loop), got {lg.concurrency}")
    require(lg.warmup_s >= 0, f"loadgen.warmup_s must be >= 0, got {lg.warmup_s}")
    saturate = lg.rate_rps is not None and math.isinf(lg.rate_rps)
    concurrency = saturation_in_flight(cfg) if saturate else lg.concurrency
    concurrency = int(concurrency) if concurrency is not None else None
    requests = build_workload(cfg.workload, rate_rps=None if saturate else lg.rate_rps)
    require(len(requests) > 0, f"workload {cfg.workload.name!r} produced no requests")
    requests = apply_ramp(requests, lg_get(cfg, "ramp_up_s"), lg_get(cfg, "ramp_up_start_fraction", 0.0),
                          lg_get(cfg, "ramp_up_strategy", "linear"))
    return Offer(requests, concurrency, offered_rate(requests, lg.rate_rps, concurrency), lg.max_duration_s,
                 saturate)
