"""Time the planner's full grid search and the cost profile's scalar hot path (not a test).

    .venv/bin/python benchmarks/bench_planner.py

Prints searches/s for the paper's PrfaaS-PD case (513 thresholds x 8 splits, 20,000-point length
grid), with prebuilt profiles (what a rebalancer would do) and end to end through plan_deployment
(config conversion and profile building included), plus microseconds per scalar profile call.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

from harness.costmodel import build_profile
from harness.planner import LengthDistribution, Stages, best_index, evaluate, plan_deployment
from harness.schema import register_configs
from harness.workload import input_length_distribution, mean_output_tokens

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")


def per_second(fn, min_s: float = 1.0) -> tuple[float, int]:
    n, t0 = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - t0) < min_s:
        fn()
        n += 1
    return n / elapsed, n


def main() -> None:
    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose("config", overrides=["deployment=prfaas_pd"])
    values, weights = input_length_distribution(cfg.workload)
    l_out = mean_output_tokens(cfg.workload)
    dep = cfg.deployment
    local = build_profile(cfg.model, dep.local.hardware, dep.local.gpus_per_instance)
    remote = build_profile(cfg.model, dep.prfaas.hardware, dep.prfaas.gpus_per_instance)
    stages = Stages(local=local, remote=remote, n_prfaas=int(dep.prfaas.instances),
                    link_bytes_per_s=float(cfg.link.capacity_gbps) * 1e9 / 8, t_decode_s=local.t_decode_s,
                    bs_max=local.bs_max, mean_output_tokens=l_out)
    dist = LengthDistribution(values, weights)
    thresholds = np.arange(0, 131072 + 256, 256, dtype=float)
    n_p = np.arange(0, int(dep.local.instances))
    n_d = int(dep.local.instances) - n_p

    print(f"grid: {thresholds.size} thresholds x {n_p.size} splits, {values.size:,} length points")
    for mode in ("representative", "expected"):
        rate, n = per_second(lambda mode=mode: best_index(evaluate(dist, stages, thresholds, n_p, n_d, mode)))
        print(f"search ({mode:<14}, prebuilt profiles): {rate:8.1f} searches/s  ({1e3 / rate:.2f} ms, n={n})")
    rate, n = per_second(lambda: plan_deployment(dep, cfg.model, cfg.link, cfg.planner, values, weights, l_out))
    print(f"plan_deployment (end to end)           : {rate:8.1f} searches/s  ({1e3 / rate:.2f} ms, n={n})")

    big = 1250  # a 10,000-GPU local cluster of 8-GPU instances
    n_p_big = np.arange(0, big)
    rate, n = per_second(lambda: best_index(evaluate(dist, stages, thresholds, n_p_big, big - n_p_big)))
    print(f"search, {big} local instances ({thresholds.size * big:,} points): {rate:6.1f} searches/s "
          f"({1e3 / rate:.1f} ms)")

    lengths = np.random.default_rng(0).integers(128, 131072, 100_000).tolist()  # Python ints, as the emulator passes
    for name, call in (("prefill_s(new)", lambda: [remote.prefill_s(x) for x in lengths]),
                       ("prefill_s(new, cached)", lambda: [local.prefill_s(x, 4096) for x in lengths]),
                       ("kv_bytes(tokens)", lambda: [remote.kv_bytes(x) for x in lengths]),
                       ("decode_step_s (roofline)", lambda: [remote.decode_step_s(32, 32 * x) for x in lengths])):
        t0 = time.perf_counter()
        call()
        print(f"{name:<26}: {(time.perf_counter() - t0) / len(lengths) * 1e6:.2f} us/call (incl. loop)")


if __name__ == "__main__":
    main()
