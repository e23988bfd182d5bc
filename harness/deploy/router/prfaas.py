"""PrfaaS-PD threshold routing (paper section 3.3): offload when the incremental prefill is long.

The incremental length is what is left to compute after the local PD cluster's cached prefix:
`l = input_tokens - l_pd`. If `l > t` the request is prefilled remotely and its KV crosses the
link; otherwise it stays in the local PD cluster. `threshold_tokens=None` lets the planner
choose t for the workload, model and link (`configure`).
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.deploy.router.base import ROUTE_LOCAL, ROUTE_PRFAAS, ClusterView, Route, RoutedRequest, ThresholdRouter
from harness.errors import require

UNSET = "router.threshold_tokens is unset: the deployment builder configures it from the plan before routing"


@dataclass
class PrfaasRouter(ThresholdRouter):
    threshold_tokens: float | None = None

    def __post_init__(self) -> None:
        if self.threshold_tokens is not None:
            require(self.threshold_tokens >= 0, f"router.threshold_tokens must be >= 0, got {self.threshold_tokens}")

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
        incremental = request.input_tokens - request.cached_local_tokens
        return ROUTE_PRFAAS if incremental > threshold else ROUTE_LOCAL
