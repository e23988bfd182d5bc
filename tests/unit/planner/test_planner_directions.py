"""Change an input and the plan must move the way the physics says."""

from __future__ import annotations

import numpy as np
import pytest

FIXED_SPLIT = {"deployment.local.n_prefill": 3, "deployment.local.n_decode": 5}


def test_a_5_gbps_link_makes_prfaas_bandwidth_bound_and_lowers_lambda(plan):
    wide, narrow = plan(), plan(updates={"link.capacity_gbps": 5})
    assert wide["bound"] == "prfaas_compute"
    assert narrow["bound"] == "prfaas_bandwidth" or narrow["utilisation"]["link"] == pytest.approx(1.0)
    assert narrow["egress_gbps"] <= 5.0 + 1e-9
    assert narrow["lambda_max_rps"] < 0.9 * wide["lambda_max_rps"]
    # the planner answers scarce bandwidth by offloading fewer, longer requests
    assert narrow["threshold_tokens"] > wide["threshold_tokens"]
    assert narrow["offload_fraction"] < wide["offload_fraction"]


def test_lambda_never_falls_as_the_link_widens(plan):
    lams = [plan(updates={"link.capacity_gbps": g})["lambda_max_rps"] for g in (1, 2, 5, 10, 20, 100, 400)]
    assert lams == sorted(lams)
    assert lams[0] < lams[-1]


def test_a_dense_gqa_model_needs_over_ten_times_the_egress_of_the_hybrid(plan):
    """Same threshold and split: egress per unit of Lambda is p * S_kv(l_long); only S_kv differs."""
    same = {"deployment.router.threshold_tokens": 19456, **FIXED_SPLIT}
    hybrid, dense = plan(updates=same), plan(["model=minimax_m25"], same)
    assert dense["offload_fraction"] == hybrid["offload_fraction"]
    per_rps = dense["egress_gbps"] / dense["lambda_max_rps"], hybrid["egress_gbps"] / hybrid["lambda_max_rps"]
    assert per_rps[0] / per_rps[1] > 10
    assert dense["bound"] == "prfaas_bandwidth"  # 100 Gbps cannot carry a dense model's KV
    assert hybrid["bound"] == "prfaas_compute"


def test_at_a_fixed_split_a_shorter_length_distribution_shrinks_the_offloaded_share(plan, lognormal):
    shares = [plan(updates=FIXED_SPLIT, lengths=lognormal(mu=mu))["offload_fraction"] for mu in (8.5, 9.0, 9.5, 9.9)]
    assert shares == sorted(shares) and shares[0] < shares[-1] - 0.1


def test_with_a_free_split_shorter_prompts_move_local_instances_to_decode(plan, lognormal):
    """Shorter prompts cut prefill work but not decode work (L_out fixed), so decode needs more instances."""
    n_decode = [plan([], lengths=lognormal(mu=mu))["n_decode"] for mu in (8.5, 9.0, 9.9, 10.7)]
    assert n_decode == sorted(n_decode, reverse=True) and n_decode[0] > n_decode[-1]


def test_more_decode_instances_never_lower_the_decode_bound(plan):
    result = plan([], as_dict=False)
    order = np.argsort(result.grid.n_decode)
    assert np.all(np.diff(result.grid.theta_pd_d[order]) >= 0)


def test_longer_outputs_lower_the_decode_bound_and_shift_instances_to_decode(plan):
    short, long_ = plan([], mean_output_tokens=1024), plan([], mean_output_tokens=4096)
    assert long_["theta_pd_d_rps"] / long_["n_decode"] == pytest.approx(short["theta_pd_d_rps"] / short["n_decode"] / 4)
    assert long_["n_decode"] > short["n_decode"]
    assert long_["lambda_max_rps"] < short["lambda_max_rps"]


def test_expected_service_times_are_slower_than_representative_ones(plan):
    """T is convex in l, so E[T(L)] > T(E[L]) (Jensen): every prefill bound, and Lambda, drop."""
    for dep in ("homogeneous_pd", "naive_hetero", "prfaas_pd"):
        rep = plan([f"deployment={dep}"], {"planner.service_time": "representative"})
        exp = plan([f"deployment={dep}"], {"planner.service_time": "expected"})
        assert exp["lambda_max_rps"] < rep["lambda_max_rps"]


def test_a_bigger_prfaas_cluster_never_lowers_lambda(plan):
    lams = [plan(updates={"deployment.prfaas.instances": n})["lambda_max_rps"] for n in (1, 2, 4, 8)]
    assert lams == sorted(lams) and lams[0] < lams[-1]
