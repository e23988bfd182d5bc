"""The PlanCallback in-process: which overrides it plans with, which deployments, and what its
KV-throughput table holds (the paper's Table 3 / Table 5 view from the model configs)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.plan import PlanCallback, sweep_overrides
from harness.schema import register_configs

CONF = Path(__file__).resolve().parents[2] / "conf"
# Paper Table 5 [P]: Phi_kv of the internal 1T model on 8 x H200 at 1K / 8K / 32K / 128K (Gbps).
TABLE5_PHI_GBPS = {1024: 3.61, 8192: 3.59, 32768: 3.19, 131072: 2.62}


@pytest.mark.parametrize(("params", "task", "fixed", "swept"), [
    ({"deployment": "a,b", "loadgen.rate_rps": "1,inf"}, ["experiment=x"],
     ["experiment=x"], {"deployment": ["a", "b"], "loadgen.rate_rps": ["1", "inf"]}),
    # the command line wins over the experiment's sweep (Hydra's basic sweeper does the same)
    ({"deployment": "a,b", "loadgen.rate_rps": "1,inf"}, ["experiment=x", "deployment=c", "link.capacity_gbps=1,2"],
     ["deployment=c", "experiment=x"], {"loadgen.rate_rps": ["1", "inf"], "link.capacity_gbps": ["1", "2"]}),
    ({}, ["workload.num_requests=100", "deployment.local.n_prefill=range(1,4)"],
     ["workload.num_requests=100"], {"deployment.local.n_prefill": ["1", "2", "3"]}),
])
def test_sweep_overrides_split_fixed_from_swept(params, task, fixed, swept):
    config = OmegaConf.create({"hydra": {"sweeper": {"params": params}, "overrides": {"task": task}}})
    got_fixed, got_swept = sweep_overrides(config)
    assert sorted(got_fixed) == sorted(fixed) and got_swept == swept


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """PlanCallback at the start of the bandwidth sweep (naive_hetero and prfaas_pd over link.capacity_gbps)."""
    out = tmp_path_factory.mktemp("plan") / "sweep"
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose("config", overrides=["experiment=bandwidth_sweep", "workload.num_requests=100",
                                           f"hydra.sweep.dir={out}"], return_hydra_config=True)
        assert list(cfg.hydra.overrides.task) == ["experiment=bandwidth_sweep", "workload.num_requests=100"]
        PlanCallback().on_multirun_start(cfg)
    return out


def test_plan_covers_the_swept_deployments_at_the_unswept_link(planned):
    doc = json.loads((planned / "plan.json").read_text())
    assert set(doc) == {"naive_hetero", "prfaas_pd", "ratios"}
    assert doc["prfaas_pd"]["link_capacity_gbps"] == 100.0  # a swept key keeps its config default
    assert doc["ratios"]["baseline"] == "naive_hetero"  # homogeneous_pd was not in the sweep
    curve = pd.read_parquet(planned / "plan_sweep_threshold.parquet")
    assert set(curve["deployment"]) == {"prfaas_pd"}
    for name in ("plan_sweep_split.parquet", "plan_projection.parquet", "plan_kv_throughput.parquet"):
        assert (planned / name).is_file(), name


def test_kv_throughput_reproduces_table5_from_the_configs_measured_sizes_and_times(planned):
    kv = pd.read_parquet(planned / "plan_kv_throughput.parquet")
    measured = kv[(kv["model"] == "internal_1t") & (kv["source"] == "measured")].set_index("input_tokens")
    for tokens, phi in TABLE5_PHI_GBPS.items():
        assert measured.loc[float(tokens), "phi_kv_gbps"] == pytest.approx(phi, rel=0.015)
    curve = kv[(kv["model"] == "internal_1t") & (kv["source"] == "costmodel")].set_index("input_tokens")
    assert curve.loc[32768.0, "phi_kv_gbps"] == pytest.approx(measured.loc[32768.0, "phi_kv_gbps"], rel=1e-9)
    assert (curve["hardware"] == "h200").all() and (curve["gpus_per_instance"] == 8).all()


def test_kv_throughput_has_every_model_and_dense_attention_ships_far_more_kv(planned):
    """Table 3's point, from the cost model: at 32K the dense GQA models' Phi_kv exceeds every hybrid's."""
    kv = pd.read_parquet(planned / "plan_kv_throughput.parquet")
    models = {p.stem for p in (CONF / "model").glob("*.yaml")}
    assert set(kv.loc[kv["source"] == "costmodel", "model"]) == models
    table3 = set(kv.loc[(kv["source"] == "measured") & kv["kv_bytes"].isna(), "model"])
    at_32k = kv[(kv["source"] == "costmodel") & (kv["input_tokens"] == 32768.0) & kv["model"].isin(table3)]
    dense = at_32k.loc[at_32k["family"] == "dense", "phi_kv_gbps"]
    hybrid = at_32k.loc[at_32k["family"] == "hybrid", "phi_kv_gbps"]
    assert len(dense) == 2 and len(hybrid) == 4
    assert dense.min() > 2 * hybrid.max()
