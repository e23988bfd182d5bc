"""Emulator at scale: wall time and peak RSS of one CLI run per request count (issue 17).

    .venv/bin/python benchmarks/bench_scale.py [--requests 10000,20000,100000,200000] [--rate 3] [overrides...]

Each run is `python -m harness` in its own subprocess (the paper workload on prfaas_pd at `--rate`
req/s, no progress bar, no figures), so its peak RSS (the child's ru_maxrss) is that run's alone.
Prints a Markdown table: requests, wall seconds, peak RSS, and RSS relative to the smallest run.
Reported, not asserted (wall time needs a quiet machine); tests/e2e/test_bounded_memory.py asserts
the memory bound with a generous margin.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_once(n: int, rate: float, overrides: list[str], out_dir: Path) -> tuple[float, float, int]:
    """(wall s, peak RSS MB, exit status) of one CLI run with `n` requests, measured by a wrapper."""
    probe = ("import resource, subprocess, sys, time; t0 = time.perf_counter(); "
             "rc = subprocess.call(sys.argv[1:]); wall = time.perf_counter() - t0; "
             "print(wall, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)")
    cmd = [sys.executable, "-c", probe, sys.executable, "-m", "harness", f"workload.num_requests={n}",
           f"loadgen.rate_rps={rate}", "loadgen.progress=false", "analysis.figures=false",
           f"hydra.run.dir={out_dir}", *overrides]
    done = subprocess.run(
        cmd, cwd=REPO, capture_output=True, text=True, check=False, env={**os.environ, "PYTHONHASHSEED": "0"}
    )
    last = done.stdout.strip().splitlines()[-1].split()
    wall, rss_kb, rc = float(last[0]), int(last[1]), int(last[2])
    if rc != 0:
        sys.stderr.write(done.stderr[-2000:])
    return wall, rss_kb / 1024, rc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", default="10000,20000,100000,200000",
                        help="comma-separated request counts (1000000 takes a while)")
    parser.add_argument("--rate", type=float, default=3.0, help="offered load, req/s")
    parser.add_argument("overrides", nargs="*", help="more Hydra overrides for every run")
    args = parser.parse_args()
    counts = [int(x) for x in args.requests.split(",")]
    print(f"# bench_scale: paper workload, prfaas_pd, {args.rate:g} req/s, "
          f"{time.strftime('%Y-%m-%d %H:%M:%S')}")
    print("| requests | wall (s) | peak RSS (MB) | RSS / first |")
    print("|---:|---:|---:|---:|")
    first = None
    with tempfile.TemporaryDirectory(prefix="bench_scale_") as tmp:
        for n in counts:
            wall, rss, rc = run_once(n, args.rate, args.overrides, Path(tmp) / f"n{n}")
            first = first or rss
            status = "" if rc == 0 else f" (exit {rc})"
            print(f"| {n:,} | {wall:.1f} | {rss:.0f} | {rss / first:.2f}{status} |", flush=True)


if __name__ == "__main__":
    main()
