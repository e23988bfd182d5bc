"""`python -m harness` / `harness`: one run (one deployment, one workload, one offered load).

With `-m` it is a suite: Hydra sweeps the parameters the experiment sets, each run writes its own
directory, and the report callback summarises the sweep at the end (`report.parquet`, figures,
a printed table). See README "Runs and suites".
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import InputError, choices
from harness.hydra_entry import hydra_entry

if TYPE_CHECKING:
    from omegaconf import DictConfig

MODES = ("sim", "live", "url")


def _run_dir(cfg: DictConfig) -> Path:
    from hydra.core.hydra_config import HydraConfig  # Hydra only once a run starts (fast --help)

    try:
        return Path(HydraConfig.get().runtime.output_dir)
    except ValueError:  # called without Hydra (tests): use cfg.out_dir
        return Path(cfg.out_dir)


def run(cfg: DictConfig) -> dict:
    """Run one configuration and write its directory; returns the summary row."""
    from harness.analysis.summary import write_run

    if cfg.mode not in MODES:
        raise InputError(f"mode={cfg.mode!r} is not available in this build; valid: {choices(MODES)}")
    out = _run_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.mode == "sim":
        from harness.sim import run_sim

        result = run_sim(cfg, records_path=out / "requests.parquet")
    else:  # live: the emulator behind HTTP in this process; url: an external endpoint
        from harness.loadgen.run import run_live, run_url, write_extras

        result = run_live(cfg) if cfg.mode == "live" else run_url(cfg)
    summary = write_run(out, result.requests, result.timeseries, result.meta, cfg.analysis)
    if getattr(result, "stream", None) is not None:
        result.stream.discard_parts()
    if result.meta.get("interrupted"):
        print(f"interrupted at t={result.meta.get('stopped_at_s', float('nan')):.1f} s (run clock): "
              f"{result.meta.get('offered')} requests sent, each recorded in {out / 'requests.parquet'}")
    if cfg.mode != "sim":
        write_extras(out, result)
    return summary


@hydra_entry(config_name="config")
def main(cfg: DictConfig) -> None:
    summary = run(cfg)
    keys = ("deployment", "offered_rps", "completed", "failed", "throughput_rps", "ttft_mean_s", "ttft_p90_s",
            "tpot_mean_s", "egress_gbps_mean", "offload_fraction")
    line = "  ".join(f"{k}={summary[k]:.4g}" if isinstance(summary.get(k), float) else f"{k}={summary.get(k)}"
                     for k in keys)
    print(line)
    print(f"results: {_run_dir(cfg)}")
    if summary.get("interrupted"):
        raise SystemExit(130)


if __name__ == "__main__":
    main()
