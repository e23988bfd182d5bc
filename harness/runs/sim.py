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
from pathlib import Path
from typing import Any, cast

import pandas as pd
from omegaconf import DictConfig
from tqdm import tqdm

from harness.analysis.columns import Frame, ParquetColumns
from harness.analysis.frames import requests_frame
from harness.analysis.saturation import COLUMNS as SATURATION_COLUMNS
from harness.analysis.timeseries import bin_edges, build_timeseries, link_series
from harness.clock import VirtualClock
from harness.deploy.build import build
from harness.loadgen.settings import burstiness
from harness.runs.closed_loop import offer_saturation, saturation_meta
from harness.runs.offer import make_offer
from harness.runs.recording import (
    RecordStream,
    stop_on_signals,
    streams_from,
    writing_to,
)
from harness.workload.request import Request

# A request cut off by stopping the run: its error (as a live run's), and the column that marks it. Only an
# interrupted run has the column (a run that ends by itself writes the files it always did); parts written
# before the stop lack it, later rows recorded without it hold nulls: False in the final file, as live's.
# The same for `ended_s` (when a cut-off request left, for the time series): NaN in the other rows.
INTERRUPTED_ERROR = "interrupted: the run was stopped"
INTERRUPTED = "interrupted"


def _interrupted_as_bool(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with its `interrupted` column (if any) as bool: False where a row did not say True."""
    if INTERRUPTED in frame.columns:
        frame[INTERRUPTED] = frame[INTERRUPTED].isin([True])
    return frame


@dataclass
class RunResult:
    requests: Frame  # a ParquetColumns reading requests.parquet when `requests_written`
    timeseries: pd.DataFrame
    meta: dict[str, Any]
    streams: dict[str, RecordStream] = field(default_factory=dict, repr=False)  # streamed parts to discard
    extras: dict[str, pd.DataFrame] = field(default_factory=dict)  # more files of the run (chunks, warmup)
    requests_written: bool = False  # requests.parquet is in place; `requests` reads its columns one at a time
    t0_ns: int | None = None  # HTTP runs: the run's zero on the monotonic clock (joins a testbed's own stamps)


def _offer_open_loop(clock: VirtualClock, deployment, requests: Sequence[Request], stop_s: float | None) -> None:
    it = iter(requests)
    submit, fire_at = deployment.submit, clock.fire_at
    due: Request | None = next(it, None)  # the one arrival scheduled (they are chained one at a time)

    def inject() -> None:
        nonlocal due
        submit(cast(Request, due))
        due = next(it, None)  # the next arrival, chained from this one
        if due is not None and (stop_s is None or due.arrival_s <= stop_s):
            fire_at(due.arrival_s, inject)

    if due is not None and (stop_s is None or due.arrival_s <= stop_s):
        fire_at(due.arrival_s, inject)


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
        ids_as_ranges = getattr(requests, "ids_as_ranges", None)  # a RequestStream: ids counted, not read
        if ids_as_ranges is not None:
            ids_as_ranges()
    recorded = 0

    streams = streams_from(cfg, run_dir, "requests")
    stream = streams["requests"]
    bar = tqdm(total=len(requests), desc=f"sim {deployment.name}", unit="req", leave=False,
               disable=None if cfg.loadgen.progress else True, mininterval=0.5)

    show = not bar.disable  # a disabled bar's update is still a call per record
    streaming = stream.path is not None  # else `stream.add` keeps nothing (the deployment keeps the records)
    last_finish = 0.0  # the latest finish_s recorded (the time series' end, without reading the file)

    def on_record(record: dict) -> None:
        nonlocal recorded, last_finish
        recorded += 1
        if show:
            bar.update(1)
        finish = record.get("finish_s")
        if finish is not None and finish == finish and finish > last_finish:  # NaN: not finished
            last_finish = finish
        if streaming:
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
            with stop_on_signals(clock):
                clock.run()
        except KeyboardInterrupt:
            interrupted = True
        if interrupted:  # as a live run: nothing more is sent (a closed loop's next requests), and the
            deployment.on_record = on_record  # requests in flight are cut off (`interrupted`), not failed
            deployment.close(INTERRUPTED_ERROR, interrupted=True)
        else:
            deployment.close("run ended before the request completed")
        stream.close()
    except BaseException:
        stream.abort()  # a full disk or a crash: what could be written stays readable in the parts
        raise
    finally:
        bar.close()

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
        "burstiness": burstiness(cfg),  # vLLM's key, from the workload's arrivals as in live and url runs
    }
    saturate, plan = offer.saturate, built.plan
    ts_args: dict[str, Any] = dict(deployment=deployment.name, bin_s=float(cfg.analysis.timeseries.bin_s),
                                   n_prefill=built.n_prefill, n_prfaas=built.n_prfaas, n_decode=built.n_decode,
                                   decode_slots=sum(d.bs_max for d in deployment.decode))
    logs: dict[str, Any] = dict(link=deployment.cross_link, reverse_link=deployment.reverse_link,
                                roles_log=deployment.roles_log, evictions=deployment.evictions)
    written = False
    frame: Frame
    if deployment.keep_records:
        frame = _interrupted_as_bool(requests_frame(deployment.records).sort_values("request_id", ignore_index=True))
        finishes = frame["finish_s"].dropna()
        t_end = float(max(finishes.max() if len(finishes) else 0.0, clock.now(), 1e-9))
        timeseries = build_timeseries(frame, t_end=t_end, **ts_args, **logs)
    else:  # bounded memory: the emulator's logs binned, the emulator released, then the file from the parts
        t_end = float(max(last_finish, clock.now(), 1e-9))
        edges, width = bin_edges(t_end, ts_args["bin_s"])
        link_columns = link_series(edges, width, **logs)
        del logs, deployment, built, clock, offer, requests, on_record
        gc.collect()  # the deployment's instances and timers refer to one another
        assert stream.path is not None  # records are kept unless there is a run directory
        with writing_to(stream.path):
            written = stream.write_sorted("request_id", fill={INTERRUPTED: False, "ended_s": math.nan})
        frame = ParquetColumns(stream.path) if written else \
            _interrupted_as_bool(stream.read().sort_values("request_id", ignore_index=True))
        timeseries = build_timeseries(frame, t_end=t_end, **ts_args, link_columns=link_columns)
        del link_columns
    if saturate:
        loop = frame.frame(SATURATION_COLUMNS) if isinstance(frame, ParquetColumns) else frame
        meta["saturation"] = saturation_meta(cfg, loop, timeseries, plan, int(concurrency or 0))
    if isinstance(frame, ParquetColumns):
        frame.release()  # the summary reads its columns afresh, a few at a time
    return RunResult(frame, timeseries, meta, streams, requests_written=written)
