"""Scaling of a sim sweep on a Ray cluster: the same N-run sweep with 1 job at a time vs 2 at a time.

Starts a private local Ray head (2 CPUs, token-protected, stopped at the end: the helper of
tests/e2e/test_ray_sweep.py), runs the sweep through `hydra/launcher=ray_cluster` twice on it: once
with `hydra.launcher.ray.remote.num_cpus=2` (each job takes both CPUs: 1 worker at a time), once with
`num_cpus=1` (2 workers at a time), and prints each sweep's wall time, its job span (first job start
to last run written, from the run directories) and the ratio 1-worker / 2-workers of the job spans.
The two reports must be equal (sim mode is deterministic). Needs the `ray` extra. Reported, not
asserted: on a shared 2-core machine the ratio depends on what else runs.

    python benchmarks/bench_ray_sweep.py [--runs 8] [--requests 3000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.test_ray_sweep import local_ray_head


def job_span_s(sweep_dir: Path) -> float:
    """First job's start (its .hydra/config.yaml) to the last run's summary.parquet, from file times."""
    starts = [p.stat().st_mtime for p in sweep_dir.glob("*/.hydra/config.yaml")]
    ends = [p.stat().st_mtime for p in sweep_dir.glob("*/summary.parquet")]
    return max(ends) - min(starts)


def sweep(address: str, env: dict[str, str], out: Path, cpus_per_job: int, runs: int, requests: int) -> float:
    step = 60000 // runs
    args = [sys.executable, "-m", "harness", "-m", "experiment=threshold_sweep",
            f"deployment.router.threshold_tokens=range({step},{step * (runs + 1)},{step})",
            f"workload.num_requests={requests}", "analysis.figures=false", "loadgen.progress=false",
            "+hydra.callbacks.plan.kv_table=false", "hydra/launcher=ray_cluster",
            f"hydra.launcher.ray.init.address={address}", f"hydra.launcher.ray.remote.num_cpus={cpus_per_job}",
            f"hydra.sweep.dir={out}"]
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=ROOT, env=env, check=False, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"sweep failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    n = len(list(out.glob("*/summary.parquet")))
    if n != runs:
        sys.exit(f"{out}: {n} runs written, expected {runs}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--requests", type=int, default=3000, help="workload.num_requests of each run")
    args = parser.parse_args()
    with TemporaryDirectory(prefix="bench-ray-") as tmp, local_ray_head(num_cpus=2) as (address, env, _):
        rows = []
        for workers in (1, 2):
            out = Path(tmp) / f"w{workers}"
            wall = sweep(address, env, out, 2 // workers, args.runs, args.requests)
            rows.append((workers, wall, job_span_s(out)))
            print(f"{workers} worker(s): {args.runs} runs x {args.requests} requests: sweep wall {wall:.1f} s, "
                  f"job span {rows[-1][2]:.1f} s", flush=True)
        reports = [pd.read_parquet(Path(tmp) / f"w{w}" / "report.parquet").drop(columns=["run_dir"])
                   .sort_values("run_name").reset_index(drop=True) for w in (1, 2)]
        pd.testing.assert_frame_equal(reports[0], reports[1], check_exact=True)
        print("reports equal: yes")
    print(f"speed-up 2 vs 1 Ray worker (job span ratio): {rows[0][2] / rows[1][2]:.2f}x "
          f"(sweep wall ratio {rows[0][1] / rows[1][1]:.2f}x); load average after: "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
