"""Sim mode: drive an emulated deployment with a workload in virtual time.

Open loop: each request is injected at its arrival offset (the arrival process of the workload,
at `loadgen.rate_rps` when set). Closed loop (`loadgen.concurrency=C`): C requests in flight;
each completion sends the next request at once (see harness/runs/offer.py). Arrivals are chained
one timer at a time, so the event heap stays small however long the trace. Records stream to
`requests.parquet.parts/` as requests end (harness/runs/recording.py).
"""

from __future__ import annotations

import dataclasses
import gc
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, cast

import pandas as pd
from omegaconf import DictConfig
from tqdm import tqdm

from harness.analysis.frames import requests_frame
from harness.analysis.timeseries import build_timeseries
from harness.clock import VirtualClock
from harness.deploy.build import build
from harness.deploy.capacity import offer_saturation, saturation_meta
from harness.runs.offer import make_offer
from harness.runs.recording import (
    RecordStream,
    read_columns,
    stop_on_signals,
    streams_from,
    writing_to,
)
from harness.workload.request import Request


@dataclass
class RunResult:
    requests: pd.DataFrame
    timeseries: pd.DataFrame
    meta: dict[str, Any]
    streams: dict[str, RecordStream] = field(default_factory=dict, repr=False)  # streamed parts to discard
    extras: dict[str, pd.DataFrame] = field(default_factory=dict)  # more files of the run (chunks, warmup)
    requests_written: bool = False  # requests.parquet is in place; `requests` holds the columns analysis reads


# The columns the summary, its vLLM-named keys and the per-run figures read (harness/analysis/metrics.py,
# summary.py, plots.py): a long run's analysis frame holds only these (the file has every column).
_SUMMARY_READS = ("deployment", "arrival_s", "input_tokens", "output_tokens", "cached_tokens", "cache_hit_tokens",
                  "route", "finish_s", "ttft_s", "tpot_s", "e2e_s", "kv_bytes_sent", "error", "interrupted",
                  "lateness_s", "prefill_instance", "prefill_start_s", "prefill_end_s")  # analysis/saturation.py
# The columns build_timeseries reads (read first, alone, while the emulator's link log is still held).
_TIMESERIES_READS = ("arrival_s", "prefill_start_s", "prefill_end_s", "kv_ready_s", "first_token_s", "finish_s",
                     "route", "cache_hit_tokens")


def _offer_open_loop(clock: VirtualClock, deployment, requests: Sequence[Request], stop_s: float | None) -> None:
    it = iter(requests)

    def inject(request: Request) -> None:
        deployment.submit(request)
        schedule_next()

    def schedule_next() -> None:
        request = next(it, None)
        if request is None or (stop_s is not None and request.arrival_s > stop_s):
            return
        clock.fire_at(request.arrival_s, partial(inject, request))

    schedule_next()


def _offer_closed_loop(clock: VirtualClock, deployment, requests: Sequence[Request], concurrency: int,
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


def run_sim(cfg: DictConfig, run_dir: Path | None = None) -> RunResult:
    """Run one configuration in virtual time; with `run_dir`, stream records to its
    requests.parquet.parts/ as they end (the caller writes the final files, then discards the parts).

    SIGINT/SIGTERM stop the run: every request already sent is recorded (the unfinished ones as
    interrupted) and the result says how far it got (`meta["interrupted"]`, `meta["offered"]`).
    """
    offer = make_offer(cfg, stream=True)
    requests, concurrency = offer.requests, offer.concurrency
    clock = VirtualClock()
    built = build(cfg, clock, mode="sim")
    deployment = built.deployment
    # Bounded memory: with a run directory the records live in its parts only (read back at the
    # end); an unbounded prefix pool keeps no blocks of a workload whose block ids are never shared.
    deployment.keep_records = run_dir is None
    if offer.unique_blocks and all(pool.capacity_bytes == math.inf for pool in deployment.pools.values()):
        for pool in deployment.pools.values():
            pool.forget_blocks()
    recorded = 0

    streams = streams_from(cfg, run_dir, "requests")
    stream = streams["requests"]
    bar = tqdm(total=len(requests), desc=f"sim {deployment.name}", unit="req", leave=False,
               disable=None if cfg.loadgen.progress else True, mininterval=0.5)

    show = not bar.disable  # a disabled bar's update is still a call per record

    def on_record(record: dict) -> None:
        nonlocal recorded
        recorded += 1
        if show:
            bar.update(1)
        stream.add(record)

    deployment.on_record = on_record
    stop_s = offer.max_duration_s
    if concurrency is not None:
        closed_loop = offer_saturation if offer.saturate else _offer_closed_loop
        # a saturation offer is a list (make_offer: its requests are read twice)
        closed_loop(clock, deployment, cast(list[Request], requests), int(concurrency), stop_s)
    else:
        _offer_open_loop(clock, deployment, requests, stop_s)
    interrupted = False
    try:
        try:
            with stop_on_signals():
                clock.run()
        except KeyboardInterrupt:
            interrupted = True
        deployment.close("interrupted: the run was stopped" if interrupted else
                         "run ended before the request completed")
        stream.close()
    except BaseException:
        stream.abort()  # a full disk or a crash: what could be written stays readable in the parts
        raise
    finally:
        bar.close()

    written = False
    if deployment.keep_records:
        frame = requests_frame(deployment.records).sort_values("request_id", ignore_index=True)
    else:  # bounded memory: the whole file from the parts, then only the columns each step reads
        assert stream.path is not None  # records are kept unless there is a run directory
        with writing_to(stream.path):
            written = stream.write_sorted("request_id")
        frame = read_columns(stream.path, only=_TIMESERIES_READS) if written else \
            stream.read().sort_values("request_id", ignore_index=True)
    finishes = frame["finish_s"].dropna()
    t_end = float(max(finishes.max() if len(finishes) else 0.0, clock.now(), 1e-9))
    timeseries = build_timeseries(
        frame, deployment=deployment.name, t_end=t_end, bin_s=float(cfg.analysis.timeseries.bin_s),
        n_prefill=built.n_prefill, n_prfaas=built.n_prfaas, n_decode=built.n_decode,
        decode_slots=sum(d.bs_max for d in deployment.decode), link=deployment.cross_link,
        reverse_link=deployment.reverse_link, roles_log=deployment.roles_log, evictions=deployment.evictions,
    )
    meta = {
        "deployment": deployment.name,
        "mode": "sim",
        "offered_rps": offer.offered_rps,
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
        "offered": recorded,
        "stopped_at_s": clock.now(),
        "rebalances": len(deployment.rebalancer.decisions) if deployment.rebalancer is not None else 0,
        "plan": built.plan,
    }
    if offer.saturate:
        meta["saturation"] = saturation_meta(cfg, frame, timeseries, built.plan, int(concurrency or 0))
    if written:  # the emulator's state (link log, pools) is no longer needed: the summary's columns next
        del frame, deployment, built, clock, offer, requests, on_record
        gc.collect()  # the deployment's instances and timers refer to one another
        assert stream.path is not None  # written: see above
        frame = read_columns(stream.path, only=_SUMMARY_READS)
    return RunResult(frame, timeseries, meta, streams, requests_written=written)
