"""A deployment's prefill instances ordered by load, and the lazy `ClusterView` routers read."""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING

from harness.deploy.prefill import PrefillInstance
from harness.deploy.router.base import LOCAL, PRFAAS

if TYPE_CHECKING:
    from harness.deploy.deployment import Deployment


class LeastLoaded:
    """The prefill instances of one cluster, ordered by when each will be free (lazy heap).

    `least_loaded` picks by `backlog_s()`, which is `free_at - now`, so the earliest `free_at` wins;
    an instance re-enters the heap each time its free_at moves, and stale entries are dropped when
    they surface. O(log n) per request instead of a scan: deployments of 10,000 GPUs stay fast.
    """

    def __init__(self, instances: list[PrefillInstance]) -> None:
        self.instances = instances
        self._heap: list[tuple[float, int, int, PrefillInstance]] = []
        self._seq = itertools.count()
        for instance in instances:
            self.push(instance)

    def push(self, instance: PrefillInstance) -> None:
        heap = self._heap
        heapq.heappush(heap, (instance.free_at, next(self._seq), instance.version, instance))
        if len(heap) > 8 * len(self.instances) + 64:
            self._heap = [(i.free_at, next(self._seq), i.version, i) for i in self.instances]
            heapq.heapify(self._heap)

    def least_loaded(self) -> PrefillInstance | None:
        heap, active = self._heap, self.instances
        while heap:
            _, _, version, instance = heap[0]
            if version == instance.version and instance in active:
                return instance
            heapq.heappop(heap)
        for instance in active:  # everything was stale (instances added since): rebuild
            self.push(instance)
        return heap[0][3] if heap else None


class DeploymentView:
    """The `ClusterView` (harness/deploy/router/base.py) of a running deployment, each field computed
    only if the router reads it (the link backlog walks every flow in flight)."""

    __slots__ = ("_d",)

    def __init__(self, deployment: Deployment) -> None:
        self._d = deployment

    @property
    def has_prfaas(self) -> bool:
        return bool(self._d.prefill[PRFAAS]) and self._d.prfaas_reachable

    @property
    def has_local_prefill(self) -> bool:
        return bool(self._d.prefill[LOCAL])

    @property
    def link_capacity_gbps(self) -> float:
        link = self._d.cross_link
        return link.capacity_gbps if link is not None else 0.0

    @property
    def egress_utilisation(self) -> float:
        link = self._d.cross_link
        capacity = self.link_capacity_gbps
        return link.rate_gbps / capacity if link is not None and capacity > 0 else 1.0

    @property
    def link_backlog_s(self) -> float:
        link = self._d.cross_link
        return link.backlog_s() if link is not None else 0.0

    @property
    def now_s(self) -> float:
        return self._d.clock.now()

    def _backlog(self, cluster: str) -> float:
        instance = self._d.least_loaded[cluster].least_loaded()
        return instance.backlog_s() if instance is not None else float("inf")

    @property
    def prfaas_backlog_s(self) -> float:
        return self._backlog(PRFAAS)

    @property
    def local_backlog_s(self) -> float:
        return self._backlog(LOCAL)
