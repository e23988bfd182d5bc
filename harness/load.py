"""`harness-load` / `python -m harness.load`: the load generator as a command.

With `target.url=http://HOST:PORT` it drives that OpenAI-compatible endpoint (`mode=url`); without,
it starts the configured emulated deployment in this process and drives it over HTTP (`mode=live`).
Either way it writes the run directory a sim run writes (requests/timeseries/summary .parquet,
summary.json) plus chunks.parquet, and prints the load generator's health.
"""

from __future__ import annotations

from omegaconf import DictConfig

from harness.hydra_entry import hydra_entry


def _line(summary: dict, keys: tuple[str, ...]) -> str:
    return "  ".join(f"{k}={summary[k]:.4g}" if isinstance(summary.get(k), float) else f"{k}={summary.get(k)}"
                     for k in keys)


@hydra_entry(config_name="config")
def main(cfg: DictConfig) -> None:
    from harness.runs import run, run_dir

    if cfg.mode not in ("live", "url"):
        cfg.mode = "url" if cfg.target.url else "live"
    summary = run(cfg)
    print(_line(summary, ("deployment", "mode", "offered_rps", "completed", "failed", "throughput_rps",
                          "ttft_p50_s", "ttft_p90_s", "tpot_mean_s")))
    print(_line(summary, ("loadgen_valid", "loadgen_target_rps", "loadgen_achieved_rps", "loadgen_lateness_p99_ms",
                          "loadgen_loop_lag_p99_ms")))
    if not summary.get("loadgen_valid", True):
        print(f"INVALID: {summary.get('loadgen_invalid_reason')}")
    print(f"results: {run_dir(cfg)}")
    if summary.get("interrupted"):
        raise SystemExit(130)


if __name__ == "__main__":
    main()
