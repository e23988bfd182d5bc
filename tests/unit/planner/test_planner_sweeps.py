"""Figure 5-style sweeps: threshold sweep at the chosen split, split sweep at the chosen threshold."""

from __future__ import annotations

import numpy as np
import pytest

from harness.planner.sweeps import split_sweep, threshold_sweep


@pytest.fixture(scope="module")
def prfaas(plan):
    # The reproduction in paper-facts 12.6 used the paper's formula: set it explicitly.
    return plan(updates={"planner.service_time": "representative"}, as_dict=False)


def test_threshold_sweep_fig5b(prfaas):
    """PrfaaS bound rises with t, PD-P bound falls, and they cross at the chosen t (Eq. 7)."""
    df = threshold_sweep(prfaas)
    assert len(df) == 131072 // 256 + 1 and df["chosen"].sum() == 1
    mid = df[(df.threshold_tokens >= 5000) & (df.threshold_tokens <= 60000)]
    assert np.all(np.diff(mid.prfaas_bound_rps) >= -1e-9) and np.all(np.diff(mid.pd_p_bound_rps) <= 1e-9)
    best = df[df.chosen].iloc[0]
    assert best.lambda_rps == pytest.approx(prfaas.lambda_max_rps)
    assert best.prfaas_bound_rps == pytest.approx(best.pd_p_bound_rps, rel=0.05)
    # independent reproduction in paper-facts 12.6 (same inputs): 2.57 at 5K, PD-P 1.03 at 60K
    at = df.set_index("threshold_tokens")
    assert at.loc[5120.0, "prfaas_bound_rps"] == pytest.approx(2.57, rel=0.02)
    assert at.loc[59904.0, "pd_p_bound_rps"] == pytest.approx(1.03, rel=0.02)
    assert df.lambda_rps.max() == pytest.approx(prfaas.lambda_max_rps)


def test_split_sweep_fig5a(prfaas):
    """Decode bound 0.78 req/s per decode instance; prefill bound capped by PrfaaS from N_p = 3."""
    df = split_sweep(prfaas).set_index("n_prefill")
    assert list(df.index) == list(range(8))
    np.testing.assert_allclose(df.loc[1:7, "decode_bound_rps"], 0.78125 * np.arange(7, 0, -1))
    assert df.loc[1, "prefill_bound_rps"] == pytest.approx(1.08, rel=0.02)
    assert df.loc[2, "prefill_bound_rps"] == pytest.approx(2.17, rel=0.02)
    assert df.loc[3:7, "prefill_bound_rps"].nunique() == 1  # PrfaaS caps it
    assert df.loc[3, "chosen"] and df.lambda_rps.idxmax() == 3
