"""`harness-serve` / `python -m harness.serve deployment=<name> [overrides]`: the emulated deployment
behind an OpenAI-compatible server, on the wall clock times `server.time_scale`, until interrupted.

Prints `listening on http://HOST:PORT` once it accepts connections (with `server.port=0`, the port
the OS chose). Each request's record streams to its run directory as it ends (a kill keeps what was
served); on SIGINT/SIGTERM it fails whatever is still in flight, stops, and writes what it served
(requests/timeseries/summary .parquet, the emulator's own view). See harness/runs/serve.py.
"""

from __future__ import annotations

from omegaconf import DictConfig

from harness.hydra_entry import hydra_entry


@hydra_entry(config_name="config")
def main(cfg: DictConfig) -> None:
    from harness.runs import serve

    serve(cfg)


if __name__ == "__main__":
    main()
