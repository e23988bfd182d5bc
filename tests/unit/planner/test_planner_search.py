"""Eq. 3-6 and the argmax on hand-sized grids whose every number can be checked on paper."""

from __future__ import annotations

import numpy as np
import pytest

from harness.errors import InputError
from harness.planner import LengthDistribution, Stages, best_index, evaluate


class FakeProfile:
    """T(l) and S_kv(l) as plain functions (no config), enough for evaluate()."""

    def __init__(self, t_of_l, kv_per_token: float = 1000.0) -> None:
        self.t_of_l, self.kv_per_token = t_of_l, kv_per_token

    def prefill_s_vec(self, l):
        return self.t_of_l(np.asarray(l, dtype=float))

    def kv_bytes(self, l):
        return self.kv_per_token * np.asarray(l, dtype=float)


# L is 1000 or 3000 tokens with equal probability. Remote: T = l/1000 s; local: T = l/500 s.
DIST = LengthDistribution(np.array([3000.0, 1000.0]), np.array([1.0, 1.0]))
T = np.array([0.0, 2000.0, 4000.0])  # p = 1, 1/2, 0
N_P, N_D = np.array([0, 1, 2]), np.array([3, 2, 1])


def stages(link_bytes_per_s=1e9, t_decode_s=0.1, remote=True):
    return Stages(local=FakeProfile(lambda l: l / 500), remote=FakeProfile(lambda l: l / 1000) if remote else None,
                  n_prfaas=1, link_bytes_per_s=link_bytes_per_s, t_decode_s=t_decode_s, bs_max=10,
                  mean_output_tokens=100)  # decode: 10 / (0.1 * 100) = 1 req/s per instance


def test_lambda_grid_by_hand():
    g = evaluate(DIST, stages(), T, N_P, N_D)
    # t=0: everything remote, Theta_prfaas = 1/T(2000) = 0.5; t=2000: min(Theta_prfaas/p = (1/3)/0.5,
    # Theta_pd-p/(1-p) = N_p/2/0.5, N_d); t=4000: nothing remote, N_p/T_local(2000)=N_p/4 vs N_d.
    expected = np.array([[0.5, 0.5, 0.5], [0.0, 2 / 3, 2 / 3], [0.0, 0.25, 0.5]])
    np.testing.assert_allclose(g.lam, expected)
    np.testing.assert_allclose(g.p, [1.0, 0.5, 0.0])
    np.testing.assert_allclose(g.theta_pd_d, [3.0, 2.0, 1.0])
    assert np.isinf(g.prfaas_term[2]) and np.all(np.isinf(g.pd_p_term[0]))  # empty stages drop out
    assert best_index(g) == (1, 1)  # tie at 2/3: most decode instances wins


def test_bandwidth_bound():
    """B_out / S_kv(l_long): 5e5 B/s over 2e6 B requests caps PrfaaS at 0.25 req/s when p = 1."""
    g = evaluate(DIST, stages(link_bytes_per_s=5e5), T, N_P, N_D)
    assert g.theta_prfaas_bandwidth[0] == pytest.approx(0.25)
    assert g.theta_prfaas[0] == pytest.approx(0.25) and g.theta_prfaas_compute[0] == pytest.approx(0.5)
    assert g.lam[0, 0] == pytest.approx(0.25)


def test_ties_across_thresholds_go_to_the_largest_threshold():
    """Decode-bound everywhere (0.01 req/s per decode instance): keep the most requests local."""
    g = evaluate(DIST, stages(t_decode_s=10.0), T, N_P[1:], N_D[1:])
    np.testing.assert_allclose(g.lam[:, 0], 0.02)
    assert best_index(g) == (2, 0)


def test_expected_service_time_is_the_conditional_mean_of_t():
    remote = FakeProfile(lambda l: (l / 1000) ** 2)  # convex
    st = Stages(local=FakeProfile(lambda l: l / 500), remote=remote, n_prfaas=1, link_bytes_per_s=1e12,
                t_decode_s=0.1, bs_max=10, mean_output_tokens=100)
    rep = evaluate(DIST, st, T[:1], N_P, N_D, "representative")
    exp = evaluate(DIST, st, T[:1], N_P, N_D, "expected")
    assert rep.t_long_s[0] == pytest.approx(4.0)  # T(E[L]) = T(2000)
    assert exp.t_long_s[0] == pytest.approx(5.0)  # (T(1000) + T(3000)) / 2
    with pytest.raises(InputError, match="service_time must be one of representative, expected"):
        evaluate(DIST, st, T, N_P, N_D, "median")


def test_without_a_remote_cluster_any_offload_is_infeasible():
    g = evaluate(DIST, stages(remote=False), T, N_P, N_D)
    assert np.all(g.lam[:2] == 0)  # p > 0 with no PrfaaS: nothing can be served
    assert best_index(g) == (2, 2)


def test_all_zero_grid_is_an_input_error():
    g = evaluate(DIST, stages(remote=False), T[:2], N_P, N_D)
    with pytest.raises(InputError, match="no feasible configuration"):
        best_index(g)
