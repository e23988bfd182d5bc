"""Constraints read from the deployment config, the plan's contract keys, and bad inputs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.errors import InputError
from harness.planner import plan_deployment

CONTRACT_KEYS = {"lambda_max_rps", "theta_prfaas_rps", "theta_pd_p_rps", "theta_pd_d_rps", "threshold_tokens",
                 "n_prfaas", "n_prefill", "n_decode", "offload_fraction", "egress_gbps", "l_long_tokens",
                 "l_short_tokens", "bandwidth_ceiling_rps", "cost_normalised", "utilisation", "bound"}


def test_plan_dict_has_the_contract_keys_and_is_strict_json(plan):
    for dep in ("homogeneous_pd", "naive_hetero", "prfaas_pd"):
        d = plan([f"deployment={dep}"])
        assert set(d) >= CONTRACT_KEYS
        json.dumps(d, allow_nan=False)


def test_a_fixed_threshold_is_kept(plan, paper_lengths):
    d = plan(updates={"deployment.router.threshold_tokens": 30000})
    values, weights = paper_lengths
    assert d["threshold_tokens"] == 30000
    assert d["offload_fraction"] == pytest.approx(weights[values > 30000].sum())


def test_a_fixed_split_is_kept_and_a_half_fixed_split_is_completed(plan):
    d = plan(updates={"deployment.local.n_prefill": 5, "deployment.local.n_decode": 3})
    assert (d["n_prefill"], d["n_decode"]) == (5, 3)
    d = plan(updates={"deployment.local.n_decode": 6})
    assert (d["n_prefill"], d["n_decode"]) == (2, 6)
    d = plan(updates={"deployment.local.n_prefill": 1})
    assert (d["n_prefill"], d["n_decode"]) == (1, 7)


def test_a_one_instance_local_cluster_works_only_with_a_remote_cluster(plan):
    d = plan(updates={"deployment.local.instances": 1})
    assert (d["n_prefill"], d["n_decode"], d["offload_fraction"]) == (0, 1, 1.0)
    with pytest.raises(InputError, match="no feasible configuration: the local cluster has 1 instance"):
        plan(["deployment=homogeneous_pd"], {"deployment.local.instances": 1})


def test_the_deployment_decode_step_override_is_used(plan):
    d = plan(["deployment=naive_hetero"], {"deployment.decode_step_s": 0.05})
    assert d["theta_pd_d_rps"] == pytest.approx(8 * 20 / (0.05 * 1024))


@pytest.mark.parametrize(
    ("updates", "message"),
    [
        ({"deployment.local.instances": 0}, "deployment.local.instances must be >= 1, got 0"),
        ({"deployment.prfaas.instances": 0}, "deployment.prfaas.instances must be >= 1, got 0"),
        ({"deployment.local.gpus_per_instance": 0}, "deployment.local.gpus_per_instance must be >= 1"),
        ({"link.capacity_gbps": 0}, "link.capacity_gbps must be > 0, got 0"),
        ({"link.capacity_gbps": -5}, "link.capacity_gbps must be > 0"),
        ({"deployment.local.n_prefill": 5, "deployment.local.n_decode": 5}, "exceeds instances = 8"),
        ({"deployment.local.n_decode": 0}, "n_decode must be >= 1"),
        ({"deployment.local.n_prefill": 9}, "no feasible configuration"),
        ({"planner.service_time": "median"}, "service_time must be one of representative, expected"),
        ({"planner.grid_step_tokens": 0}, "grid_step_tokens must be >= 1"),
        ({"deployment.decode_step_s": 0}, "decode_step_s must be > 0"),
        ({"deployment.local.hardware": None}, "hardware is missing"),
    ],
)
def test_bad_inputs_name_the_field(plan, updates, message):
    with pytest.raises(InputError, match=message):
        plan(updates=updates)


def test_a_model_too_big_for_the_hardware_is_an_input_error(plan):
    with pytest.raises(InputError, match="do not fit 8 x h20"):
        plan(["model=ring_25_1t"])


def test_bad_api_arguments(compose_cfg, paper_lengths):
    cfg = compose_cfg([])
    values, weights = paper_lengths
    with pytest.raises(InputError, match="mean_output_tokens must be > 0"):
        plan_deployment(cfg.deployment, cfg.model, cfg.link, cfg.planner, values, weights, 0)
    with pytest.raises(InputError, match="model is missing"):
        plan_deployment(cfg.deployment, None, cfg.link, cfg.planner, values, weights, 1024)
    with pytest.raises(InputError, match="equal length"):
        plan_deployment(cfg.deployment, cfg.model, cfg.link, cfg.planner, values, weights[:-1], 1024)
    with pytest.raises(InputError, match="link is missing"):
        plan_deployment(cfg.deployment, cfg.model, None, cfg.planner, values, weights, 1024)
    homog = compose_cfg(["deployment=homogeneous_pd"])  # no remote cluster: the link is not needed
    plan_deployment(homog.deployment, homog.model, None, homog.planner, np.array([1000.0]), np.array([1.0]), 1024)
