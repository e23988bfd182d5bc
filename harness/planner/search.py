"""The paper's throughput model (§3.4, Eq. 3-6) on a whole (threshold x split) grid, and its argmax.

  Theta_prfaas(t)    = min(N_prfaas / T_prfaas(l_long), B_out / S_kv(l_long))          (Eq. 3)
  Theta_pd-p(t, N_p) = N_p / T_local(l_short)                                           (Eq. 4)
  Theta_pd-d(N_d)    = N_d * BS_max / (T_decode * L_out)                                (Eq. 5)
  Lambda(t, N_p)     = min(Theta_prfaas / p, Theta_pd-p / (1 - p), Theta_pd-d)         (Eq. 6)

A term whose stage receives no traffic (p = 0, or 1 - p = 0) is dropped (+inf). With
`service_time="expected"`, T(l_long) becomes E[T(L) | L > t] (and likewise S_kv, l_short), the
mean service time a queue actually sees; T is convex, so this is larger (Jensen's gap).

Ties (within `tie_rel_tol` of the best Lambda) go to the largest threshold, i.e. the fewest
offloaded requests and the least cross-DC traffic, then to the most decode instances (decode
headroom for TPOT). Both choices cost no throughput and leave the scarcer resources idle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np

from harness.costmodel import InstanceProfile
from harness.errors import InputError
from harness.planner.distribution import LengthDistribution

SERVICE_TIMES = ("representative", "expected")


@dataclass(frozen=True)
class Stages:
    """Everything the model needs about the deployment, as numbers and profiles."""

    local: InstanceProfile
    remote: InstanceProfile | None
    n_prfaas: int
    link_bytes_per_s: float | None  # B_out
    t_decode_s: float
    bs_max: int
    mean_output_tokens: float
    # The KV hand-off's per-request costs, (base, per prompt token): a save lengthens a prefill instance's
    # service, a restore a decode slot's; bytes beyond the KV go over the link (harness/deploy/handoff.py).
    save_s: tuple[float, float] = (0.0, 0.0)
    restore_s: tuple[float, float] = (0.0, 0.0)
    extra_bytes: tuple[float, float] = (0.0, 0.0)


def _plus(values: np.ndarray, cost: tuple[float, float], tokens: np.ndarray) -> np.ndarray:
    """values + base + per_token x tokens (values as they are when the cost is zero)."""
    if cost == (0.0, 0.0):
        return values
    return cast(np.ndarray, values + cost[0] + cost[1] * np.nan_to_num(tokens))


@dataclass
class Grid:
    """Every bound on the grid; index [i] is thresholds[i], [j] is n_prefill[j]."""

    thresholds: np.ndarray  # tokens; -inf: everything remote, +inf: everything local
    n_prefill: np.ndarray
    n_decode: np.ndarray
    p: np.ndarray
    l_long: np.ndarray
    l_short: np.ndarray
    t_long_s: np.ndarray  # PrfaaS service time per request (representative or expected)
    t_short_s: np.ndarray  # PD-P service time per request
    s_kv_long_bytes: np.ndarray
    theta_prfaas_compute: np.ndarray  # (T,)
    theta_prfaas_bandwidth: np.ndarray  # (T,)
    theta_pd_p: np.ndarray  # (T, S)
    theta_pd_d: np.ndarray  # (S,)
    prfaas_term: np.ndarray  # (T,) Theta_prfaas / p
    pd_p_term: np.ndarray  # (T, S) Theta_pd-p / (1 - p)
    lam: np.ndarray  # (T, S)

    @property
    def theta_prfaas(self) -> np.ndarray:
        return cast(np.ndarray, np.minimum(self.theta_prfaas_compute, self.theta_prfaas_bandwidth))


def evaluate(dist: LengthDistribution, stages: Stages, thresholds: np.ndarray, n_prefill: np.ndarray,
             n_decode: np.ndarray, service_time: str = "representative") -> Grid:
    """All bounds of Eq. 3-6 on thresholds x splits (vectorised; a few milliseconds)."""
    if service_time not in SERVICE_TIMES:
        raise InputError(f"planner.service_time must be one of {', '.join(SERVICE_TIMES)}, got {service_time!r}")
    thresholds = np.asarray(thresholds, dtype=float)
    n_p = np.asarray(n_prefill, dtype=float)
    n_d = np.asarray(n_decode, dtype=float)
    local, remote = stages.local, stages.remote
    p, q, l_long, l_short = dist.split(thresholds)
    if service_time == "representative":
        t_short = local.prefill_s_vec(np.nan_to_num(l_short))
        t_long = remote.prefill_s_vec(np.nan_to_num(l_long)) if remote is not None else np.full_like(p, np.nan)
        s_long = (cast(np.ndarray, remote.kv_bytes(np.nan_to_num(l_long))) if remote is not None
                  else np.full_like(p, np.nan))
    else:
        _, _, _, t_short = dist.split(thresholds, local.prefill_s_vec(dist.values))
        if remote is not None:
            _, _, t_long, _ = dist.split(thresholds, remote.prefill_s_vec(dist.values))
            _, _, s_long, _ = dist.split(thresholds, cast(np.ndarray, remote.kv_bytes(dist.values)))
        else:
            t_long = s_long = np.full_like(p, np.nan)
    t_short = _plus(t_short, stages.save_s, l_short)  # linear costs: at the mean length is the mean cost
    t_long = _plus(t_long, stages.save_s, l_long)
    s_long = _plus(s_long, stages.extra_bytes, l_long)
    inf = np.inf
    with np.errstate(divide="ignore", invalid="ignore"):
        if remote is not None:
            compute = stages.n_prfaas / t_long
            bandwidth = cast(float, stages.link_bytes_per_s) / s_long  # set with a remote cluster
        else:
            compute = bandwidth = np.zeros_like(p)
        theta_prfaas = np.minimum(compute, bandwidth)
        prfaas_term = np.where(p > 0, theta_prfaas / p, inf)
        theta_pd_p = n_p[None, :] / t_short[:, None]
        theta_pd_p = np.where(q[:, None] > 0, theta_pd_p, np.nan)  # no local traffic: undefined
        pd_p_term = np.where(q[:, None] > 0, theta_pd_p / q[:, None], inf)
    slot_s = stages.t_decode_s * stages.mean_output_tokens  # a request's time in its decode slot
    if stages.restore_s != (0.0, 0.0):
        slot_s += stages.restore_s[0] + stages.restore_s[1] * dist.mean
    theta_pd_d = n_d * stages.bs_max / slot_s
    lam = np.minimum(np.minimum(prfaas_term[:, None], pd_p_term), theta_pd_d[None, :])
    return Grid(thresholds, n_p.astype(int), n_d.astype(int), p, l_long, l_short, t_long, t_short, s_long,
                compute, bandwidth, theta_pd_p, theta_pd_d, prfaas_term, pd_p_term, lam)


def best_index(grid: Grid, tie_rel_tol: float = 1e-9) -> tuple[int, int]:
    """(threshold index, split index) of the best Lambda under the documented tie rule."""
    lam = np.where(np.isfinite(grid.lam), grid.lam, -1.0)
    best = float(lam.max())
    if not best > 0.0:
        raise InputError("no feasible configuration: every threshold and split gives zero throughput")
    ties = lam >= best * (1.0 - tie_rel_tol)
    i = int(np.nonzero(ties.any(axis=1))[0].max())  # largest threshold (thresholds ascend)
    cols = np.nonzero(ties[i])[0]
    j = int(cols[np.argmax(grid.n_decode[cols])])  # most decode instances
    return i, j
