"""Build an emulated deployment from the composed config, asking the planner for what is left open.

A deployment config may leave the PD split (`local.n_prefill`, `local.n_decode`) and the router's
threshold null: the planner then chooses them for this workload, model and link, exactly as an
operator following the paper would. The plan is returned too, so every run records what the
analytic model predicted beside what the emulator measured.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from harness.clock import Clock
from harness.deploy.deployment import Deployment
from harness.deploy.faults import schedule_faults
from harness.deploy.handoff import Handoff
from harness.deploy.link import Link
from harness.deploy.rebalancer import PlanFn, Rebalancer
from harness.deploy.router.base import ReplanningRouter
from harness.errors import InputError, require
from harness.planner import plan_deployment
from harness.planner.inputs import SharedInputs, shared_inputs
from harness.workload import build_workload, input_length_distribution, mean_output_tokens


@dataclass
class Built:
    deployment: Deployment
    plan: dict[str, Any] | None
    threshold_tokens: float | None
    n_prfaas: int
    n_prefill: int
    n_decode: int


def needs_plan(dep: DictConfig) -> bool:
    router_t = dep.router.get("threshold_tokens", "absent") if dep.router is not None else "absent"
    return dep.local.n_prefill is None or dep.local.n_decode is None or router_t is None


def make_plan(cfg: DictConfig, inputs: SharedInputs | None = None) -> dict[str, Any]:
    """Plan on the lengths the router routes on: incremental after prefix hits (the paper's rule),
    or whole prompts for a cache-blind router (`router.cache_aware: false`), as its operator would."""
    router = cfg.deployment.router
    if router is not None and router.get("cache_aware", True) is False:
        values = np.array([r.input_tokens for r in build_workload(cfg.workload)], dtype=float)
        weights = np.ones_like(values)
    else:
        values, weights = input_length_distribution(cfg.workload)
    plan = plan_deployment(cfg.deployment, cfg.model, cfg.link, cfg.planner, values, weights,
                           mean_output_tokens(cfg.workload), inputs=inputs)
    return plan.to_dict()


def _container(node: DictConfig) -> dict[str, Any]:
    """A resolved plain copy of a mapping node (the composed config's nodes here are all mappings)."""
    return cast(dict[str, Any], OmegaConf.to_container(node, resolve=True))


def replanner(cfg: DictConfig, deployment: Deployment) -> PlanFn:
    """The planner as the rebalancer calls it: for observed lengths, free or with a fixed config.

    While the PrfaaS cluster is unreachable it plans the local cluster alone (more prefill)."""
    base = _container(cfg.deployment)

    def plan(lengths: np.ndarray, mean_output: float, fixed: tuple[int, int, float | None] | None
             ) -> tuple[float, int, int, float | None]:
        dep = copy.deepcopy(base)
        if not deployment.prfaas_reachable:
            dep["prfaas"] = None
        router = dep.get("router") or {}
        n_p, n_d, t = fixed if fixed is not None else (None, None, None)
        dep["local"]["n_prefill"], dep["local"]["n_decode"] = n_p, n_d
        if "threshold_tokens" in router:
            router["threshold_tokens"] = t
        try:
            result = plan_deployment(dep, cfg.model, cfg.link, cfg.planner, lengths, np.ones_like(lengths),
                                     mean_output).to_dict()
        except InputError:  # infeasible: no throughput, and the split stays (a free search has none of its own)
            stay = fixed if fixed is not None else (len(deployment.prefill["local"]), len(deployment.decode), None)
            return (0.0, *stay)
        return result["lambda_max_rps"], result["n_prefill"], result["n_decode"], result["threshold_tokens"]

    return plan


def threshold_for_capacity(cfg: DictConfig, deployment: Deployment) -> Callable[[float], float | None]:
    """The planner's threshold for the deployment's current split at a given link capacity."""
    base = _container(cfg.deployment)
    link = _container(cfg.link)
    values, weights = input_length_distribution(cfg.workload)
    mean_out = mean_output_tokens(cfg.workload)

    def replan(capacity_gbps: float) -> float | None:
        dep = copy.deepcopy(base)
        dep["local"]["n_prefill"], dep["local"]["n_decode"] = len(deployment.prefill["local"]), len(deployment.decode)
        dep["router"]["threshold_tokens"] = None
        try:
            plan = plan_deployment(dep, cfg.model, link | {"capacity_gbps": capacity_gbps}, cfg.planner, values,
                                   weights, mean_out)
        except InputError:
            return None
        return plan.to_dict()["threshold_tokens"]

    return replan


def build(cfg: DictConfig, clock: Clock, mode: str = "sim") -> Built:
    dep = cfg.deployment
    if dep is None:  # `deployment=[]` or `~deployment`
        from harness.resources import conf_dir

        options = sorted(p.stem for p in (conf_dir() / "deployment").glob("*.yaml"))
        raise InputError(f"no deployment chosen (deployment=[] or ~deployment); valid deployment: {', '.join(options)}")
    if dep.get("builder"):  # a deployment kind with its own builder (e.g. aggregated)
        from hydra.utils import get_method

        return cast(Built, get_method(str(dep.builder))(cfg, clock, mode))
    local = dep.local
    require(local.instances >= 1, f"deployment.local.instances must be >= 1, got {local.instances}")
    # One object for the planner and the emulator: profiles at the planner's SLO, BS_max, decode step.
    inputs = shared_inputs(dep, cfg.model, cfg.planner)
    try:
        plan = make_plan(cfg, inputs)
    except InputError:
        if needs_plan(dep):
            raise
        plan = None  # a fully specified deployment runs even where the planner finds no optimum
    chosen = plan or {}  # no plan: the deployment fixes the split itself (needs_plan was False)
    n_prefill = local.n_prefill if local.n_prefill is not None else chosen["n_prefill"]
    n_decode = local.n_decode if local.n_decode is not None else chosen["n_decode"]
    require(
        n_prefill + n_decode <= local.instances,
        f"deployment.local: n_prefill + n_decode = {n_prefill + n_decode} exceeds instances = {local.instances}",
    )
    require(n_decode >= 1, "deployment.local.n_decode must be >= 1: someone has to decode")
    router = instantiate(dep.router)
    threshold = getattr(router, "threshold_tokens", None)
    if threshold is None and plan is not None:
        router.configure(plan["threshold_tokens"])
        threshold = getattr(router, "threshold_tokens", None)

    local_profile = inputs.local
    prfaas = dep.prfaas
    n_prfaas = int(prfaas.instances) if prfaas is not None else 0
    prfaas_profile = inputs.remote
    # the RDMA link's inputs are this key's: named here (the link would name its own fields)
    require(float(local.rdma_gbps) > 0, f"deployment.local.rdma_gbps must be > 0, got {local.rdma_gbps}")
    rdma = Link(clock, float(local.rdma_gbps) * local.instances, per_connection_gbps=float(local.rdma_gbps),
                name="rdma")
    deployment = Deployment(
        name=str(dep.name),
        clock=clock,
        router=router,
        local_profile=local_profile,
        n_prefill=int(n_prefill),
        n_decode=int(n_decode),
        prfaas_profile=prfaas_profile,
        n_prfaas=n_prfaas,
        cross_link=Link.from_config(clock, cfg.link) if prfaas is not None else None,
        reverse_link=Link.from_config(clock, cfg.link) if prfaas is not None else None,
        rdma_link=rdma,
        block_tokens=int(cfg.workload.get("block_tokens", 512)),
        cache_capacity_tokens=cfg.cache.capacity_tokens,
        prefix_cache=bool(cfg.cache.enabled),
        exact_state_match=bool(cfg.cache.exact_state_match),
        max_batch_tokens=dep.prefill_max_batch_tokens,
        decode_step_s=inputs.decode_step_override_s,
        mode=mode,
        handoff=Handoff.from_config(dep),
    )
    if isinstance(router, ReplanningRouter) and prfaas is not None:
        router.set_replanner(threshold_for_capacity(cfg, deployment), float(cfg.link.capacity_gbps))
    # A deployment without a cross-DC path (homogeneous PD) has nothing for these faults to hit.
    faults = _container(cfg.faults)
    schedule_faults(clock, deployment, faults["link_events"], faults["prfaas_outages"])
    reb = cfg.rebalancer
    if reb.enabled:
        rebalancer = Rebalancer(clock, deployment, replanner(cfg, deployment), period_s=reb.period_s,
                                window_s=reb.window_s, switch_delay_s=reb.switch_delay_s, min_gain=reb.min_gain,
                                min_samples=reb.min_samples)
        deployment.observers.append(rebalancer.observe)
        deployment.rebalancer = rebalancer
    return Built(deployment, plan, threshold, n_prfaas, int(n_prefill), int(n_decode))
