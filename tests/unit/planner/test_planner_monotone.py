"""Metamorphic properties of the planner: more resources never lower Lambda_max, a thinner link moves the
threshold up (fewer, longer offloads), k-times faster hardware gives k times the capacity with the same
plan, the length distribution's representation does not matter, and the chosen plan beats every fixed one.

Each compares plans of one model against each other (never against a re-derived formula).
"""

from __future__ import annotations

import dataclasses
from itertools import pairwise

import numpy as np
import pytest
from omegaconf import OmegaConf

from harness.planner import plan_deployment
from harness.planner.configs import deployment_config, link_config, planner_config
from harness.planner.inputs import shared_inputs

REL = 1e-12
FIXED_SPLIT = {"n_prefill": 3, "n_decode": 5}
LINKS = (1, 2, 5, 10, 20, 100)  # Gbps: from bandwidth-bound to compute-bound (the default case)


@pytest.fixture(scope="module")
def quick(compose_cfg, paper_lengths):
    """quick(deployment, link_gbps=None, threshold=None, **local) -> Plan.to_dict(), ~2 ms a plan.

    The composed config is read into the planner's dataclasses and profiles once; each variant replaces
    fields of those (the `plan` fixture converts a whole config per call, ~10x the planner's own time).
    """
    base = {}

    def _quick(deployment: str, link_gbps: float | None = None, threshold: float | None = None, **local):
        if deployment not in base:
            cfg = compose_cfg([f"deployment={deployment}"])
            node = OmegaConf.to_container(cfg, resolve=True)
            dep = deployment_config(node["deployment"])
            base[deployment] = (dep, node["model"], link_config(node["link"]), planner_config(node["planner"]),
                                shared_inputs(dep, node["model"], node["planner"]))
        dep, model, link, planner, inputs = base[deployment]
        dep = dataclasses.replace(dep, local=dataclasses.replace(dep.local, **local))
        if threshold is not None:
            dep = dataclasses.replace(dep, router={**dep.router, "threshold_tokens": threshold})
        if link_gbps is not None:
            link = dataclasses.replace(link, capacity_gbps=float(link_gbps))
        values, weights = paper_lengths
        return plan_deployment(dep, model, link, planner, values, weights, 1024.0, inputs=inputs).to_dict()

    return _quick


@pytest.mark.parametrize("deployment", ["prfaas_pd", "homogeneous_pd", "naive_hetero"])
def test_more_local_instances_never_lower_lambda(quick, deployment):
    """A free split over n + 1 instances can run any split of n plus one more decoder (naive: all decode)."""
    def lam(n: int) -> float:
        naive = {"n_decode": n} if deployment == "naive_hetero" else {}  # every local instance decodes
        return quick(deployment, instances=n, **naive)["lambda_max_rps"]

    lams = [lam(n) for n in (2, 4, 8, 16)]
    assert all(b >= a * (1 - REL) for a, b in pairwise(lams)), lams
    assert lams[-1] > 1.5 * lams[0], lams


@pytest.mark.parametrize("split", ["fixed", "free"])
def test_a_thinner_link_offloads_fewer_longer_requests(quick, split):
    """Eq. 3's bandwidth term B_out / (p S_kv(l_long)) rises with t and falls with B_out: a thinner link
    moves the best t up (the paper's Fig. 5 b); Lambda never rises and the egress fits the link."""
    fixed = FIXED_SPLIT if split == "fixed" else {}
    plans = [quick("prfaas_pd", gbps, **fixed) for gbps in LINKS]
    t = [p["threshold_tokens"] for p in plans]
    share = [p["offload_fraction"] for p in plans]
    lam = [p["lambda_max_rps"] for p in plans]
    assert t == sorted(t, reverse=True) and t[0] > 2 * t[-1], t
    assert share == sorted(share) and share[0] < share[-1] / 3, share
    assert lam == sorted(lam) and lam[0] < lam[-1] / 2, lam
    for gbps, p in zip(LINKS, plans, strict=True):
        assert p["egress_gbps"] <= gbps * (1 + REL)
    assert plans[-1]["utilisation"]["link"] < 0.5
    if split == "fixed":  # (a free split's integer steps can leave the thin link short of full)
        # the thin end is bandwidth-bound: the link full at the optimum, up to the 256-token grid step next
        # to the crossing of the bandwidth and local-prefill terms (< 1% of p S_kv at t ~ 70K)
        assert plans[0]["utilisation"]["link"] > 0.99


