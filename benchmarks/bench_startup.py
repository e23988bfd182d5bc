"""Start-up and end-to-end CLI speed: what a user waits for, measured as they run it (subprocesses).

    .venv/bin/python benchmarks/bench_startup.py [--repeats 5] [--large-repeats 3] [--plan] [--root DIR]

(`--root` runs another checkout's commands, e.g. to compare with the previous release.)

Each round runs the anchor (`python -c "import numpy, pandas, pyarrow"`: the floor any command that
reads or writes Parquet pays) and then every command, so a busy machine slows both alike; a ratio is
taken within its round and the median over rounds is printed. Targets (issue 12): a 10-request sim run
at most 3x the anchor, the 10,000-request CLI sim run at least 1,500x real time (simulated span / wall
time of the whole command: start-up, workload, emulator, analysis). `harness --help` is Hydra's own help
(it composes the config) since the start-up patches of Hydra were removed (issue 28): its old 1 s target
is dropped. Reported, not asserted: timing needs a quiet machine.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["loadgen.progress=false"]


CPU: list[float] = []  # CPU seconds (user + system) of each command, beside its wall time


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wall(args: list[str], root: Path = ROOT) -> float:
    """Wall seconds of one command (its CPU seconds are appended to CPU: steadier on a busy machine)."""
    c0, t0 = _children_cpu(), time.perf_counter()
    done = subprocess.run([sys.executable, *args], cwd=root, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - t0
    CPU.append(_children_cpu() - c0)
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(args)}\n{done.stderr[-2000:]}")
    return elapsed


def simulated_s(run_dir: Path) -> float:
    import pandas as pd

    return float(pd.read_parquet(run_dir / "summary.parquet")["duration_s"].iloc[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="rounds of the short commands")
    parser.add_argument("--large-repeats", type=int, default=3, help="rounds of the 10,000-request run (0: skip)")
    parser.add_argument("--requests", type=int, default=10_000, help="requests of the large run")
    parser.add_argument("--plan", action="store_true", help="also time harness-plan")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose commands to time (default: this one)")
    args = parser.parse_args()
    root = args.root.resolve()
    tmp = Path(tempfile.mkdtemp(prefix="bench_startup_"))
    anchor = ["-c", "import numpy, pandas, pyarrow"]
    short = {
        "harness --help": ["-m", "harness", "--help"],
        "run 10 req, no figures": ["-m", "harness", "workload.num_requests=10", "analysis.figures=false", *QUIET],
        "run 10 req, figures": ["-m", "harness", "workload.num_requests=10", *QUIET],
    }
    if args.plan:
        short["harness-plan"] = ["-m", "harness.plan"]
    times: dict[str, list[float]] = {"anchor": [], **{k: [] for k in short}}
    ratios: dict[str, list[float]] = {k: [] for k in short}
    cpu: dict[str, list[float]] = {"anchor": [], **{k: [] for k in short}}
    cpu_ratios: dict[str, list[float]] = {k: [] for k in short}
    wall(anchor)  # warm the page cache
    for r in range(args.repeats):
        a = wall(anchor)
        times["anchor"].append(a)
        cpu["anchor"].append(CPU[-1])
        for name, cmd in short.items():
            t = wall([*cmd, f"hydra.run.dir={tmp / f'{r}_{len(times[name])}'}"] if name != "harness --help" else cmd,
                     root)
            times[name].append(t)
            ratios[name].append(t / a)
            cpu[name].append(CPU[-1])
            cpu_ratios[name].append(CPU[-1] / cpu["anchor"][-1])
    med = statistics.median
    print(f"{root}: python {sys.version.split()[0]}, {args.repeats} rounds; medians of wall and CPU (user+sys) "
          "seconds and of their ratios to the anchor in the same round")
    print(f"  {'anchor: import numpy, pandas, pyarrow':40s} wall {med(times['anchor']):6.2f} s"
          f"            cpu {med(cpu['anchor']):6.2f} s")
    for name in short:
        print(f"  {name:40s} wall {med(times[name]):6.2f} s {med(ratios[name]):5.2f}x  "
              f"cpu {med(cpu[name]):6.2f} s {med(cpu_ratios[name]):5.2f}x anchor")
    target = "run 10 req, no figures"
    verdict = {True: "met", False: "NOT met"}
    print(f"  issue 12 target, a 10-request run at most 3x the anchor: wall {verdict[med(ratios[target]) <= 3]}, "
          f"cpu {verdict[med(cpu_ratios[target]) <= 3]} (reported, not asserted: needs a quiet machine)")
    for figures in (False, True):
        speeds, walls, cpus = [], [], []
        for r in range(args.large_repeats):
            out = tmp / f"large_{figures}_{r}"
            walls.append(wall(["-m", "harness", f"workload.num_requests={args.requests}", f"hydra.run.dir={out}",
                               f"analysis.figures={str(figures).lower()}", *QUIET], root))
            speeds.append(simulated_s(out) / walls[-1])
            cpus.append(simulated_s(out) / CPU[-1])
        if speeds:
            label = f"run {args.requests:,} req, {'figures' if figures else 'no figures'}"
            print(f"  {label:40s} wall {med(walls):6.2f} s {med(speeds):5.0f}x real time  (per CPU second: "
                  f"{med(cpus):5.0f}x)")


if __name__ == "__main__":
    main()
