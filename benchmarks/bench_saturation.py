"""Saturation capacity against the in-flight setting: the planner-sized count vs multiples of it.

    python benchmarks/bench_saturation.py [--requests N] [--factors 1,4] [--workloads paper_lognormal,...]

For each deployment and workload it runs `loadgen.rate_rps=inf` with the automatic in-flight count
(harness/runs/closed_loop.py), then with that count times each factor, and prints the steady
throughput, the change against the automatic setting, the pools' utilisation, the route that set
the rate (counted in mean requests when its pool was busy: harness/analysis/saturation.py) and any
warning.
Deterministic (virtual time); reported, not asserted (tests/sim/test_saturation.py asserts it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.analysis.summary import summarize
from harness.runs.sim import run_sim
from tests.sim.conftest import compose_cfg


def capacity(overrides: list[str]) -> dict:
    cfg = compose_cfg(*overrides)
    result = run_sim(cfg)
    return summarize(result.requests, result.timeseries, result.meta, cfg.analysis)


def _set_by(s: dict) -> str:
    """The route whose rate set capacity and how it was counted (`-`: a single route)."""
    route = s.get("saturation_route")
    if not isinstance(route, str):
        return "-"
    return f"{route}({'mean-req' if s.get('saturation_counted_in') == 'mean requests' else 'count'})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=6000)
    ap.add_argument("--factors", default="1,4")
    ap.add_argument("--workloads", default="paper_lognormal,mooncake_conversation")
    ap.add_argument("--deployments", default="homogeneous_pd,naive_hetero,prfaas_pd")
    args = ap.parse_args()
    factors = [float(f) for f in args.factors.split(",")]
    print("workload deployment in_flight steady_rps change util_pd_p util_prfaas util_pd_d set_by warning")
    for workload in args.workloads.split(","):
        for dep in args.deployments.split(","):
            base = [f"workload={workload}", f"deployment={dep}", "loadgen.rate_rps=inf",
                    f"workload.num_requests={args.requests}"]
            auto = capacity(base)
            n = int(auto["saturation_in_flight"])
            for factor in factors:
                s = auto if factor == 1 else capacity([*base, f"loadgen.saturation_in_flight={int(n * factor)}"])
                change = s["steady_throughput_rps"] / auto["steady_throughput_rps"] - 1
                print(f"{workload} {dep} {int(s['saturation_in_flight'])} {s['steady_throughput_rps']:.3f} "
                      f"{change:+.2%} {s.get('saturation_util_pd_p', float('nan')):.2f} "
                      f"{s.get('saturation_util_prfaas', float('nan')):.2f} "
                      f"{s.get('saturation_util_pd_d', float('nan')):.2f} {_set_by(s)} "
                      f"{s.get('saturation_warning') or '-'}",
                      flush=True)


if __name__ == "__main__":
    main()
