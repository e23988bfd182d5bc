"""Assemble and run one configuration in any mode, and write its run directory.

The entry points (`harness`, `harness-load`, `harness-serve`) parse their arguments and call
`run(cfg)` or `serve(cfg)`; everything a run needs is built here from the config: the workload
and how it is offered (`loadgen.*`, harness/runs/offer.py), the target (`mode`: the emulated
deployment in virtual time, the same behind HTTP, or `target.url`), the recording (`recording.*`:
records stream to Parquet parts as requests end, harness/runs/recording.py) and the summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import InputError, choices

if TYPE_CHECKING:  # omegaconf only once a run starts (`--help` imports this module)
    from omegaconf import DictConfig

MODES = ("sim", "live", "url", "testbed")


def run_dir(cfg: DictConfig) -> Path:
    """The run's output directory: Hydra's for this job, else `cfg.out_dir` (called without Hydra)."""
    from hydra.core.hydra_config import HydraConfig

    try:
        return Path(HydraConfig.get().runtime.output_dir)
    except ValueError:  # called without Hydra (tests): use cfg.out_dir
        return Path(cfg.out_dir)


def run(cfg: DictConfig) -> dict[str, Any]:
    """Run one configuration and write its directory; returns the summary row."""
    return run_into(cfg, run_dir(cfg))


def run_into(cfg: DictConfig, out: Path) -> dict[str, Any]:
    """`run(cfg)` into the directory `out` (a driver that runs several configurations in one job).

    From here until the last file is written a signal never drops a finished row: the measurement stops
    on it (its requests in flight recorded as interrupted; one that came while the run was being set up
    stops it at its start), and outside the measurement it waits for the files (harness/runs/signals.py).
    """
    from harness.runs.signals import SignalHold

    with SignalHold():
        return _run_into(cfg, out)


def _run_into(cfg: DictConfig, out: Path) -> dict[str, Any]:
    from harness.analysis.frames import write_parquet
    from harness.analysis.summary import write_run
    from harness.runs.recording import writing_to

    if cfg.mode not in MODES:
        raise InputError(f"mode={cfg.mode!r} is not available in this build; valid: {choices(MODES)}")
    with writing_to(out):
        out.mkdir(parents=True, exist_ok=True)
    from harness.runs.capacity import is_search

    if is_search(cfg):  # loadgen.rate_rps=max: open-loop runs bisected to the capacity, then the run at it
        from harness.runs.capacity import run_search

        result = run_search(cfg, out)
    elif cfg.mode == "sim":
        from harness.runs.sim import run_sim

        result = run_sim(cfg, out)
    elif cfg.mode == "testbed":  # real engines in network namespaces behind a router, driven as a url
        from harness.testbed.run import run_testbed

        result = run_testbed(cfg, out)
    else:  # live: the emulator behind HTTP in this process; url: an external endpoint
        from harness.runs.http import run_live, run_url

        result = run_live(cfg, out) if cfg.mode == "live" else run_url(cfg, out)
    with writing_to(out):  # summary.parquet last but for summary.json: it marks the run complete
        for name, frame in result.extras.items():  # chunks.parquet, warmup.parquet
            write_parquet(frame, out / f"{name}.parquet")
        summary = write_run(out, result.requests, result.timeseries, result.meta, cfg.analysis,
                            requests_written=result.requests_written)
    for stream in result.streams.values():  # every final file is in place: the parts are redundant
        stream.discard_parts()
    if result.meta.get("interrupted"):
        print(f"interrupted at t={result.meta.get('stopped_at_s', float('nan')):.1f} s (run clock): "
              f"{result.meta.get('offered')} requests sent, each recorded in {out / 'requests.parquet'}",
              flush=True)
    return summary


def serve(cfg: DictConfig) -> None:
    """harness-serve: the emulated deployment behind HTTP until SIGINT/SIGTERM, then its run directory."""
    import asyncio

    from harness.runs.serve import serve as serve_async
    from harness.runs.signals import SignalHold

    with SignalHold():  # a signal while the run directory is written waits for it (harness/runs/serve.py)
        asyncio.run(serve_async(cfg, run_dir(cfg)))
