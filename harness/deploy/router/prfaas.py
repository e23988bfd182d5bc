"""PrfaaS-PD threshold routing (paper section 3.3): offload when the incremental prefill is long.

The incremental length is what is left to compute after the cached prefix the router can see
(`cache_view`): with `global` (the default: the paper's global KVCache manager matches the prompt in
every cluster's pool, §3.2) `l = input_tokens - max(l_pd, l_prfaas)`, and when the longer prefix is
held by the cluster that does not prefill, it is fetched across the link first (§3.4.3's rule); with
`local`, `l = input_tokens - l_pd`, and a prefix cached only at PrfaaS is invisible. If `l > t` the
request is prefilled remotely and its KV crosses the link; otherwise it stays in the local PD
cluster. `threshold_tokens=None` lets the planner choose t for the workload, model and link
(`configure`); the planner reads the same `cache_view` (harness/planner/lengths.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.config.deployment import CACHE_VIEWS
from harness.deploy.router.base import (
    LOCAL,
    PRFAAS,
    ROUTE_LOCAL,
    ROUTE_PRFAAS,
    ClusterView,
    Route,
    RoutedRequest,
    ThresholdRouter,
)
from harness.errors import require

UNSET = "router.threshold_tokens is unset: the deployment builder configures it from the plan before routing"


@dataclass
class PrfaasRouter(ThresholdRouter):
    threshold_tokens: float | None = None
    cache_view: str = "global"  # global: both clusters' pools | local: the local PD cluster's only

    def __post_init__(self) -> None:
        if self.threshold_tokens is not None:
            require(self.threshold_tokens >= 0, f"router.threshold_tokens must be >= 0, got {self.threshold_tokens}")
        require(self.cache_view in CACHE_VIEWS,
                f"router.cache_view must be one of {', '.join(CACHE_VIEWS)}, got {self.cache_view!r}")

    def configure(self, threshold_tokens: float | None) -> None:
        if self.threshold_tokens is None:
            self.threshold_tokens = threshold_tokens

    def set_threshold(self, threshold_tokens: float) -> None:
        """The long-term rebalancer re-optimises t as traffic shifts."""
        self.threshold_tokens = threshold_tokens

    def route(self, request: RoutedRequest, view: ClusterView) -> Route:
        if not view.has_prfaas:
            return ROUTE_LOCAL
        if not view.has_local_prefill:
            return ROUTE_PRFAAS
        threshold = self.threshold_tokens
        if threshold is None:
            raise RuntimeError(UNSET)
        l_pd = request.cached_local_tokens
        if self.cache_view == "local":
            return ROUTE_PRFAAS if request.input_tokens - l_pd > threshold else ROUTE_LOCAL
        l_prfaas = request.cached_prfaas_tokens
        target = PRFAAS if request.input_tokens - max(l_pd, l_prfaas) > threshold else LOCAL
        if l_pd == l_prfaas or (l_prfaas > l_pd) == (target == PRFAAS):
            return ROUTE_PRFAAS if target == PRFAAS else ROUTE_LOCAL
        return Route(target, PRFAAS if l_prfaas > l_pd else LOCAL)  # the longer prefix is elsewhere: fetch it
