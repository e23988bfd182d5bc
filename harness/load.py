"""`harness-load` / `python -m harness.load`: the load generator as a command.

With `target.url=http://HOST:PORT` it drives that OpenAI-compatible endpoint (`mode=url`); without,
it starts the configured emulated deployment in this process and drives it over HTTP (`mode=live`).
`mode=live` / `mode=url` may be given; any other mode (sim included), and mode=live with a target.url it
would not drive, exit 2.
Either way it writes the run directory a sim run writes (requests/timeseries/summary .parquet,
summary.json) plus chunks.parquet, and prints the load generator's health.
"""

from __future__ import annotations

from omegaconf import DictConfig

from harness.hydra_entry import hydra_entry


def _line(summary: dict, keys: tuple[str, ...]) -> str:
    return "  ".join(f"{k}={summary[k]:.4g}" if isinstance(summary.get(k), float) else f"{k}={summary.get(k)}"
                     for k in keys)


LOAD_MODES = ("live", "url")


def _mode_on_command_line() -> bool:
    """Whether the command line sets `mode` (the config's default, sim, means: choose from target.url)."""
    from hydra.core.hydra_config import HydraConfig

    try:
        task = HydraConfig.get().overrides.task
    except ValueError:  # called without Hydra
        return False
    return any(str(o).lstrip("+~").split("=", 1)[0] == "mode" for o in task)


def choose_mode(cfg: DictConfig, given: bool) -> str:
    """live or url: the one `given` on the command line, else url with target.url, else live. Any other
    mode, and mode=live with a target.url it would not drive, are bad input."""
    from harness.errors import InputError, choices

    mode, url = str(cfg.mode), cfg.target.url
    if mode == "sim" and not given:  # the config's default: not a choice
        return "url" if url else "live"
    if mode not in LOAD_MODES:
        raise InputError(f"mode={mode!r}: harness-load drives the emulated deployment behind HTTP in this process "
                         f"(mode=live) or the endpoint at target.url (mode=url); valid: {choices(LOAD_MODES)} "
                         "(without mode: url when target.url is set, else live)"
                         + ("; a sim run is `harness mode=sim`" if mode == "sim" else ""))
    if mode == "live" and url:
        raise InputError(f"mode=live starts the emulated deployment and drives it, not target.url={url}; "
                         "drop mode=live to drive the URL, or target.url to drive the emulator")
    return mode


@hydra_entry(config_name="config")
def main(cfg: DictConfig) -> None:
    from harness.runs import run, run_dir

    cfg.mode = choose_mode(cfg, _mode_on_command_line())
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
