"""PrfaaS-PD with the paper's short-term rules (section 3.4.3): bandwidth- and cache-aware routing.

The router watches the cross-DC link: a smoothed egress utilisation (EWMA with time constant
`smoothing_s`), the KV bytes already waiting on the link (`link_backlog_s`, seconds of work at
the current capacity — the early sign of congestion before loss shows) and its capacity.
- Bandwidth scarce (utilisation >= `scarce_utilisation`, or backlog > `max_link_backlog_s`): each
  cluster's cache is judged on its own; `l_total - l_pd <= t` stays local, otherwise PrfaaS
  (which reuses its own cache); no prefix is moved across clusters.
- Bandwidth abundant: `l_prefix = max(l_prfaas, l_pd)`; route on `l_total - l_prefix`, and when
  the cluster holding the longer prefix is not the one computing, fetch that prefix across the
  link first. With `cache_transfer=false` there is no such fetch, so the scarce rule applies; so it
  does with `cache_view=local` (the router sees the local pool only).
- Link capacity changes (a drop, a restored link): the threshold is re-solved through the planner
  for the capacity now seen (`adapt_threshold`), with the current split. A thinner link pushes t
  up, so PrfaaS takes only the longest prefills, whose KV per second of compute is lowest.
`cache_aware=false` is the cache-blind baseline: it routes on the whole prompt length.

Implementation notes: per-connection TCP ceilings (loss, RTT) are deliberately not treated as
lost capacity: they stretch each transfer, but with layer-wise pipelining more transfers overlap
and the aggregate still fills the link; re-planning on them pushed long prefills onto the local
cluster and was far worse. Forcing long prefills local whenever the link congests was tried and made
things worse: one 100K-token prefill holds an H20 prefill instance for ~20 s, so the local queue
blows up before the link recovers. Moving t with the capacity keeps both sides inside their
bounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from harness.deploy.router.base import LOCAL, PRFAAS, ClusterView, ReplanningRouter, Route, RoutedRequest
from harness.deploy.router.prfaas import UNSET, PrfaasRouter
from harness.errors import require


@dataclass
class PrfaasDynamicRouter(PrfaasRouter, ReplanningRouter):
    cache_aware: bool = True
    bandwidth_aware: bool = True
    cache_transfer: bool = True
    scarce_utilisation: float = 0.5
    max_link_backlog_s: float = 1.0
    smoothing_s: float = 2.0
    adapt_threshold: bool = True
    capacity_change: float = 0.1  # relative capacity change that triggers a re-solve of t
    _util: float = field(default=0.0, init=False, repr=False)
    _replan: Callable[[float], float | None] | None = field(default=None, init=False, repr=False)
    _planned_gbps: float | None = field(default=None, init=False, repr=False)
    _last_s: float = field(default=-math.inf, init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("scarce_utilisation",):
            value = getattr(self, name)
            require(0 < value <= 1.5, f"router.{name} must be in (0, 1.5], got {value}")
        require(self.smoothing_s >= 0, f"router.smoothing_s must be >= 0, got {self.smoothing_s}")
        require(self.max_link_backlog_s > 0, f"router.max_link_backlog_s must be > 0, got {self.max_link_backlog_s}")

    def set_replanner(self, replan: Callable[[float], float | None], planned_gbps: float) -> None:
        """`replan(capacity_gbps) -> t`: the planner's threshold for the current split at that capacity."""
        self._replan, self._planned_gbps = replan, planned_gbps

    def _follow_capacity(self, view: ClusterView) -> None:
        if not self.adapt_threshold or self._replan is None or self._planned_gbps is None:
            return
        capacity = view.link_capacity_gbps
        if abs(capacity - self._planned_gbps) <= self.capacity_change * max(self._planned_gbps, 1e-9):
            return
        self._planned_gbps = capacity
        threshold = self._replan(capacity) if capacity > 0 else math.inf
        if threshold is not None:
            self.threshold_tokens = threshold

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
        self._follow_capacity(view)
        util = self.utilisation(view)
        scarce = self.bandwidth_aware and (util >= self.scarce_utilisation
                                           or view.link_backlog_s > self.max_link_backlog_s)
        l_pd, l_prfaas = request.cached_local_tokens, request.cached_prfaas_tokens
        if not self.cache_aware:
            incremental = request.input_tokens
        elif scarce or not self.cache_transfer or self.cache_view == LOCAL:
            # Each cluster's cache on its own: the local one decides, PrfaaS reuses what it holds.
            incremental = request.input_tokens - l_pd
        else:
            incremental = request.input_tokens - max(l_pd, l_prfaas)
        threshold = self.threshold_tokens
        if threshold is None:
            raise RuntimeError(UNSET)
        target = PRFAAS if incremental > threshold else LOCAL
        fetch = None
        if self.cache_aware and self.cache_transfer and self.cache_view != LOCAL and not scarce and l_pd != l_prfaas:
            holder = PRFAAS if l_prfaas > l_pd else LOCAL
            if holder != target:
                fetch = holder
        return Route(target, fetch)
