"""Synthetic runs for the analysis tests: a deterministic bottleneck queue, no emulator involved.

Each request waits for one FIFO server of rate `capacity_rps` (so throughput is min(offered,
capacity) by construction), then takes `prefill_s * f` to its first token (f spreads 0.5..spread)
and 63 decode steps of 20 ms.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from harness.analysis.summary import write_run

OUTPUT_TOKENS = 64
TPOT_S = 0.02


def fake_run(deployment: str, rate_rps: float, capacity_rps: float, n: int = 120, prefill_s: float = 1.0,
             spread: float = 1.5, prfaas_share: float = 0.5,
             seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    rng = np.random.default_rng(seed)
    arrival = np.arange(n) / rate_rps
    depart = np.empty(n)
    free = 0.0
    for i, a in enumerate(arrival):
        free = max(a, free) + 1.0 / capacity_rps
        depart[i] = free
    wait = depart - arrival - 1.0 / capacity_rps
    ttft = wait + prefill_s * np.linspace(0.5, spread, n)[rng.permutation(n)]
    first = arrival + ttft
    finish = first + (OUTPUT_TOKENS - 1) * TPOT_S
    route = np.where(rng.random(n) < prfaas_share, "prfaas", "local") if 0 < prfaas_share < 1 else \
        np.full(n, "prfaas" if prfaas_share >= 1 else "local")
    requests = pd.DataFrame({
        "deployment": deployment, "mode": "sim", "request_id": np.arange(n), "session_id": None,
        "arrival_s": arrival, "input_tokens": 1000, "cached_tokens": 0, "output_tokens": OUTPUT_TOKENS,
        "route": route, "prefill_instance": "p0", "decode_instance": "d0", "prefill_start_s": arrival + wait,
        "prefill_end_s": first, "kv_ready_s": first, "first_token_s": first, "finish_s": finish, "ttft_s": ttft,
        "tpot_s": TPOT_S, "e2e_s": finish - arrival, "kv_bytes_sent": 1e9, "error": None,
    })
    t = np.arange(0.0, np.ceil(finish.max()) + 1.0)
    egress = np.where(t < depart.max(), 10.0 * prfaas_share, 0.0)
    timeseries = pd.DataFrame({
        "deployment": deployment, "t_s": t, "egress_gbps": egress, "link_capacity_gbps": 100.0,
        "prefill_queue_local": 0.0, "prefill_queue_prfaas": 0.0, "decode_waiting": 0.0, "decode_running": 1.0,
        "util_prefill_local": 0.5, "util_prefill_prfaas": 0.5, "util_decode": 0.5,
    })
    meta = {"deployment": deployment, "mode": "sim", "offered_rps": rate_rps, "threshold_tokens": 19000,
            "n_prfaas": 4, "n_prefill": 3, "n_decode": 5, "workload": "fake", "model": "fake",
            "link_capacity_gbps": 100.0,
            "seed": seed, "plan": {"lambda_max_rps": capacity_rps, "theta_pd_d_rps": 2 * capacity_rps}}
    return requests, timeseries, meta


# Deployment -> (capacity_rps, prefill_s, spread, prfaas_share): PrfaaS-PD fastest, homogeneous slowest.
GOOD = {
    "homogeneous_pd": (2.0, 2.0, 2.5, 0.0),
    "prfaas_pd": (3.1, 1.0, 1.5, 0.5),
    "naive_hetero": (2.4, 0.8, 1.5, 1.0),
}
LOADS = (1.0, 2.5, 4.0)


def make_sweep(root: Path, spec: dict[str, tuple[float, float, float, float]] = GOOD,
               loads: tuple[float, ...] = LOADS, figures: bool = False) -> Path:
    """A fake Hydra multirun: numbered job dirs with .hydra/overrides.yaml and the run files."""
    job = 0
    for deployment, (cap, prefill_s, spread, share) in spec.items():
        for rate in loads:
            run_dir = root / f"{job}_{deployment}_{rate}"
            (run_dir / ".hydra").mkdir(parents=True)
            (run_dir / ".hydra" / "overrides.yaml").write_text(
                f"- deployment={deployment}\n- loadgen.rate_rps={rate}\n- +tag=fake\n")
            req, ts, meta = fake_run(deployment, rate, cap, prefill_s=prefill_s, spread=spread, prfaas_share=share)
            write_run(run_dir, req, ts, meta, {"figures": figures})
            job += 1
    return root


@pytest.fixture(scope="session")
def shared_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3 deployments x 3 offered loads, built once per session: for read-only tests."""
    return make_sweep(tmp_path_factory.mktemp("shared") / "sweep")


@pytest.fixture
def sweep(tmp_path: Path, shared_sweep: Path) -> Path:
    """A private copy of the shared sweep, for tests that write into it."""
    return Path(shutil.copytree(shared_sweep, tmp_path / "sweep"))


@pytest.fixture
def sweep_factory():
    """make_sweep(root, spec=GOOD, loads=LOADS, figures=False) -> root."""
    return make_sweep


@pytest.fixture
def run_factory():
    """fake_run(deployment, rate_rps, capacity_rps, ...) -> (requests, timeseries, meta)."""
    return fake_run


@pytest.fixture
def good_spec() -> dict[str, tuple[float, float, float, float]]:
    return dict(GOOD)
