"""`harness-serve`'s run: the emulated deployment behind the OpenAI-compatible server until stopped.

The server keeps in memory only what `/metrics` needs: each request's record streams to
`requests.parquet.parts/` as it ends (the deployment and the live engine keep none), so a server
that runs for a week holds no more than one flush of records, and a kill keeps what it served. On
SIGINT/SIGTERM it fails whatever is still in flight (`interrupted`), stops, and writes the run
directory (requests/timeseries/summary .parquet, summary.json) from the parts: a server stopped before
any generation request came in writes them too (no rows, `n_requests` 0) and prints `served 0 requests`.

Every generation request it received has its row: refused ones (answered with an error status
before reaching the deployment) and abandoned ones (the client hung up first) too, marked in the
columns `refused`, `abandoned` and `http_status` (harness/live/engine.py). The summary counts them as
`refused_requests` (also in `failed`: the client got an error) and `abandoned_requests` (not in
`failed`: the server did not fail them), beside `interrupted_requests`.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from harness.analysis.summary import write_run
from harness.analysis.timeseries import build_timeseries
from harness.runs.recording import OutputError, RecordStream, streams_from, writing_to
from harness.runs.signals import stop_loop_on_signals


async def serve(cfg: DictConfig, run_dir: Path, *, stop: asyncio.Event | None = None,
                on_listening: Callable[[Any], None] | None = None) -> None:
    """Serve until SIGINT/SIGTERM (or `stop` is set); `on_listening(server)` once it accepts connections
    (default: print `listening on URL`)."""
    from harness.live.server import start_server

    server = await start_server(cfg)
    stop = asyncio.Event() if stop is None else stop
    loop = asyncio.get_running_loop()
    streams = streams_from(cfg, run_dir, "requests", on_error=lambda err: loop.call_soon_threadsafe(stop.set))
    stream = streams["requests"]
    server.built.deployment.keep_records = False
    server.built.deployment.mode = "serve"  # each record's `mode`, as the summary's (not the live engine's "live")

    def sink(record: dict) -> None:  # runs inside the emulator's timers: it must not raise
        try:
            stream.add(record)
        except OutputError:
            stop.set()

    server.engine.record_sink = sink
    try:
        # Any signal while serving is the stop; one that comes while the run directory is written waits for
        # it (the SignalHold around the command: harness/runs/assemble.py) and then stops the command.
        with stop_loop_on_signals(stop) as stopping:
            stopping.acted_on = True
            if on_listening is not None:
                on_listening(server)
            else:
                print(f"listening on {server.url}", flush=True)
            await stop.wait()
    finally:
        try:
            await server.stop()
        finally:
            await asyncio.to_thread(stream.abort if stream.error is not None else stream.close)
    if stream.error is not None:
        raise stream.error
    # Stopped before any generation request came in: the run directory is written all the same (no rows,
    # n_requests 0, latencies NaN), so a job that probes the server and stops it still finds its files.
    await asyncio.to_thread(_write_served, cfg, server, run_dir, stream)


def _write_served(cfg: DictConfig, server, run_dir: Path, stream: RecordStream) -> None:
    built, clock = server.built, server.clock
    frame = stream.read().sort_values("request_id", ignore_index=True)
    dep = built.deployment
    timeseries = build_timeseries(frame, deployment=dep.name, t_end=max(clock.now(), 1e-9),
                                  bin_s=float(cfg.analysis.timeseries.bin_s), n_prefill=built.n_prefill,
                                  n_prfaas=built.n_prfaas, n_decode=built.n_decode,
                                  decode_slots=sum(d.bs_max for d in dep.decode), link=dep.cross_link)
    meta = {"deployment": dep.name, "mode": "serve", "threshold_tokens": built.threshold_tokens,
            "n_prfaas": built.n_prfaas, "n_prefill": built.n_prefill, "n_decode": built.n_decode,
            "model": str(cfg.model.name), "time_scale": clock.time_scale, "server_events": clock.events_run,
            "server_lag_max_ms": clock.max_lag_s / clock.time_scale * 1e3, "plan": built.plan,
            "refused_requests": _count(frame, "refused"), "abandoned_requests": _count(frame, "abandoned"),
            "interrupted": _count(frame, "interrupted") > 0,  # the stop cut requests off (a bool, as other modes')
            "burstiness": math.nan}  # its clients' pacing is theirs: unknown here (summary.json null)
    with writing_to(run_dir):
        summary = write_run(run_dir, frame, timeseries, meta, cfg.analysis)
    stream.discard_parts()
    if frame.empty:
        print(f"served 0 requests (none came in before the stop); records: {run_dir}", flush=True)
        return
    print(f"served {len(frame)} requests: {summary['completed']} completed, {summary['failed']} failed "
          f"({meta['refused_requests']} refused), {meta['abandoned_requests']} abandoned by their clients, "
          f"{summary['interrupted_requests']} interrupted by the stop; records: {run_dir}", flush=True)


def _count(frame, column: str) -> int:
    """Rows whose `column` is true (0 without the column)."""
    return int(frame[column].fillna(False).astype(bool).sum()) if column in frame.columns else 0
