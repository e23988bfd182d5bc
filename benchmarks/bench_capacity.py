"""The searched capacity (loadgen.rate_rps=max) against the closed-loop estimates and the planner.

    python benchmarks/bench_capacity.py [--cases paper,conversation,synthetic] [--deployments ...]

For each case and deployment it runs the capacity search (open-loop runs bisected to the highest stable
rate, harness/runs/capacity.py), then the closed loop (`loadgen.rate_rps=inf`) at the automatic in-flight
count, at 4x it and at 2,048 in flight, and prints each beside the planner's Lambda_max with the gap to the
searched capacity. The searched capacity uses no in-flight count at all, so it cannot depend on one; the
closed-loop columns show how much the closed loop's does. Deterministic (virtual time); reported, not
asserted (tests/sim/test_capacity_search.py asserts the search on a closed-form case).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hydra import compose, initialize_config_dir

from harness.analysis.metrics import steady_throughput_rps
from harness.deploy.build import make_plan
from harness.runs.capacity import SearchSettings, search, sized, with_rate
from harness.runs.closed_loop import saturation_in_flight
from harness.runs.sim import run_sim
from harness.schema import register_configs

CONF = str(Path(__file__).resolve().parents[1] / "conf")
CASES = {
    "paper": ["workload=paper_lognormal"],
    "conversation": ["workload=mooncake_conversation"],  # the Mooncake conversation trace (prefix reuse)
    "synthetic": ["workload=mooncake_synthetic"],  # multi-turn, 65% of prompt tokens are prefix hits
}


def _cfg(overrides: list[str]):
    register_configs()
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return compose("config", overrides=[*overrides, "analysis.figures=false", "loadgen.progress=false"])


def closed_loop(cfg, in_flight: int) -> float:
    run = with_rate(cfg, math.inf)
    run.loadgen.saturation_in_flight = in_flight
    result = run_sim(run)
    return float(steady_throughput_rps(result.requests, float(cfg.analysis.warmup_fraction), closed_loop=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--deployments", default="homogeneous_pd,naive_hetero,prfaas_pd")
    args = parser.parse_args()
    print(f"{'case':13} {'deployment':15} {'searched':>9} {'bracket':>17} {'runs':>4} {'planner':>8} "
          f"{'closed@auto':>12} {'closed@4x':>10} {'closed@2048':>12} {'cpu_s':>6}")
    for case in args.cases.split(","):
        for name in args.deployments.split(","):
            cfg = _cfg([*CASES[case], f"deployment={name}", "loadgen.rate_rps=max"])
            began = time.process_time()
            settings = SearchSettings.from_cfg(cfg)
            found = search(cfg, settings, say=lambda line: None)
            cpu = time.process_time() - began
            plan = make_plan(cfg)["lambda_max_rps"]
            probe_cfg = sized(cfg, settings.min_requests)  # the closed loops offer the probes' requests
            auto = int(saturation_in_flight(with_rate(probe_cfg, math.inf)))
            closed = [closed_loop(probe_cfg, n) for n in (auto, 4 * auto, 2048)]
            cap = found.lo_rps

            def gap(value: float, cap: float = cap) -> str:
                return f"{value:.3f}({value / cap - 1:+.1%})"

            print(f"{case:13} {name:15} {cap:9.3f} {found.lo_rps:8.3f}-{found.hi_rps:<8.3f} {len(found.probes):4d} "
                  f"{gap(plan):>8} {gap(closed[0]):>12} {gap(closed[1]):>10} {gap(closed[2]):>12} {cpu:6.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
