"""`harness-serve` / `python -m harness.serve deployment=<name> [overrides]`: the emulated deployment
behind an OpenAI-compatible server, on the wall clock times `server.time_scale`, until interrupted.

Prints `listening on http://HOST:PORT` once it accepts connections (with `server.port=0`, the port
the OS chose). On SIGINT/SIGTERM it fails whatever is still in flight, stops, and writes what it
served (requests/timeseries/summary .parquet, the emulator's own view) into its run directory.
"""

from __future__ import annotations

import asyncio
import signal

from omegaconf import DictConfig

from harness.hydra_entry import hydra_entry


async def serve(cfg: DictConfig) -> None:
    from harness.cli import _run_dir
    from harness.live.server import start_server

    server = await start_server(cfg)
    print(f"listening on {server.url}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await server.stop()
    records = server.built.deployment.records
    if records:
        await asyncio.to_thread(_write_served, cfg, server, _run_dir(cfg))


def _write_served(cfg: DictConfig, server, run_dir) -> None:
    from harness.analysis.frames import requests_frame
    from harness.analysis.summary import write_run
    from harness.analysis.timeseries import build_timeseries

    built, clock = server.built, server.clock
    frame = requests_frame(built.deployment.records).sort_values("request_id", ignore_index=True)
    dep = built.deployment
    timeseries = build_timeseries(frame, deployment=dep.name, t_end=max(clock.now(), 1e-9),
                                  bin_s=float(cfg.analysis.timeseries.bin_s), n_prefill=built.n_prefill,
                                  n_prfaas=built.n_prfaas, n_decode=built.n_decode,
                                  decode_slots=sum(d.bs_max for d in dep.decode), link=dep.cross_link)
    meta = {"deployment": dep.name, "mode": "serve", "threshold_tokens": built.threshold_tokens,
            "n_prfaas": built.n_prfaas, "n_prefill": built.n_prefill, "n_decode": built.n_decode,
            "model": str(cfg.model.name), "time_scale": clock.time_scale, "server_events": clock.events_run,
            "server_lag_max_ms": clock.max_lag_s / clock.time_scale * 1e3, "plan": built.plan}
    write_run(run_dir, frame, timeseries, meta, cfg.analysis)
    print(f"served {len(frame)} requests; records: {run_dir}", flush=True)


@hydra_entry(config_name="config")
def main(cfg: DictConfig) -> None:
    asyncio.run(serve(cfg))


if __name__ == "__main__":
    main()
