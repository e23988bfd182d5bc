"""Live and url runs: the same run directory as a sim run, measured over HTTP.

`mode=live` builds the configured deployment behind the OpenAI-compatible server in this process
(127.0.0.1, port 0, the wall clock times `server.time_scale`) and drives it with the load generator;
`mode=url` drives `target.url`, any OpenAI-compatible endpoint. Latencies in `requests.parquet`
are the client's (send to first chunk, ...); in live runs the emulator's own view of each request
(route, cached tokens, KV bytes, prefill and decode times) is joined in from its records, moved
onto the load generator's clock, so the time series and egress figures are those of a sim run.
Each request's client row (and its chunks) streams to the parts as it ends; the join happens when
the run ends, so a killed run keeps the client's view of every finished request.
"""

from __future__ import annotations

import asyncio
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from omegaconf import DictConfig

from harness.analysis.frames import requests_frame
from harness.analysis.summary import percentiles_of, vllm_chunk_metrics
from harness.analysis.timeseries import bin_edges, build_timeseries, occupancy
from harness.errors import require
from harness.loadgen.health import loadgen_health, no_completion_warning
from harness.loadgen.run import HttpLoad, check_target, chunks_frame, client_rows, drive
from harness.loadgen.settings import burstiness, lg_get
from harness.loadgen.timescale import announced_mismatch
from harness.runs.closed_loop import saturation_meta
from harness.runs.offer import Offer, make_offer
from harness.runs.recording import OutputError, RecordStream, streams_from
from harness.runs.signals import stop_loop_on_signals
from harness.runs.sim import RunResult
from harness.workload.turns import predecessors

_START_MARGIN_WALL_S = 0.05  # live runs start this long (at least) after the server is up
# Columns of an emulator record that are durations, not times on its clock (those end in _s too).
_SERVER_DURATIONS = ("ttft_s", "tpot_s", "e2e_s", "prefill_s")
# Emulator columns the client measures too: kept beside the client's as server_<name>.
_SERVER_OWN_VIEW = ("arrival_s", "first_token_s", "finish_s", "error")
# Times build_timeseries must not see moved (durations), when rows are put back on the emulator's clock.
_ROW_DURATIONS = ("ttft_s", "tpot_s", "e2e_s", "lateness_s", "itl_max_s", "server_ttft_s", "server_e2e_s",
                  "server_tpot_s", "prefill_s")


def run_live(cfg: DictConfig, run_dir: Path | None = None) -> RunResult:
    check_target(cfg.target)  # before the emulator starts
    return asyncio.run(_run(cfg, live=True, run_dir=run_dir))


def run_url(cfg: DictConfig, run_dir: Path | None = None) -> RunResult:
    require(bool(cfg.target.url), "mode=url needs target.url=http://HOST:PORT (an OpenAI-compatible endpoint)")
    check_target(cfg.target)  # before the workload is built or anything is sent
    return asyncio.run(_run(cfg, live=False, run_dir=run_dir))


def _row_sink(streams: dict[str, RecordStream], stop: asyncio.Event):
    """Stream each ended request's row and chunks; a write failure stops the run (reported after it)."""
    loop = asyncio.get_running_loop()
    for stream in streams.values():
        stream.on_error = lambda err: loop.call_soon_threadsafe(stop.set)

    def on_row(row: dict, chunks: list[dict]) -> None:
        try:
            streams["requests"].add(row)
            for chunk in chunks:
                streams["chunks"].add(chunk)
        except OutputError:
            stop.set()

    return on_row


async def drive_url(cfg: DictConfig, run_dir: Path | None, mode: str = "url") -> RunResult:
    """A url run on the caller's event loop (mode=testbed drives its router this way; `mode` labels the rows)."""
    return await _run(cfg, live=False, run_dir=run_dir, mode=mode)


