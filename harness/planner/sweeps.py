"""Figure 5-style slices of a plan's grid as tidy DataFrames (one row per grid point)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.planner.result import Plan

_GBIT = 8.0 / 1e9


def _finite(x: np.ndarray) -> np.ndarray:
    """inf (a dropped term: its stage gets no traffic) -> NaN, so Parquet readers see a missing bound."""
    x = np.asarray(x, dtype=float)
    return np.where(np.isfinite(x), x, np.nan)


def threshold_sweep(plan: Plan) -> pd.DataFrame:
    """Lambda and its three bounds against the threshold t, at the plan's split (Fig. 5b)."""
    g, j = plan.grid, plan.j
    lam = g.lam[:, j]
    return pd.DataFrame({
        "deployment": plan.deployment,
        "n_prefill": plan.n_prefill,
        "n_decode": plan.n_decode,
        "threshold_tokens": g.thresholds,
        "offload_fraction": g.p,
        "l_long_tokens": g.l_long,
        "l_short_tokens": g.l_short,
        "lambda_rps": lam,
        "prfaas_bound_rps": _finite(g.prfaas_term),
        "pd_p_bound_rps": _finite(g.pd_p_term[:, j]),
        "pd_d_bound_rps": np.full(g.thresholds.shape, g.theta_pd_d[j]),
        "theta_prfaas_rps": g.theta_prfaas,
        "theta_prfaas_compute_rps": g.theta_prfaas_compute,
        "bandwidth_ceiling_rps": g.theta_prfaas_bandwidth,
        "theta_pd_p_rps": g.theta_pd_p[:, j],
        "egress_gbps": lam * g.p * np.nan_to_num(g.s_kv_long_bytes) * _GBIT,
        "chosen": np.arange(g.thresholds.size) == plan.i,
    })


def split_sweep(plan: Plan) -> pd.DataFrame:
    """Lambda, the prefill bound min(Theta_prfaas/p, Theta_pd-p/(1-p)) and the decode bound vs N_p (Fig. 5a)."""
    g, i = plan.grid, plan.i
    prefill = np.minimum(g.prfaas_term[i], g.pd_p_term[i, :])
    return pd.DataFrame({
        "deployment": plan.deployment,
        "threshold_tokens": plan.threshold_tokens,
        "offload_fraction": g.p[i],
        "n_prefill": g.n_prefill,
        "n_decode": g.n_decode,
        "lambda_rps": g.lam[i, :],
        "prefill_bound_rps": _finite(prefill),
        "decode_bound_rps": g.theta_pd_d,
        "theta_pd_p_rps": g.theta_pd_p[i, :],
        "chosen": np.arange(g.n_prefill.size) == plan.j,
    })