def _faster(k: float, link_gbps: float) -> dict[str, float]:
    """Every speed of internal_1t's H200/H20 case times k: prefill times and decode step / k, link x k,
    and the SLO (tokens/s) x k so the decode budget per step scales with it."""
    return {"model.profiles.h20.prefill.scale": 1.0 / k, "model.profiles.h200.prefill.scale": 1.0 / k,
            "model.profiles.h20.decode.step_s": 0.025 / k, "planner.slo_tokens_per_s": 40.0 * k,
            "link.capacity_gbps": link_gbps * k}


@pytest.mark.parametrize(("k", "link_gbps", "service_time"),
                         [(2, 100, "expected"), (3, 5, "expected"), (4, 100, "representative")])
def test_k_times_faster_hardware_gives_k_times_every_capacity_and_the_same_plan(plan, k, link_gbps, service_time):
    mode = {"planner.service_time": service_time}
    base = plan(updates={"link.capacity_gbps": link_gbps, **mode})
    fast = plan(updates={**_faster(k, link_gbps), **mode})
    for key in ("threshold_tokens", "n_prefill", "n_decode", "offload_fraction", "bound", "bs_max"):
        assert fast[key] == base[key], key
    for key in ("lambda_max_rps", "theta_prfaas_rps", "theta_pd_p_rps", "theta_pd_d_rps", "egress_gbps",
                "bandwidth_ceiling_rps"):
        assert fast[key] == pytest.approx(k * base[key], rel=1e-9), key
    assert fast["t_decode_s"] == pytest.approx(base["t_decode_s"] / k, rel=1e-12)
    assert base["bound"] == ("prfaas_bandwidth" if link_gbps == 5 else "prfaas_compute")


def test_the_length_distributions_representation_does_not_change_the_plan(plan, lognormal):
    """Sorted or shuffled support, weights scaled, each point split in two (1/4 and 3/4): one distribution."""
    values, weights = lognormal(n=4000)
    rng = np.random.default_rng(7)
    order = rng.permutation(len(values))
    twice = rng.permutation(2 * len(values))
    forms = {
        "shuffled": (values[order], weights[order]),
        "scaled_weights": (values, weights * 7.0),
        "split_points": (np.concatenate([values, values])[twice],
                         np.concatenate([0.25 * weights, 0.75 * weights])[twice]),
    }
    ref = plan(lengths=(values, weights))
    for name, lengths in forms.items():
        got = plan(lengths=lengths)
        for key in ("threshold_tokens", "n_prefill", "n_decode"):
            assert got[key] == ref[key], (name, key)
        for key in ("lambda_max_rps", "offload_fraction", "l_long_tokens", "l_short_tokens", "egress_gbps"):
            assert got[key] == pytest.approx(ref[key], rel=1e-9), (name, key)


@pytest.mark.parametrize("link_gbps", [5, 100])
def test_the_chosen_plan_beats_every_fixed_configuration(quick, link_gbps):
    """The grid search's answer is at least every (t, split) the operator could fix, and fixing its own
    answer gives its own Lambda back."""
    best = quick("prfaas_pd", link_gbps)
    own = quick("prfaas_pd", link_gbps, best["threshold_tokens"], n_prefill=best["n_prefill"],
                n_decode=best["n_decode"])
    assert own["lambda_max_rps"] == pytest.approx(best["lambda_max_rps"], rel=REL)
    lams = [quick("prfaas_pd", link_gbps, t, n_prefill=n_prefill, n_decode=8 - n_prefill)["lambda_max_rps"]
            for t in (0, 4096, 8192, 19456, 30000, 40960, 65536, 131072) for n_prefill in range(8)]
    assert max(lams) <= best["lambda_max_rps"] * (1 + REL)
    assert max(lams) > 0.9 * best["lambda_max_rps"]  # the fixed grid came near the best (it is not all zeros)


def test_faster_prefill_on_either_cluster_or_a_laxer_slo_never_lowers_lambda(plan, lognormal):
    """prefill.scale multiplies a cluster's T(l) (H20 local, H200 PrfaaS); with the batch- and context-
    dependent decode step, a lower SLO (tokens/s) lets bs_max grow. Each only loosens a bound of Eq. 6.
    (A 4,000-point length grid: the comparison needs no finer one.)"""
    lengths = lognormal(n=4000)
    for cluster in ("h20", "h200"):
        slow, fast = (plan(updates={f"model.profiles.{cluster}.prefill.scale": s}, lengths=lengths)
                      for s in (2.0, 0.5))
        assert fast["lambda_max_rps"] > slow["lambda_max_rps"], cluster
    strict, lax = (plan(updates={"model.decode_variant": "linear", "planner.slo_tokens_per_s": slo}, lengths=lengths)
                   for slo in (60, 20))
    assert lax["bs_max"] > strict["bs_max"] and lax["lambda_max_rps"] > strict["lambda_max_rps"]
