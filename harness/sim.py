"""Sim mode: drive an emulated deployment with a workload in virtual time.

Open loop: each request is injected at its arrival offset (the arrival process of the workload,
at `loadgen.rate_rps` when set). Closed loop (`loadgen.concurrency=C`): C requests in flight;
each completion sends the next request at once. Arrivals are chained one timer at a time, so the
event heap stays small however long the trace.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from omegaconf import DictConfig
from tqdm import tqdm

from harness.analysis.frames import requests_frame
from harness.clock import VirtualClock
from harness.deploy.build import build
from harness.deploy.capacity import offer_saturation, saturation_in_flight, saturation_meta
from harness.deploy.timeseries import build_timeseries
from harness.errors import require
from harness.recording import RecordStream, stop_on_signals
from harness.workload import build_workload
from harness.workload.request import Request


@dataclass
class RunResult:
    requests: pd.DataFrame
    timeseries: pd.DataFrame
    meta: dict[str, Any]
    stream: RecordStream | None = field(default=None, repr=False)


def _offer_open_loop(clock: VirtualClock, deployment, requests: list[Request], stop_s: float | None) -> None:
    it = iter(requests)

    def inject(request: Request) -> None:
        deployment.submit(request)
        schedule_next()

    def schedule_next() -> None:
        request = next(it, None)
        if request is None or (stop_s is not None and request.arrival_s > stop_s):
            return
        clock.call_at(request.arrival_s, lambda: inject(request))

    schedule_next()


def _offer_closed_loop(clock: VirtualClock, deployment, requests: list[Request], concurrency: int,
                       stop_s: float | None) -> None:
    it = iter(requests)

    def send() -> None:
        request = next(it, None)
        if request is None or (stop_s is not None and clock.now() > stop_s):
            return
        deployment.submit(dataclasses.replace(request, arrival_s=clock.now()))

    previous = deployment.on_record

    def on_record(record: dict) -> None:
        if previous is not None:
            previous(record)
        send()

    deployment.on_record = on_record
    for _ in range(concurrency):
        clock.call_at(0.0, send)


def run_sim(cfg: DictConfig, records_path: Path | None = None) -> RunResult:
    """Run one configuration in virtual time; with `records_path`, stream records there as Parquet parts.

    SIGINT/SIGTERM stop the run: every request already sent is recorded (the unfinished ones as
    interrupted) and the result says how far it got (`meta["interrupted"]`, `meta["offered"]`).
    """
    loadgen = cfg.loadgen
    require(loadgen.rate_rps is None or loadgen.rate_rps > 0,
            f"loadgen.rate_rps must be > 0 (or null for the workload's own rate), got {loadgen.rate_rps}")
    require(loadgen.concurrency is None or loadgen.concurrency >= 1,
            f"loadgen.concurrency must be >= 1 (or null for open loop), got {loadgen.concurrency}")
    saturate = loadgen.rate_rps is not None and math.isinf(loadgen.rate_rps)
    concurrency = saturation_in_flight(cfg) if saturate else loadgen.concurrency
    requests = build_workload(cfg.workload, rate_rps=None if saturate else loadgen.rate_rps)
    require(len(requests) > 0, f"workload {cfg.workload.name!r} produced no requests")
    clock = VirtualClock()
    built = build(cfg, clock, mode="sim")
    deployment = built.deployment

    bar = tqdm(total=len(requests), desc=f"sim {deployment.name}", unit="req", leave=False,
               disable=None if loadgen.progress else True, mininterval=0.5)
    stream = RecordStream(records_path)

    def on_record(record: dict) -> None:
        bar.update(1)
        stream.add(record)

    deployment.on_record = on_record
    stop_s = loadgen.max_duration_s
    if concurrency is not None:
        (offer_saturation if saturate else _offer_closed_loop)(clock, deployment, requests, int(concurrency), stop_s)
    else:
        _offer_open_loop(clock, deployment, requests, stop_s)
    interrupted = False
    try:
        with stop_on_signals():
            clock.run()
    except KeyboardInterrupt:
        interrupted = True
    deployment.close("interrupted: the run was stopped" if interrupted else
                     "run ended before the request completed")
    stream.flush()
    bar.close()

    frame = requests_frame(deployment.records).sort_values("request_id", ignore_index=True)
    finishes = frame["finish_s"].dropna()
    t_end = float(max(finishes.max() if len(finishes) else 0.0, clock.now(), 1e-9))
    timeseries = build_timeseries(
        frame, deployment=deployment.name, t_end=t_end, bin_s=float(cfg.analysis.timeseries.bin_s),
        n_prefill=built.n_prefill, n_prfaas=built.n_prfaas, n_decode=built.n_decode,
        decode_slots=sum(d.bs_max for d in deployment.decode), link=deployment.cross_link,
        reverse_link=deployment.reverse_link, roles_log=deployment.roles_log, evictions=deployment.evictions,
    )
    offered = loadgen.rate_rps
    if offered is None and concurrency is None and len(requests) > 1:
        span = requests[-1].arrival_s - requests[0].arrival_s
        offered = (len(requests) - 1) / span if span > 0 else math.nan
    meta = {
        "deployment": deployment.name,
        "mode": "sim",
        "offered_rps": float(offered) if offered is not None else math.nan,
        "concurrency": concurrency,
        "threshold_tokens": built.threshold_tokens,
        "n_prfaas": built.n_prfaas,
        "n_prefill": built.n_prefill,
        "n_decode": built.n_decode,
        "workload": str(cfg.workload.name),
        "model": str(cfg.model.name),
        "link_capacity_gbps": float(cfg.link.capacity_gbps) if built.n_prfaas else math.nan,
        "seed": cfg.workload.get("seed"),
        "sim_events": clock.events_run,
        "interrupted": interrupted,
        "offered": len(deployment.records),
        "stopped_at_s": clock.now(),
        "rebalances": len(deployment.rebalancer.decisions) if deployment.rebalancer is not None else 0,
        "plan": built.plan,
        **({"saturation": saturation_meta(cfg, frame, timeseries, built.plan, concurrency)} if saturate else {}),
    }
    return RunResult(frame, timeseries, meta, stream)
