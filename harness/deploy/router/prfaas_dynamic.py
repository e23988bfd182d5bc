"""PrfaaS-PD with the paper's short-term rules (section 3.4.3): bandwidth- and cache-aware routing.

The router watches the cross-DC link: a smoothed egress utilisation (EWMA with time constant
`smoothing_s`) and the KV bytes already waiting on the link (`link_backlog_s`, seconds of work at
the current capacity — the early sign of congestion before loss shows).
- Bandwidth scarce (utilisation >= `scarce_utilisation`): each cluster's cache is judged on its
  own; `l_total - l_pd <= t` stays local, otherwise PrfaaS (which reuses its own cache).
- Bandwidth abundant: `l_prefix = max(l_prfaas, l_pd)`; route on `l_total - l_prefix`, and when
  the cluster holding the longer prefix is not the one computing, fetch that prefix across the
  link first (`cache_transfer`).
- Congested (utilisation >= `congested_utilisation` or backlog > `max_link_backlog_s`): no new
  offloads; long prefills stay local until the link recovers.
`cache_aware=false` is the cache-blind baseline: it routes on the whole prompt length.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from harness.deploy.router.base import LOCAL, PRFAAS, ClusterView, Route, RoutedRequest
from harness.deploy.router.prfaas import PrfaasRouter
from harness.errors import require


@dataclass
class PrfaasDynamicRouter(PrfaasRouter):
    cache_aware: bool = True
    bandwidth_aware: bool = True
    cache_transfer: bool = True
    scarce_utilisation: float = 0.5
    congested_utilisation: float = 0.9
    max_link_backlog_s: float = 1.0
    smoothing_s: float = 2.0
    _util: float = field(default=0.0, init=False, repr=False)
    _last_s: float = field(default=-math.inf, init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("scarce_utilisation", "congested_utilisation"):
            value = getattr(self, name)
            require(0 < value <= 1.5, f"router.{name} must be in (0, 1.5], got {value}")
        require(self.smoothing_s >= 0, f"router.smoothing_s must be >= 0, got {self.smoothing_s}")
        require(self.max_link_backlog_s > 0, f"router.max_link_backlog_s must be > 0, got {self.max_link_backlog_s}")

    def utilisation(self, view: ClusterView) -> float:
        """EWMA of the egress utilisation samples seen at routing times."""
        dt = view.now_s - self._last_s
        weight = 1.0 if self.smoothing_s == 0 or not math.isfinite(dt) else 1.0 - math.exp(-dt / self.smoothing_s)
        self._util += (view.egress_utilisation - self._util) * weight
        self._last_s = view.now_s
        return self._util

    def route(self, request: RoutedRequest, view: ClusterView) -> Route:
        if not view.has_prfaas:
            return Route(LOCAL)
        if not view.has_local_prefill:
            return Route(PRFAAS)
        util = self.utilisation(view)
        scarce = self.bandwidth_aware and util >= self.scarce_utilisation
        congested = self.bandwidth_aware and (util >= self.congested_utilisation
                                              or view.link_backlog_s > self.max_link_backlog_s)
        l_pd, l_prfaas = request.cached_local_tokens, request.cached_prfaas_tokens
        if not self.cache_aware:
            incremental = request.input_tokens
        elif scarce:
            incremental = request.input_tokens - l_pd
        else:
            incremental = request.input_tokens - max(l_pd, l_prfaas)
        target = PRFAAS if incremental > self.threshold_tokens else LOCAL
        if congested and target == PRFAAS:
            target = LOCAL
        fetch = None
        if self.cache_aware and self.cache_transfer and not scarce and not congested and l_pd != l_prfaas:
            holder = PRFAAS if l_prfaas > l_pd else LOCAL
            if holder != target:
                fetch = holder
        return Route(target, fetch)
