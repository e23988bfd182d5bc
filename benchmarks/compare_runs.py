"""Same seed, same files: run a fixed set of sim cases and compare their outputs with a baseline.

    .venv/bin/python benchmarks/compare_runs.py run DIR [--only NAME,...] [--requests N]
    .venv/bin/python benchmarks/compare_runs.py compare BASELINE CANDIDATE

`run` runs every case (`python -m harness ... hydra.run.dir=DIR/<case>`) from the current checkout;
`compare` checks that each case's `requests.parquet`, `summary.parquet` and `timeseries.parquet` are
equal to the last bit (pandas `check_exact=True`, NaN equal to NaN) and that `summary.json` is equal
(the emulator's event count `sim_events` included; the wall-clock `date` aside), printing one line
per case; exit status 1 if any differs. Used to check that speed work on the emulator core leaves
every result unchanged: save a baseline from the commit before, run the candidate, compare.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent

# name -> overrides; each case exercises a different part of the emulator core
CASES: dict[str, list[str]] = {
    "prfaas_pd": ["deployment=prfaas_pd"],
    "homogeneous_pd": ["deployment=homogeneous_pd"],
    "naive_hetero": ["deployment=naive_hetero"],
    "prfaas_pd_3rps": ["deployment=prfaas_pd", "loadgen.rate_rps=3.0"],
    "aggregated": ["deployment=aggregated", "model=random_llama_35m", "workload=fixed",
                   "workload.input_tokens=300", "workload.output_tokens=16", "loadgen.rate_rps=2"],
    "aggregated_lognormal": ["deployment=aggregated", "model=random_llama_35m", "loadgen.rate_rps=0.05"],
    "prfaas_dynamic": ["deployment=prfaas_dynamic"],
    "rebalancer": ["deployment=prfaas_pd", "rebalancer.enabled=true", "rebalancer.period_s=30",
                   "rebalancer.window_s=60", "rebalancer.min_samples=20"],
    "mooncake_unbounded": ["workload=mooncake_conversation"],
    "mooncake_cache_200k": ["workload=mooncake_conversation", "cache.capacity_tokens=200000"],
    "mooncake_cache_2m": ["workload=mooncake_conversation", "cache.capacity_tokens=2000000"],
    "mooncake_inexact_state": ["workload=mooncake_conversation", "cache.exact_state_match=false"],
    "link_drop": ["faults=link_drop"],
    "lossy": ["faults=lossy"],
    "rtt_spike": ["faults=rtt_spike"],
    "prfaas_outage": ["faults=prfaas_outage"],
    "batched_prefill": ["deployment.prefill_max_batch_tokens=32768"],
    "closed_loop": ["loadgen.concurrency=16"],
    "agentic": ["workload=agentic"],
    "bursty": ["workload=gamma_bursty"],
}


def run(out: Path, names: list[str], requests: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        cmd = [sys.executable, "-m", "harness", *CASES[name], f"workload.num_requests={requests}",
               "loadgen.progress=false", "analysis.figures=false", f"hydra.run.dir={out / name}"]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, check=False, cwd=ROOT, capture_output=True, text=True)
        status = "ok" if proc.returncode == 0 else f"exit {proc.returncode}"
        print(f"{name:24s} {status:8s} {time.perf_counter() - t0:6.1f} s", flush=True)
        if proc.returncode != 0:
            print(proc.stderr[-2000:], file=sys.stderr)


_VOLATILE = {"date"}  # summary.json keys that differ between runs of the same case (the wall-clock date)


def _frames_equal(a: Path, b: Path) -> str | None:
    if not a.exists() and not b.exists():
        return None
    if a.exists() != b.exists():
        return f"{a.name}: present in only one run"
    fa, fb = pd.read_parquet(a), pd.read_parquet(b)
    try:
        pd.testing.assert_frame_equal(fa, fb, check_exact=True)
    except AssertionError as exc:
        return f"{a.name}: {str(exc).splitlines()[0]}"
    return None


def compare(base: Path, cand: Path) -> int:
    bad = 0
    for case in sorted(p.name for p in base.iterdir() if p.is_dir()):
        b, c = base / case, cand / case
        if not c.is_dir():
            print(f"{case:24s} MISSING in {cand}")
            bad += 1
            continue
        problems = [p for p in (_frames_equal(b / f, c / f) for f in
                                ("requests.parquet", "summary.parquet", "timeseries.parquet")) if p]
        if (b / "summary.json").exists():
            jb, jc = ({k: v for k, v in json.loads((d / "summary.json").read_text()).items() if k not in _VOLATILE}
                      for d in (b, c))
            if jb != jc:
                keys = sorted(k for k in set(jb) | set(jc) if jb.get(k) != jc.get(k))
                problems.append(f"summary.json differs in {', '.join(keys[:8])}")
        print(f"{case:24s} {'identical' if not problems else 'DIFFERS: ' + '; '.join(problems)}")
        bad += bool(problems)
    return 1 if bad else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_run = sub.add_parser("run")
    p_run.add_argument("dir", type=Path)
    p_run.add_argument("--only", default="", help="comma-separated case names (default: all)")
    p_run.add_argument("--requests", type=int, default=3000)
    p_cmp = sub.add_parser("compare")
    p_cmp.add_argument("baseline", type=Path)
    p_cmp.add_argument("candidate", type=Path)
    args = parser.parse_args()
    if args.cmd == "run":
        names = args.only.split(",") if args.only else list(CASES)
        unknown = [n for n in names if n not in CASES]
        if unknown:
            print(f"compare_runs: unknown case(s) {', '.join(unknown)}; cases are {', '.join(CASES)}",
                  file=sys.stderr)
            sys.exit(2)
        run(args.dir, names, args.requests)
    else:
        sys.exit(compare(args.baseline, args.candidate))


if __name__ == "__main__":
    main()
