"""Emulator speed: the paper case in sim mode, simulated seconds per wall second and peak memory.

    .venv/bin/python benchmarks/bench_sim.py [--requests 10000] [--rate 3.0] [overrides...]

Anchors (issue 4): at least 500x real time and under 500 MB peak RSS on a 2-core machine for
>= 10,000 requests with 1024 output tokens each. Prints one line per deployment, each with its
events/s beside a bare `heapq` push+pop loop timed in the same process just before it (issue 17's
ratio: an event is a clock callback fired, `meta["sim_events"]`). `--profile N` prints the top N
functions of a cProfile of the first deployment's run, by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import heapq
import io
import itertools
import pstats
import random
import resource
import sys
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's harness, not an installed one

from harness.schema import register_configs
from harness.sim import run_sim

CONF = str(Path(__file__).resolve().parent.parent / "conf")


def heap_loop_per_s(n: int = 500_000, live: int = 1_000) -> float:
    """Events per second of a bare event loop: pop the earliest (time, seq, callback) from a heapq
    holding `live` entries and call it; each callback pushes one new entry. That is the least an
    event of the emulator's clock can cost in Python (no clock object, no bookkeeping)."""
    rng = random.Random(0)
    push, pop = heapq.heappush, heapq.heappop
    heap: list = []
    seq = itertools.count()
    now = 0.0

    def callback() -> None:
        push(heap, (now + rng.random(), next(seq), callback))

    for _ in range(live):
        callback()
    t0 = time.perf_counter()
    for _ in range(n):
        now, _, fn = pop(heap)
        fn()
    return n / (time.perf_counter() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=3.0, help="offered load, req/s")
    parser.add_argument("--deployments", default="prfaas_pd,homogeneous_pd,naive_hetero")
    parser.add_argument("--profile", type=int, default=0, help="print the top N functions by own time")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    register_configs()
    with initialize_config_dir(config_dir=CONF, version_base=None):  # warm-up: imports, not the emulator
        run_sim(compose("config", overrides=["workload.num_requests=10", "loadgen.progress=false"]))
    for k, name in enumerate(args.deployments.split(",")):
        with initialize_config_dir(config_dir=CONF, version_base=None):
            cfg = compose("config", overrides=[f"deployment={name}", f"workload.num_requests={args.requests}",
                                               f"loadgen.rate_rps={args.rate}", "loadgen.progress=false",
                                               *args.overrides])
        heap_rate = heap_loop_per_s()
        profiler = cProfile.Profile() if args.profile and k == 0 else None
        t0 = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        result = run_sim(cfg)
        if profiler is not None:
            profiler.disable()
        wall = time.perf_counter() - t0
        sim_s = float(result.requests["finish_s"].max())
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        rate = result.meta["sim_events"] / wall
        print(f"{name:15s} requests={len(result.requests):6d} simulated={sim_s:9.1f}s wall={wall:6.2f}s "
              f"speed={sim_s / wall:8.0f}x events={result.meta['sim_events']} "
              f"events/s={rate:9.0f} heap_loop/s={heap_rate:9.0f} ratio={rate / heap_rate:5.3f} "
              f"peak_rss={rss_mb:6.0f}MB{' (profiled: slower)' if profiler is not None else ''}", flush=True)
        if profiler is not None:
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(args.profile)
            print(out.getvalue())


if __name__ == "__main__":
    main()
