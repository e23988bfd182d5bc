"""How a run offers its requests, read once from `loadgen.*` for every mode.

Open loop: each request at its arrival offset (the workload's own arrival process, at
`loadgen.rate_rps` when set). Closed loop: `loadgen.concurrency` requests in flight, or
`loadgen.saturation_in_flight` when `rate_rps` is inf (saturation). Sim mode injects the requests
on its virtual clock, live and url modes through the HTTP load generator; both take this `Offer`.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from harness.errors import require
from harness.loadgen.ramp import apply_ramp
from harness.loadgen.settings import lg_get
from harness.runs.closed_loop import saturation_in_flight
from harness.workload import build_workload
from harness.workload.build import instantiate_workload
from harness.workload.request import Request


@dataclass(frozen=True)
class Offer:
    requests: Sequence[Request]  # a list, or (make_offer(stream=True)) a lazy sequence built as it is read
    concurrency: int | None  # None: open loop
    offered_rps: float  # the rate asked for (or the trace's own, of what is offered); NaN for closed loops
    max_duration_s: float | None  # stop offering new requests after this much run time
    saturate: bool = False  # rate_rps=inf: a capacity run (closed loop sized from the planner)
    unique_blocks: bool = False  # the workload promises no block id is shared between requests


def offered_rate(requests: Sequence[Request], rate_rps: float | None, concurrency: int | None,
                 max_duration_s: float | None = None) -> float:
    """The offered rate: the configured one, else (open loop) (n - 1) / span of the arrivals offered:
    those at or before `max_duration_s` when set (sim and HTTP runs offer no later one). The arrivals
    are in order, so the last one offered is found by bisection: a lazy sequence (make_offer's
    `stream=True`) builds a few dozen requests, not the workload."""
    offered = rate_rps
    if offered is None and concurrency is None:
        n = len(requests) if max_duration_s is None else \
            bisect.bisect_right(requests, max_duration_s, key=lambda r: r.arrival_s)
        if n > 1:
            span = requests[n - 1].arrival_s - requests[0].arrival_s
            offered = (n - 1) / span if span > 0 else math.nan
    return float(offered) if offered is not None else math.nan


def make_offer(cfg: Any, stream: bool = False) -> Offer:
    """Check `loadgen.*`, build the workload and say how to offer it (one bad value: one line, exit 2).

    `stream=True` (sim runs): the requests are a lazy sequence built a chunk at a time as they are
    read, when the workload can and no ramp is set (the same requests either way)."""
    lg = cfg.loadgen
    require(lg.rate_rps is None or lg.rate_rps > 0,
            f"loadgen.rate_rps must be > 0 (or null for the workload's own rate), got {lg.rate_rps}")
    require(lg.concurrency is None or lg.concurrency >= 1,
            f"loadgen.concurrency must be >= 1 (or null for open loop), got {lg.concurrency}")
    require(lg.warmup_s >= 0, f"loadgen.warmup_s must be >= 0, got {lg.warmup_s}")
    require(lg.concurrency is None or lg.rate_rps is None,
            f"loadgen.concurrency={lg.concurrency} (a closed loop: that many requests in flight) and "
            f"loadgen.rate_rps={lg.rate_rps} (arrivals at a rate; inf: a capacity run) exclude each other: set "
            f"one (a rate with an in-flight cap: loadgen.rate_rps with loadgen.max_concurrency, live and url runs)")
    saturate = lg.rate_rps is not None and math.isinf(lg.rate_rps)
    concurrency = saturation_in_flight(cfg) if saturate else lg.concurrency
    concurrency = int(concurrency) if concurrency is not None else None
    rate = None if saturate else lg.rate_rps
    ramp_up_s = lg_get(cfg, "ramp_up_s")
    workload = instantiate_workload(cfg.workload)
    # A saturation run reads the requests twice (which turn continues which): a list.
    lazy = stream and not ramp_up_s and not saturate and bool(getattr(workload, "streams_as_generated", False))
    requests = cast(Any, workload).stream(rate) if lazy else build_workload(workload, rate_rps=rate)
    require(len(requests) > 0, f"workload {cfg.workload.name!r} produced no requests")
    if not lazy:
        requests = apply_ramp(requests, ramp_up_s, lg_get(cfg, "ramp_up_start_fraction", 0.0),
                              lg_get(cfg, "ramp_up_strategy", "linear"))
    offered = offered_rate(requests, lg.rate_rps, concurrency, lg.max_duration_s)
    return Offer(requests, concurrency, offered, lg.max_duration_s,
                 saturate=saturate, unique_blocks=bool(getattr(workload, "unique_blocks", False)))
