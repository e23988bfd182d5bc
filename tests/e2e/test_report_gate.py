"""`harness-report` and `harness-gate` as a user runs them, in subprocesses, on a synthetic sweep.

The runs are written through the analysis API (write_run) from a deterministic bottleneck queue,
so this checks the commands end to end (discovery, Parquet, figures, exit codes) without the emulator.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import commands  # tests/commands.py
import numpy as np
import pandas as pd
import pytest

from harness.analysis.summary import write_run

ROOT = Path(__file__).resolve().parents[2]
PAPER_CASE = ROOT / "conf" / "gates" / "paper_case.yaml"


def write_sweep(root: Path, capacities: dict[str, float], loads=(1.0, 4.0), n: int = 80) -> Path:
    """Jobs `<i>_<deployment>_<load>`: FIFO server of rate capacity; TTFT = wait + a per-deployment prefill."""
    prefill_s = {"homogeneous_pd": 4.0, "prfaas_pd": 1.5, "naive_hetero": 1.2}
    share = {"homogeneous_pd": 0.0, "prfaas_pd": 0.5, "naive_hetero": 1.0}
    job = 0
    for name, cap in capacities.items():
        for load in loads:
            arrival = np.arange(n) / load
            depart = np.empty(n)
            free = 0.0
            for i, a in enumerate(arrival):
                free = max(a, free) + 1 / cap
                depart[i] = free
            ttft = depart - arrival - 1 / cap + prefill_s[name] * np.linspace(0.5, 1.5, n)
            finish = arrival + ttft + 1.0
            route = ["prfaas" if (share[name] == 1 or (share[name] and i % 2)) else "local" for i in range(n)]
            req = pd.DataFrame({"deployment": name, "request_id": np.arange(n), "arrival_s": arrival,
                                "input_tokens": 2000, "output_tokens": 41, "route": route, "ttft_s": ttft,
                                "tpot_s": 0.025, "e2e_s": finish - arrival, "finish_s": finish, "kv_bytes_sent": 1e8,
                                "error": None})
            t = np.arange(0.0, np.ceil(finish.max()))
            ts = pd.DataFrame({"deployment": name, "t_s": t, "egress_gbps": 12.0 * share[name],
                               "link_capacity_gbps": 100.0})
            run_dir = root / f"{job}_{name}_{load}"
            (run_dir / ".hydra").mkdir(parents=True)
            (run_dir / ".hydra" / "overrides.yaml").write_text(f"- deployment={name}\n- loadgen.rate_rps={load}\n")
            write_run(run_dir, req, ts, {"deployment": name, "mode": "sim", "offered_rps": load}, {"figures": False})
            job += 1
    return root


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return commands.run(["-m", *args], cwd=ROOT, timeout=120)


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return write_sweep(tmp_path_factory.mktemp("e2e") / "good",
                       {"homogeneous_pd": 2.0, "prfaas_pd": 3.2, "naive_hetero": 2.4})


def test_report_prints_tables_and_writes_parquet_and_figures(good):
    proc = cli("harness.report", str(good))
    assert proc.returncode == 0, proc.stderr
    assert "capacity_rps" in proc.stdout and "x_homogeneous_pd" in proc.stdout
    assert len(pd.read_parquet(good / "report.parquet")) == 6
    for name in ("fig_throughput_vs_load.png", "fig_ttft_vs_load.png", "fig_ttft_cdf.png",
                 "fig_egress_timeseries.png", "fig_table6.png"):
        assert (good / name).stat().st_size > 1000, name


def test_gate_passes_on_the_good_sweep(good):
    proc = cli("harness.gate", str(good), "--gate", str(PAPER_CASE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout


def test_gate_fails_with_exit_1_naming_the_check_on_a_worse_sweep(tmp_path):
    worse = write_sweep(tmp_path / "worse", {"homogeneous_pd": 2.0, "prfaas_pd": 2.3, "naive_hetero": 2.4})
    proc = cli("harness.gate", str(worse), "--gate", str(PAPER_CASE))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAILED: #0 capacity_rps prfaas_pd / homogeneous_pd" in proc.stdout


def test_bad_gate_file_and_missing_dir_exit_2(good, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("checks:\n  - {metric: capacity_rps, min: 1}\n  - {metric: capacity_rps, mni: 1}\n")
    proc = cli("harness.gate", str(good), "--gate", str(bad))
    assert proc.returncode == 2 and "check 1: unknown key 'mni'" in proc.stderr
    proc = cli("harness.report", str(tmp_path / "missing"))
    assert proc.returncode == 2 and proc.stderr.startswith("error: ")
