"""Emulator speed: the paper case in sim mode, simulated seconds per wall second and peak memory.

    .venv/bin/python benchmarks/bench_sim.py [--requests 10000] [--rate 3.0] [overrides...]

Anchors (issue 4): at least 500x real time and under 500 MB peak RSS on a 2-core machine for
>= 10,000 requests with 1024 output tokens each. Prints one line per deployment.
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

from harness.schema import register_configs
from harness.sim import run_sim

CONF = str(Path(__file__).resolve().parent.parent / "conf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=3.0, help="offered load, req/s")
    parser.add_argument("--deployments", default="prfaas_pd,homogeneous_pd,naive_hetero")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    register_configs()
    with initialize_config_dir(config_dir=CONF, version_base=None):  # warm-up: imports, not the emulator
        run_sim(compose("config", overrides=["workload.num_requests=10", "loadgen.progress=false"]))
    for name in args.deployments.split(","):
        with initialize_config_dir(config_dir=CONF, version_base=None):
            cfg = compose("config", overrides=[f"deployment={name}", f"workload.num_requests={args.requests}",
                                               f"loadgen.rate_rps={args.rate}", "loadgen.progress=false",
                                               *args.overrides])
        t0 = time.perf_counter()
        result = run_sim(cfg)
        wall = time.perf_counter() - t0
        sim_s = float(result.requests["finish_s"].max())
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{name:15s} requests={len(result.requests):6d} simulated={sim_s:9.1f}s wall={wall:6.2f}s "
              f"speed={sim_s / wall:8.0f}x events={result.meta['sim_events']} "
              f"events/s={result.meta['sim_events'] / wall:9.0f} peak_rss={rss_mb:6.0f}MB")


if __name__ == "__main__":
    main()
