"""`python -m harness.plan`: the paper's Table 6 end to end, from the configs and the workload package."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import commands  # tests/commands.py
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_plan(run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return commands.run(["-m", "harness.plan", f"hydra.run.dir={run_dir}", *overrides], cwd=ROOT,
                          timeout=120)


@pytest.fixture(scope="module")
def paper_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("plan")
    proc = run_plan(run_dir, "planner.service_time=representative")  # Table 6 is the paper's formula
    assert proc.returncode == 0, proc.stderr
    return run_dir, proc.stdout, json.loads((run_dir / "plan.json").read_text())


def test_the_default_plan_carries_the_paper_formula_beside_it(paper_run, tmp_path):
    """Default: expected service times (what a queue sees, what the emulator runs), with the paper's
    representative-length plan alongside as representative_* keys (what the Table 6 gate reads)."""
    proc = run_plan(tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc, paper = json.loads((tmp_path / "plan.json").read_text()), paper_run[2]
    for name in ("homogeneous_pd", "naive_hetero", "prfaas_pd"):
        assert doc[name]["service_time"] == "expected"
        assert doc[name]["representative_lambda_max_rps"] == pytest.approx(paper[name]["lambda_max_rps"])
        assert doc[name]["lambda_max_rps"] < paper[name]["lambda_max_rps"]  # Jensen's gap


def test_table6_targets(paper_run):
    """Predictions from Table 5 and the fitted inputs (README "Honest numbers"): the calibrated values are in
    test_table6_calibration_still_holds; the ratios are predictions over the calibrated homogeneous Lambda_max."""
    _, _, doc = paper_run
    p, n = doc["prfaas_pd"], doc["naive_hetero"]
    assert (p["n_prfaas"], p["n_prefill"], p["n_decode"]) == (4, 3, 5)
    assert p["threshold_tokens"] == pytest.approx(19_400, abs=1_000)
    assert p["offload_fraction"] == pytest.approx(0.496, abs=0.015)
    assert p["lambda_max_rps"] == pytest.approx(3.24, rel=0.03)
    assert p["egress_gbps"] == pytest.approx(13, abs=2)
    assert n["lambda_max_rps"] == pytest.approx(2.45, rel=0.03)
    assert doc["ratios"]["baseline"] == "homogeneous_pd"
    assert doc["ratios"]["lambda_max"]["prfaas_pd"] == pytest.approx(1.54, abs=0.05)
    assert doc["ratios"]["lambda_max"]["naive_hetero"] == pytest.approx(1.16, abs=0.05)


def test_table6_calibration_still_holds(paper_run):
    """CALIBRATION, not a prediction: the H20 prefill curve (conf/model/internal_1t.yaml profiles.h20.prefill,
    [I] fitted to Table 6) passes through T(E[L]) = 9/2.11 s, homogeneous PD's Lambda_max with 9 prefill
    instances, so its split 9/3 and Lambda_max 2.11 only check that the fit still holds through the CLI."""
    h = paper_run[2]["homogeneous_pd"]
    assert (h["n_prefill"], h["n_decode"]) == (9, 3)
    assert h["lambda_max_rps"] == pytest.approx(2.11, rel=0.03)


def test_outputs_and_table(paper_run):
    run_dir, stdout, _ = paper_run
    assert "prfaas_pd" in stdout and "homogeneous_pd" in stdout and "naive_hetero" in stdout
    sweep_t = pd.read_parquet(run_dir / "plan_sweep_threshold.parquet")
    assert {"threshold_tokens", "lambda_rps", "prfaas_bound_rps", "pd_p_bound_rps", "pd_d_bound_rps"} <= set(sweep_t)
    assert set(sweep_t.deployment) == {"prfaas_pd"}
    sweep_s = pd.read_parquet(run_dir / "plan_sweep_split.parquet")
    assert {"n_prefill", "n_decode", "lambda_rps", "prefill_bound_rps", "decode_bound_rps"} <= set(sweep_s)
    assert set(sweep_s.deployment) == {"homogeneous_pd", "prfaas_pd"}
    proj = pd.read_parquet(run_dir / "plan_projection.parquet").set_index(["model", "gpus", "length_tokens"])
    assert proj.loc[("minimax_m25", 512, 32768.0), "b_out_gbps"] == pytest.approx(3800, rel=0.03)
    assert proj.loc[("ring_25_1t", 512, 32768.0), "b_out_gbps"] == pytest.approx(170, rel=0.03)


def test_overrides_reach_every_deployment(tmp_path):
    proc = run_plan(tmp_path, "link.capacity_gbps=5", "planner.deployments=[naive_hetero,prfaas_pd]",
                    "planner.baseline=naive_hetero")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert set(doc) == {"naive_hetero", "prfaas_pd", "ratios"}
    assert doc["prfaas_pd"]["bound"] == "prfaas_bandwidth" and doc["naive_hetero"]["bound"] == "prfaas_bandwidth"
    assert doc["ratios"]["lambda_max"]["naive_hetero"] == 1.0


@pytest.mark.parametrize(
    ("override", "message"),
    [("link.capacity_gbps=0", "error: link.capacity_gbps must be > 0"),
     ("model=nope", "nope"),
     ("planner.deployments=[homogeneous_pd,nope]", "deployment=nope"),
     ("planner.deployments=[]", "error: planner.deployments is empty"),
     ("planner.projection.gpus_per_instance=0", "error: planner.projection.gpus_per_instance must be >= 1, got 0"),
     ("planner.projection.lengths_tokens=[-5]", "error: planner.projection.lengths_tokens must be a list of integers"),
     ("planner.projection.gpus=[0]", "error: planner.projection.gpus must be a list of integers >= 1"),
     ("planner.baseline=foo", "error: planner.baseline='foo' is not a deployment planned; valid: homogeneous_pd, "
                              "naive_hetero, prfaas_pd")],
)
def test_bad_input_exits_2(tmp_path, override, message):
    proc = run_plan(tmp_path, override)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "plan.json").exists()