async def _run(cfg: DictConfig, *, live: bool, run_dir: Path | None, mode: str | None = None) -> RunResult:
    offer = make_offer(cfg, stream=True)  # a lazy stream where it can: memory follows what is sent
    server = None
    if live:
        # deploy/costmodel only when emulating
        from harness.live.server import start_server

        server = await start_server(cfg, port=0)
        print(f"listening on {server.url}", file=sys.stderr, flush=True)
    time_scale = float(cfg.server.time_scale) if live else 1.0
    url = server.url if server is not None else str(cfg.target.url)
    start_ns = model = label = None
    if server is not None:
        # Start the run on a bin boundary of the emulator's clock, a moment from now, so the
        # emulator's logs (link, roles, evictions) bin exactly like the load generator's rows.
        bin_s = float(cfg.analysis.timeseries.bin_s)
        zero_s = bin_s * math.ceil((server.clock.now() + _START_MARGIN_WALL_S * time_scale) / bin_s)
        start_ns = round(server.clock.to_loop_time(zero_s) * 1e9)
        model = str(cfg.server.model_name or cfg.model.name)
        label = str(server.built.deployment.name)
    streams = streams_from(cfg, run_dir, "requests", "chunks", frames={"chunks": chunks_frame})
    block_tokens = int(cfg.workload.get("block_tokens", 512))
    try:
        with stop_loop_on_signals() as stop:
            load = await drive(offer.requests, url, cfg.target, cfg.loadgen, mode=mode or ("live" if live else "url"),
                               concurrency=offer.concurrency, time_scale=time_scale, start_ns=start_ns, model=model,
                               label=label, block_tokens=block_tokens, stop=stop.event,
                               on_row=_row_sink(streams, stop.event),
                               predecessors=predecessors(offer.requests, block_tokens) if offer.saturate else None)
            stop.acted_on = load.result.interrupted
        for stream in streams.values():
            stream.close()
    except BaseException:
        for stream in streams.values():
            stream.abort()
        raise
    finally:
        if server is not None:
            await server.stop()
    result = _assemble(cfg, load, server, url, offer)
    result.streams, result.t0_ns = streams, load.result.t0_ns
    result.meta.update(time_scale_source=load.time_scale_source, max_concurrency=lg_get(cfg, "max_concurrency"),
                       burstiness=burstiness(cfg),
                       vllm=vllm_chunk_metrics(result.extras["chunks"], result.requests, percentiles_of(cfg.analysis)))
    if offer.saturate:  # a capacity run: summarised as a sim one (harness/runs/closed_loop.py)
        plan = server.built.plan if server is not None else None
        result.meta["saturation"] = saturation_meta(cfg, result.requests, result.timeseries, plan,
                                                    int(offer.concurrency or 0))
    mismatch = announced_mismatch(load.result.records, load.result.time_scale)
    if mismatch:
        print(f"warning: {mismatch}", file=sys.stderr, flush=True)
        result.meta["time_scale_warning"] = mismatch
    return result


def _assemble(cfg: DictConfig, load: HttpLoad, server, url: str, offer: Offer) -> RunResult:
    result, label, model = load.result, load.label, load.model
    t0, scale = result.t0_ns, result.time_scale
    rows, chunks, warm = client_rows(load)
    extras = {"chunks": chunks}
    if warm is not None:
        extras["warmup"] = warm
    lg = cfg.loadgen
    problems: list[str] = []
    meta: dict[str, Any] = {"deployment": label, "mode": load.mode, "offered_rps": offer.offered_rps,
                            "concurrency": offer.concurrency,
                            "workload": str(cfg.workload.name), "seed": cfg.workload.get("seed"),
                            "time_scale": scale, "target_url": url, "served_model": model,
                            "loadgen_cpu_s": result.cpu_s, "loadgen_wall_s": result.wall_s,
                            "interrupted": result.interrupted, "offered": len(result.records),
                            "stopped_at_s": (result.end_ns - t0) / 1e9 * scale}
    bin_s = float(cfg.analysis.timeseries.bin_s)
    if server is not None:
        clock, built = server.clock, server.built
        shift_s = (t0 / 1e9 - clock.to_loop_time(0.0)) * scale  # emulator clock at the run's zero
        shift_s = bin_s * round(shift_s / bin_s)  # exact: the run started on a bin boundary
        rows = _join_server_records(rows, built.deployment.records, server.engine.client_ids, shift_s)
        frame = requests_frame(rows).sort_values("request_id", ignore_index=True)
        lag = {"lag_p50_ms": clock.lag_wall_ms(50), "lag_p99_ms": clock.lag_wall_ms(99),
               "lag_max_ms": clock.max_lag_s / scale * 1e3, "events": clock.events_run,
               "stream_interval_tokens": server.options.stream_interval_tokens}
        if lag["lag_p99_ms"] > float(cfg.server.max_lag_ms):
            problems.append(f"emulator timer lag P99 {lag['lag_p99_ms']:.2f} ms > server.max_lag_ms="
                            f"{float(cfg.server.max_lag_ms):g}")
        timeseries = _deployment_timeseries(frame, built, shift_s, bin_s)
        meta.update({"threshold_tokens": built.threshold_tokens, "n_prfaas": built.n_prfaas,
                     "n_prefill": built.n_prefill, "n_decode": built.n_decode, "model": str(cfg.model.name),
                     "link_capacity_gbps": float(cfg.link.capacity_gbps) if built.n_prfaas else math.nan,
                     "server": lag, "plan": built.plan,
                     "rebalances": len(getattr(getattr(built.deployment, "rebalancer", None), "decisions", ()))})
    else:
        frame = requests_frame(rows).sort_values("request_id", ignore_index=True) if rows else requests_frame([])
        timeseries = _client_timeseries(frame, label, bin_s)
        meta.update({"threshold_tokens": math.nan, "n_prfaas": math.nan, "n_prefill": math.nan,
                     "n_decode": math.nan, "model": model, "link_capacity_gbps": math.nan})
    health = loadgen_health(result.records, result.loop_lag_ns, open_loop=result.open_loop, time_scale=scale,
                            max_lateness_ms=float(lg.max_lateness_ms), min_rate_fraction=float(lg.min_rate_fraction),
                            max_loop_lag_ms=float(lg.max_loop_lag_ms), other_problems=problems)
    health["cpu_ms_per_request"] = result.cpu_s / max(1, len(result.records)) * 1e3
    meta["loadgen"] = health
    if not health["valid"]:
        print(f"warning: this run is marked invalid (loadgen_valid=false): {health['invalid_reason']}",
              file=sys.stderr, flush=True)
    nothing = no_completion_warning(result.records)  # recorded as data, exit 0: but say so
    if nothing:
        print(f"warning: {nothing}", file=sys.stderr, flush=True)
    return RunResult(frame, timeseries, meta, extras=extras)


