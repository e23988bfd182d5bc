"""The KV hand-off's costs and the link's efficiency in Eq. 3-6 (closed forms on a hand-sized grid), and the
testbed-scale preset planned: the three deployments differ the way the paper says."""

from __future__ import annotations

import numpy as np
import pytest

from harness.planner import LengthDistribution, Stages, evaluate
from harness.planner.deployment import plan_deployment

# Every request 1000 tokens; remote and local T = l/1000 s; KV 1000 B/token; decode 10 slots x 0.1 s x 100 tokens.
DIST = LengthDistribution(np.array([1000.0]), np.array([1.0]))


class _Profile:
    def prefill_s_vec(self, l):
        return np.asarray(l, dtype=float) / 1000

    def kv_bytes(self, l):
        return 1000.0 * np.asarray(l, dtype=float)


def _grid(**handoff):
    stages = Stages(local=_Profile(), remote=_Profile(), n_prfaas=1, link_bytes_per_s=5e5, t_decode_s=0.1, bs_max=10,
                    mean_output_tokens=100, **handoff)
    return evaluate(DIST, stages, np.array([0.0, 2000.0]), np.array([1]), np.array([1]))


def test_the_save_lengthens_both_prefills_and_the_bytes_overhead_the_transfer():
    g = _grid(save_s=(0.1, 1e-4), extra_bytes=(192, 16))
    np.testing.assert_allclose(g.t_long_s[0], 1.0 + 0.1 + 0.1)  # T(1000) + save
    np.testing.assert_allclose(g.t_short_s[1], 1.2)
    np.testing.assert_allclose(g.s_kv_long_bytes[0], 1e6 + 192 + 16_000)
    np.testing.assert_allclose(g.theta_prfaas_bandwidth[0], 5e5 / (1e6 + 16_192))


def test_the_restore_holds_the_decode_slot():
    g = _grid(restore_s=(1.0, 0.001))  # a slot for 10 s of decode + 2 s of restore
    np.testing.assert_allclose(g.theta_pd_d, [10 / 12])


def test_the_link_efficiency_lowers_the_bandwidth_bound_and_egress_is_on_the_wire(variant):
    cfg = variant(["deployment=naive_hetero"])
    values, weights = np.array([20_000.0]), np.array([1.0])
    plans = {eff: plan_deployment(cfg.deployment, cfg.model, {**cfg.link, "capacity_gbps": 1.0, "efficiency": eff},
                                  cfg.planner, values, weights, 1024.0) for eff in (1.0, 0.5)}
    assert plans[1.0].bound == plans[0.5].bound == "prfaas_bandwidth"
    assert plans[0.5].lambda_max_rps == pytest.approx(plans[1.0].lambda_max_rps / 2)
    assert plans[0.5].egress_gbps == pytest.approx(1.0) == plans[1.0].egress_gbps  # the link is full either way


@pytest.fixture(scope="module")
def testbed_plans(compose_cfg):
    from harness.deploy.build import make_plan

    return {d: make_plan(compose_cfg(["experiment=testbed_scale", f"deployment={d}"]))
            for d in ("homogeneous_pd", "naive_hetero", "prfaas_pd")}


def test_at_testbed_scale_naive_is_link_bound_and_prfaas_keeps_egress_under_the_link(testbed_plans):
    homogeneous, naive, prfaas = (testbed_plans[d] for d in ("homogeneous_pd", "naive_hetero", "prfaas_pd"))
    assert naive["bound"] == "prfaas_bandwidth" and naive["egress_gbps"] == pytest.approx(0.12)
    assert prfaas["bound"] != "prfaas_bandwidth" and prfaas["egress_gbps"] < 0.8 * 0.12
    assert naive["lambda_max_rps"] < homogeneous["lambda_max_rps"] < prfaas["lambda_max_rps"]
