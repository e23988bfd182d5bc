"""Emulator speed: the paper case in sim mode, simulated seconds per wall second and peak memory.

    .venv/bin/python benchmarks/bench_sim.py [--requests 10000] [--rate 3.0] [overrides...]

Anchors (issue 4): at least 500x real time and under 500 MB peak RSS on a 2-core machine for
>= 10,000 requests with 1024 output tokens each. Prints one line per deployment, each with its
events/s beside a bare `heapq` push+pop loop timed in the same process just before it (issue 17's
ratio: an event is a clock callback fired, `meta["sim_events"]`). The same ratio is also given per CPU
second (steadier on a shared machine): for the whole `run_sim` (workload, emulator, records, time
series; process time of the run and of the heap loop) and for its event loop alone (`VirtualClock.run`,
which also streams the workload in; thread time of the loop and of the heap loop). `--repeats R` runs
each deployment R times and prints medians.
A second line per deployment gives the CPU seconds outside the event loop and what they leave the loop
per event for 0.25 over the whole run, beside what an event of the bare heap loop costs (the floor).
`--profile N` prints the top N functions of a cProfile of the first deployment's run, by own time.
The first line says whether the emulator core it runs is interpreted or compiled (a mypyc build in
place, an experiment: docs/results/benchmarks.md).
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
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's harness, not an installed one

import harness

harness.command_environment()  # before numpy and pyarrow load: measured as `python -m harness` runs

from hydra import compose, initialize_config_dir

from harness import clock as clock_module
from harness.runs.sim import run_sim
from harness.schema import register_configs

CONF = str(Path(__file__).resolve().parent.parent / "conf")


def heap_loop_per_s(n: int = 500_000, live: int = 1_000, timer=time.perf_counter) -> float:
    """Events per second of a bare event loop: pop the earliest (time, seq, callback) from a heapq
    holding `live` entries and call it; each callback pushes one new entry. That is the least an
    event of the emulator's clock can cost in Python (no clock object, no bookkeeping). `timer`:
    wall (perf_counter) or CPU (process_time) seconds."""
    rng = random.Random(0)
    push, pop = heapq.heappush, heapq.heappop
    heap: list = []
    seq = itertools.count()
    now = 0.0

    def callback() -> None:
        push(heap, (now + rng.random(), next(seq), callback))

    for _ in range(live):
        callback()
    t0 = timer()
    for _ in range(n):
        now, _, fn = pop(heap)
        fn()
    return n / (timer() - t0)


class _TimedClock(clock_module.VirtualClock):
    """The virtual clock, noting the CPU seconds its event loop took (the emulator core alone), on
    its own thread: the loop is single-threaded, and a BLAS worker still spinning after the planner's
    matrix work (~10-30 ms at the loop's start) is not the loop's work."""

    last_cpu_s = 0.0

    def run(self, until: float | None = None) -> None:
        c0 = time.thread_time()
        try:
            super().run(until)
        finally:
            _TimedClock.last_cpu_s = time.thread_time() - c0


# A core compiled by mypyc (an experiment: docs/results/benchmarks.md): `harness/clock` is an extension module,
# and interpreted code cannot subclass its classes, so the loop is timed through a wrapper instead
# (the clock's own bound methods set on it: the emulator's calls reach them without a detour).
COMPILED = not str(clock_module.__file__).endswith(".py")


class _TimedClockWrapper:
    def __init__(self) -> None:
        self._clock = clock = clock_module.VirtualClock()
        self.now, self.call_at, self.fire_at = clock.now, clock.call_at, clock.fire_at
        self.call_later = clock.call_later

    def __getattr__(self, name: str):
        return getattr(self._clock, name)

    def run(self, until: float | None = None) -> None:
        c0 = time.thread_time()
        try:
            self._clock.run(until)
        finally:
            _TimedClock.last_cpu_s = time.thread_time() - c0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=3.0, help="offered load, req/s")
    parser.add_argument("--deployments", default="prfaas_pd,homogeneous_pd,naive_hetero")
    parser.add_argument("--profile", type=int, default=0, help="print the top N functions by own time")
    parser.add_argument("--repeats", type=int, default=1, help="runs per deployment (medians printed)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    print(f"emulator core: {'compiled (mypyc)' if COMPILED else 'interpreted'}", flush=True)
    register_configs()
    with initialize_config_dir(config_dir=CONF, version_base=None):  # warm-up: imports, not the emulator
        run_sim(compose("config", overrides=["workload.num_requests=10", "loadgen.progress=false"]))
    for k, name in enumerate(args.deployments.split(",")):
        with initialize_config_dir(config_dir=CONF, version_base=None):
            cfg = compose("config", overrides=[f"deployment={name}", f"workload.num_requests={args.requests}",
                                               f"loadgen.rate_rps={args.rate}", "loadgen.progress=false",
                                               *args.overrides])
        rows = []
        for r in range(args.repeats):
            heap_rate = heap_loop_per_s()
            heap_cpu_rate = heap_loop_per_s(timer=time.process_time)
            heap_thread_rate = heap_loop_per_s(timer=time.thread_time)
            profiler = cProfile.Profile() if args.profile and k == 0 and r == 0 else None
            sim_module = sys.modules["harness.runs.sim"]
            sim_module.VirtualClock = _TimedClockWrapper if COMPILED else _TimedClock  # time the event loop
            t0, c0 = time.perf_counter(), time.process_time()
            if profiler is not None:
                profiler.enable()
            try:
                result = run_sim(cfg)
            finally:
                sim_module.VirtualClock = clock_module.VirtualClock
            if profiler is not None:
                profiler.disable()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            events = result.meta["sim_events"]
            sim_s = float(result.requests["finish_s"].max())
            rows.append({"wall": wall, "speed": sim_s / wall, "rate": events / wall, "heap": heap_rate,
                         "ratio": events / wall / heap_rate, "heap_cpu": heap_cpu_rate,
                         "ratio_cpu": events / cpu / heap_cpu_rate,
                         "ratio_loop_cpu": events / _TimedClock.last_cpu_s / heap_thread_rate,
                         # issue 17's floor: the CPU outside the event loop, and what that leaves the loop
                         # per event for 0.25 of the heap loop over the whole run, beside the bare loop's cost
                         "outside_cpu": cpu - _TimedClock.last_cpu_s,
                         "budget_us": (events / (0.25 * heap_cpu_rate) - (cpu - _TimedClock.last_cpu_s))
                         / events * 1e6,
                         "bare_us": 1e6 / heap_thread_rate})
            if profiler is not None:
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(args.profile)
                print(out.getvalue())
        med = {key: statistics.median(row[key] for row in rows) for key in rows[0]}
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{name:15s} requests={len(result.requests):6d} simulated={sim_s:9.1f}s wall={med['wall']:6.2f}s "
              f"speed={med['speed']:8.0f}x events={events} "
              f"events/s={med['rate']:9.0f} heap_loop/s={med['heap']:9.0f} ratio={med['ratio']:5.3f} "
              f"per CPU s: ratio={med['ratio_cpu']:5.3f} event loop alone={med['ratio_loop_cpu']:5.3f} "
              f"(heap loop {med['heap_cpu']:9.0f}/CPU s) peak_rss={rss_mb:6.0f}MB"
              f"{f' (medians of {args.repeats})' if args.repeats > 1 else ''}"
              f"{' (first run profiled: slower)' if args.profile and k == 0 else ''}", flush=True)
        print(f"{'':15s} outside the event loop {med['outside_cpu']:.3f} CPU s: 0.25 over the whole run leaves the "
              f"loop {med['budget_us']:.2f} us/event; the bare heap loop's event costs {med['bare_us']:.2f} us",
              flush=True)


if __name__ == "__main__":
    main()
