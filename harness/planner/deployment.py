"""plan_deployment: read a deployment config's constraints, build the profiles, search the grid.

Constraints come from the deployment itself, so one function plans every kind:
- no remote cluster (`prfaas: null`, homogeneous PD): p = 0, only splits are searched;
- `local.n_prefill: 0` (naive heterogeneous): every prefill is remote, p = 1;
- a fixed `local.n_prefill` / `local.n_decode` or `router.threshold_tokens`: that value only;
- everything else null: the paper's exhaustive grid over t and every N_p/N_d split.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.config.deployment import DeploymentConfig, LocalClusterConfig
from harness.costmodel import InstanceProfile
from harness.costmodel.nodes import number
from harness.errors import InputError
from harness.planner.configs import deployment_config, fixed_threshold, link_config, planner_config
from harness.planner.distribution import LengthDistribution
from harness.planner.inputs import SharedInputs, shared_inputs
from harness.planner.result import Plan
from harness.planner.schema import PlannerConfig
from harness.planner.search import Stages, best_index, evaluate


def _splits(local: LocalClusterConfig, has_remote: bool) -> tuple[np.ndarray, np.ndarray]:
    """Candidate (N_p, N_d) pairs allowed by the config."""
    n_local, n_p, n_d = local.instances, local.n_prefill, local.n_decode
    if n_p is not None and n_d is not None:
        if n_p + n_d > n_local:
            raise InputError(f"deployment.local: n_prefill + n_decode = {n_p + n_d} exceeds instances = {n_local}")
        pairs = [(n_p, n_d)]
    elif n_p is not None:
        pairs = [(n_p, n_local - n_p)]
    elif n_d is not None:
        pairs = [(n_local - n_d, n_d)]
    else:
        pairs = [(k, n_local - k) for k in range(0 if has_remote else 1, n_local)]
    pairs = [(a, b) for a, b in pairs if a >= 0 and b >= 1 and (a >= 1 or has_remote)]
    if not pairs:
        raise InputError(
            f"no feasible configuration: the local cluster has {n_local} instance(s) with n_prefill={n_p}, "
            f"n_decode={n_d}" + ("" if has_remote else " and no remote prefill cluster")
            + "; it needs at least one decode instance and, without a remote cluster, one prefill instance")
    arr = np.array(pairs, dtype=int)
    return arr[:, 0], arr[:, 1]


def _thresholds(dep: DeploymentConfig, planner: PlannerConfig, has_remote: bool, all_remote: bool
                ) -> tuple[np.ndarray, bool, list[str]]:
    """Candidate thresholds (ascending), whether a threshold applies, and notes."""
    notes: list[str] = []
    fixed = fixed_threshold(dep)
    if not has_remote:
        return np.array([np.inf]), False, notes
    if all_remote:
        if fixed is not None:
            notes.append(f"router.threshold_tokens={dep.router['threshold_tokens']} ignored: no local prefill "
                         "instance, every prefill is remote")
        return np.array([-np.inf]), False, notes
    if fixed is not None:
        return np.array([fixed]), True, notes
    step, t_max = planner.grid_step_tokens, planner.t_max_tokens
    return np.arange(0, t_max + step, step, dtype=float), True, notes


def plan_deployment(deployment_cfg: Any, model_cfg: Any, link_cfg: Any, planner_cfg: Any, values: np.ndarray,
                    weights: np.ndarray, mean_output_tokens: float, inputs: SharedInputs | None = None,
                    mean_context_tokens: float | None = None) -> Plan:
    """Plan one deployment for the uncached-length distribution (values, weights) and mean output length.

    The deployment, link and planner nodes may be composed configs, dicts or the schema dataclasses
    (`DeploymentConfig`, `LinkConfig`, `PlannerConfig`); they become the dataclasses, checked, at
    the boundary (harness/planner/configs.py). The link is read only with a remote cluster.
    `inputs` (profiles, SLO, service-time mode, decode step) are the ones the emulator runs with when
    it asks; built from the configs otherwise. `mean_context_tokens` is the mean prompt a decode
    sequence holds (default: the mean of `values`); the decode step of Eq. 5 is evaluated at it plus
    half the output, the mean context a sequence reads over its decode.
    """
    dep = deployment_config(deployment_cfg)
    planner = planner_config(planner_cfg)
    name = dep.name
    local = dep.local
    n_local = local.instances
    remote_cfg = dep.prfaas
    l_out = number({"mean_output_tokens": mean_output_tokens}, "mean_output_tokens", "workload", minimum=0,
                   exclusive=True)
    if inputs is None:
        inputs = shared_inputs(dep, model_cfg, planner)
    service_time, slo = inputs.service_time, inputs.slo_tokens_per_s
    local_prof, remote_prof = inputs.local, inputs.remote if remote_cfg is not None else None
    n_prfaas, link_gbps, efficiency = 0, None, 1.0
    if remote_prof is not None and remote_cfg is not None:
        n_prfaas = remote_cfg.instances
        link = link_config(link_cfg)
        link_gbps, efficiency = link.capacity_gbps, link.efficiency
    if local_prof.bs_max < 1:
        raise InputError(f"no feasible configuration: a decode instance of {_describe(local_prof)} cannot hold "
                         f"one sequence within the {slo:g} tok/s SLO and its KV memory")
    dist = LengthDistribution(values, weights)
    context = (dist.mean if mean_context_tokens is None else float(mean_context_tokens)) + l_out / 2.0
    t_decode = inputs.t_decode_s(context)

    n_p, n_d = _splits(local, remote_prof is not None)
    all_remote = remote_prof is not None and int(n_p.max()) == 0
    thresholds, applies, notes = _thresholds(dep, planner, remote_prof is not None, all_remote)
    stages = Stages(local=local_prof, remote=remote_prof, n_prfaas=n_prfaas,
                    link_bytes_per_s=None if link_gbps is None else link_gbps * 1e9 / 8.0 * efficiency,
                    t_decode_s=t_decode, bs_max=local_prof.bs_max, mean_output_tokens=l_out,
                    save_s=(dep.kv_save_s.base_s, dep.kv_save_s.per_token_s),
                    restore_s=(dep.kv_restore_s.base_s, dep.kv_restore_s.per_token_s),
                    extra_bytes=(dep.kv_bytes_overhead.fixed_bytes, dep.kv_bytes_overhead.per_token_bytes))
    grid = evaluate(dist, stages, thresholds, n_p, n_d, service_time)
    try:
        i, j = best_index(grid, planner.tie_rel_tol)
    except InputError as err:
        raise InputError(f"deployment {name}: {err}") from err
    return Plan(
        deployment=name, model=local_prof.model, service_time=service_time, grid=grid, i=i, j=j,
        n_prfaas=n_prfaas, n_local=n_local, threshold_applies=applies, link_gbps=link_gbps, link_efficiency=efficiency,
        price_prfaas=remote_prof.price_per_instance if remote_prof is not None else 0.0,
        price_local=local_prof.price_per_instance, bs_max=local_prof.bs_max, t_decode_s=t_decode,
        mean_output_tokens=l_out, notes=notes, slo_tokens_per_s=slo, decode_context_tokens=context,
        decode_step=None if inputs.decode_step_override_s is not None else local_prof.decode_step_s,
    )


def _describe(profile: InstanceProfile) -> str:
    return f"{profile.model} on {profile.gpus_per_instance} x {profile.hardware}"
