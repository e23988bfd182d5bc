"""What a router sees and what it answers.

A router gets the request's lengths and cache state, and a read-only snapshot of the deployment
(`ClusterView`); it answers a `Route`: the cluster that prefills it ("local" or "prfaas") and,
optionally, the cluster whose cached prefix should be fetched across the link first. Choosing
the instance inside a cluster (cache-affine or least loaded) is the deployment's job.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

LOCAL = "local"
PRFAAS = "prfaas"


class RoutedRequest(NamedTuple):
    """Immutable (a tuple: made once per request, cheaper than a frozen dataclass)."""

    input_tokens: int
    cached_local_tokens: int  # prefix already cached in the local PD cluster (l_pd)
    cached_prfaas_tokens: int  # prefix already cached in the PrfaaS cluster (l_prfaas)


class ClusterView(Protocol):
    """What a router may read of the deployment at the moment it routes (read-only). A running
    deployment hands a lazy view (harness/deploy/view.py) that computes a field only if it is read;
    tests and tools can hand a `ClusterSnapshot`."""

    @property
    def has_prfaas(self) -> bool: ...
    @property
    def has_local_prefill(self) -> bool: ...
    @property
    def egress_utilisation(self) -> float: ...  # current cross-DC rate / capacity, 0..1
    @property
    def link_capacity_gbps(self) -> float: ...
    @property
    def prfaas_backlog_s(self) -> float: ...  # least-loaded PrfaaS instance's queued work
    @property
    def local_backlog_s(self) -> float: ...  # least-loaded local prefill instance's queued work
    @property
    def now_s(self) -> float: ...
    @property
    def link_backlog_s(self) -> float: ...  # KV bytes waiting on the cross-DC link / its capacity


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """A `ClusterView` with fixed values."""

    has_prfaas: bool
    has_local_prefill: bool
    egress_utilisation: float
    link_capacity_gbps: float
    prfaas_backlog_s: float
    local_backlog_s: float
    now_s: float = 0.0
    link_backlog_s: float = 0.0


class Route(NamedTuple):
    cluster: str
    fetch_prefix_from: str | None = None  # cross-cluster cache transfer before the prefill


# The two answers without a fetch, made once (a Route is immutable): routers return these.
ROUTE_LOCAL = Route(LOCAL)
ROUTE_PRFAAS = Route(PRFAAS)


class Router(Protocol):
    def route(self, request: RoutedRequest, view: ClusterView) -> Route: ...

    def configure(self, threshold_tokens: float | None) -> None: ...


# What a router can do beyond routing, declared by the router classes that can (they subclass these),
# and asked for with isinstance by whoever needs it.
class ThresholdRouter(ABC):
    """Routes on an incremental-length threshold that the long-term rebalancer may re-optimise."""

    @abstractmethod
    def set_threshold(self, threshold_tokens: float) -> None: ...


class ReplanningRouter(ABC):
    """Re-solves its threshold through the planner when the link's capacity changes."""

    @abstractmethod
    def set_replanner(self, replan: Callable[[float], float | None], planned_gbps: float) -> None: ...
