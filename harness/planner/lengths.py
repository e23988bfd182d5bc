"""The uncached-length law the planner plans on, from the prefix-cache settings the emulator runs with.

The planner's L is what a prefill computes after the prefix caches remove their hits (paper Table 4),
so every cache input the emulator reads must reach it: `cache.enabled` (off: whole prompts),
`cache.capacity_tokens` (an LRU), `cache.exact_state_match` on a hybrid model (a prefix is usable only
where a linear state was stored), the workload's `block_tokens`, and which pools the router matches
against (`router.cache_view`). The workload replays its requests through one cache that stands for
the pools the router sees; what that one cache cannot say is returned as notes, which go to
`plan_notes` (plan.json, summary.json) and are printed as warnings by a run.

`global` (the default, the paper's global KVCache manager, §3.2 and §3.4.3): the router matches a
prompt against both clusters' pools and routes on `l_total - max(l_pd, l_prfaas)`, fetching the
longer prefix across clusters when it is not where the prefill runs; both pools together hold every
prefix, which is what one cache replaying every request holds. `local`: the router matches the local
pool only; a prefix computed at PrfaaS is invisible to it, so the PrfaaS share depends on t itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.config.deployment import CACHE_VIEWS, CacheConfig, DeploymentConfig
from harness.errors import InputError, choices
from harness.planner.configs import deployment_config, typed
from harness.planner.inputs import SharedInputs
from harness.planner.result import Plan
from harness.workload import PrefixReplay, Request, instantiate_workload
from harness.workload.prefix import ReplayPool


@dataclass(frozen=True)
class PlannedLengths:
    """The planner's (values, weights) of L, the replay that produced them, and what it does not model."""

    values: np.ndarray
    weights: np.ndarray
    replay: PrefixReplay
    notes: tuple[str, ...] = ()
    local_view: Callable[[float], float] | None = None  # t -> share offloaded by a router seeing the local pool

    def notes_for(self, plan: Plan) -> list[str]:
        """Notes that need the chosen threshold: the offload of the local view there, replayed."""
        t = plan.threshold_tokens
        if self.local_view is None or t is None:
            return []
        return [f"deployment.router's local cache view: replayed at the planned t={t:,.0f} through the local "
                f"pool, the router offloads {self.local_view(t):.3f} of requests (planned: "
                f"{plan.offload_fraction:.3f})"]


def cache_view(dep: DeploymentConfig) -> str | None:
    """`router.cache_view` checked (default `global`), or None for a router that reads no prefix cache."""
    router = dep.router
    if not isinstance(router, Mapping) or "cache_view" not in router:
        return None
    view = router.get("cache_view")
    if view not in CACHE_VIEWS:
        raise InputError(f"deployment.router.cache_view must be one of {choices(CACHE_VIEWS)}, got {view!r}")
    return str(view)


def _router_flag(dep: DeploymentConfig, key: str, default: bool = True) -> bool:
    router = dep.router
    return bool(router.get(key, default)) if isinstance(router, Mapping) else default


def planned_lengths(workload_cfg: Any, cache_cfg: Any, deployment_cfg: Any, inputs: SharedInputs) -> PlannedLengths:
    """L for this deployment: the workload replayed through the cache the emulator's router sees.

    A cache-blind router (`router.cache_aware: false`) routes on whole prompts: the planner plans on
    them too, as its operator would. Notes are made only where the workload has prefix hits to lose."""
    dep = deployment_config(deployment_cfg)
    cache = typed(CacheConfig, cache_cfg if cache_cfg is not None else CacheConfig(), "cache")
    view = cache_view(dep)
    if view is not None and not _router_flag(dep, "cache_transfer"):  # prfaas_dynamic without fetches
        view = "local"
    workload = instantiate_workload(workload_cfg)
    block = int(getattr(workload, "block_tokens", 512))
    two_pools = dep.prfaas is not None
    enabled = cache.enabled and _router_flag(dep, "cache_aware")
    capacity_blocks = None
    if enabled and cache.capacity_tokens is not None:
        pools = 2 if two_pools and view != "local" else 1
        capacity_blocks = pools * (int(cache.capacity_tokens) // block)
        enabled = capacity_blocks >= 1  # a pool smaller than one block holds nothing
    state_match = bool(cache.exact_state_match) and inputs.local.state_bytes > 0
    replay = PrefixReplay(enabled=enabled, capacity_blocks=capacity_blocks, state_match=state_match)
    values, weights = workload.uncached_input_distribution(replay)
    notes: list[str] = []
    local_view = None
    if enabled and _has_hits(workload, values, weights):
        if capacity_blocks is not None:
            notes.append(f"cache.capacity_tokens={cache.capacity_tokens}: planned as one LRU of {capacity_blocks} "
                         f"blocks of {block} tokens" + (" (both clusters' pools)" if pools == 2 else "")
                         + "; the emulator's pools also hold linear states and in-flight transfer blocks "
                         "(not modelled)")
        if two_pools and view == "local":
            why = "cache_view=local" if cache_view(dep) == "local" else "cache_transfer=false"
            notes.append(f"deployment.router.{why}: the router matches the local pool only{_LOCAL_WHY}")
            requests = getattr(workload, "planner_sample", workload.generate)()  # bounded (agentic: a sample)

            def local_view(t: float) -> float:
                return local_view_offload(requests, block, replay, t)
        elif two_pools and view == "global" and _router_flag(dep, "bandwidth_aware", default=False):
            notes.append("deployment.router.bandwidth_aware=true: while the link is scarce the router matches the "
                         f"local pool only{_LOCAL_WHY}")
    return PlannedLengths(np.asarray(values, dtype=float), np.asarray(weights, dtype=float), replay, tuple(notes),
                          local_view)


_LOCAL_WHY = ("; a prefix computed at PrfaaS then counts as uncached and its later turns tend to be offloaded "
              "again; the planner's lengths are after a match against every pool (not modelled: expect a larger "
              "offload fraction than planned)")


def local_view_offload(requests: Sequence[Request], block_tokens: int, replay: PrefixReplay,
                       threshold_tokens: float) -> float:
    """Share of requests a `cache_view=local` PrfaaS router offloads at `threshold_tokens`: the requests
    replayed in order, routed on `input - l_pd`, the local pool holding only what the local cluster prefilled."""
    local = ReplayPool(replay, block_tokens)
    offloaded = 0
    for r in requests:
        if r.input_tokens - local.usable(r) > threshold_tokens:
            offloaded += 1
        else:
            local.insert(r)
    return offloaded / max(len(requests), 1)


def _has_hits(workload: Any, values: np.ndarray, weights: np.ndarray) -> bool:
    """Whether the replay removed any prefix: the law of whole prompts differs from the replayed one."""
    whole_values, whole_weights = workload.uncached_input_distribution(PrefixReplay(enabled=False))
    return not (np.array_equal(values, whole_values) and np.array_equal(weights, whole_weights))