def _join_server_records(rows: list[dict], server_records: list[dict], client_ids: dict[int, str],
                         shift_s: float) -> list[dict]:
    """Add the emulator's view to each client row (matched through the X-Request-Id header).

    The client's own columns win (its latencies are the measurement); the emulator's other columns
    are added, its times moved onto the run clock, its latencies kept as server_ttft_s etc.
    """
    by_client: dict[str, dict] = {}
    for rec in server_records:
        cid = client_ids.get(rec["request_id"])
        if cid is not None:
            by_client[cid] = rec
    for row in rows:
        served = by_client.get(str(row["request_id"]))
        if served is None:  # refused before it reached the deployment (e.g. a 400): never routed
            # (route null), and no prefix was hit or fetched for it
            row.update(cache_hit_tokens=0, fetched_tokens=0, cached_tokens=row.get("cached_tokens") or 0)
            continue
        for key, value in served.items():
            if key.endswith("_s") and key not in _SERVER_DURATIONS and isinstance(value, float):
                value -= shift_s  # a time on the emulator's clock
            if key in _SERVER_DURATIONS or key in _SERVER_OWN_VIEW:
                row[f"server_{key}"] = value
            elif key not in row or row[key] is None or (key == "cached_tokens" and not row.get("usage_reported")):
                row[key] = value
    return rows


def _t_end(frame: pd.DataFrame) -> float:
    ends = frame[["finish_s", "sent_s"]].to_numpy(dtype=float, na_value=np.nan) if len(frame) else np.zeros((0, 2))
    finite = ends[np.isfinite(ends)]
    return float(max(finite.max() if finite.size else 0.0, 1e-9))


def _deployment_timeseries(frame: pd.DataFrame, built, shift_s: float, bin_s: float) -> pd.DataFrame:
    """The sim run's time series from the emulator's own stamps, built on its clock (where its link
    and role logs live), then moved back onto the run clock; `shift_s` is a whole number of bins."""
    dep = built.deployment
    on_server = frame.copy()
    for key in ("arrival_s", "first_token_s", "finish_s"):  # the deployment's queues, not the client's view
        if f"server_{key}" in on_server.columns:
            on_server[key] = on_server[f"server_{key}"].fillna(on_server[key])
    for column in on_server.columns:
        if column.endswith("_s") and column not in _ROW_DURATIONS and on_server[column].dtype.kind == "f":
            on_server[column] = on_server[column] + shift_s
    optional = {name: getattr(dep, attr) for name, attr in (("reverse_link", "reverse_link"),
                ("roles_log", "roles_log"), ("evictions", "evictions")) if hasattr(dep, attr)}
    ts = build_timeseries(
        on_server, deployment=dep.name, t_end=_t_end(frame) + shift_s, bin_s=bin_s, n_prefill=built.n_prefill,
        n_prfaas=built.n_prfaas, n_decode=built.n_decode, decode_slots=sum(d.bs_max for d in dep.decode),
        link=dep.cross_link, **optional)
    ts["t_s"] = ts["t_s"] - shift_s
    return ts[ts["t_s"] + ts["bin_s"] > bin_s / 2].reset_index(drop=True)  # bins ending after the run's zero


def _client_timeseries(frame: pd.DataFrame, label: str, bin_s: float) -> pd.DataFrame:
    """What a client can see of an external endpoint per bin: requests in flight, arrivals, completions."""
    t_end = _t_end(frame)
    edges, bin_s = bin_edges(t_end, bin_s)  # at most MAX_BINS rows, whatever the span
    n_bins = len(edges) - 1
    sent = frame["sent_s"].to_numpy(dtype=float, na_value=np.nan) if len(frame) else np.zeros(0)
    done = frame["done_s"].to_numpy(dtype=float, na_value=np.nan) if len(frame) else np.zeros(0)
    finish = frame["finish_s"].to_numpy(dtype=float, na_value=np.nan) if len(frame) else np.zeros(0)
    return pd.DataFrame({
        "deployment": label, "t_s": edges[:-1], "bin_s": bin_s, "egress_gbps": np.full(n_bins, np.nan),
        "link_capacity_gbps": np.full(n_bins, np.nan), "in_flight": occupancy(sent, done, edges),
        "arrivals_per_s": np.histogram(sent[np.isfinite(sent)], edges)[0] / bin_s,
        "completions_per_s": np.histogram(finish[np.isfinite(finish)], edges)[0] / bin_s,
    })
