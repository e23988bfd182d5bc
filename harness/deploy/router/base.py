"""What a router sees and what it answers.

A router gets the request's lengths and cache state, and a read-only snapshot of the deployment
(`ClusterView`); it answers a `Route`: the cluster that prefills it ("local" or "prfaas") and,
optionally, the cluster whose cached prefix should be fetched across the link first. Choosing
the instance inside a cluster (cache-affine or least loaded) is the deployment's job.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Protocol

LOCAL = "local"
PRFAAS = "prfaas"


@dataclass(frozen=True, slots=True)
class RoutedRequest:
    input_tokens: int
    cached_local_tokens: int  # prefix already cached in the local PD cluster (l_pd)
    cached_prfaas_tokens: int  # prefix already cached in the PrfaaS cluster (l_prfaas)


@dataclass(frozen=True, slots=True)
class ClusterView:
    has_prfaas: bool
    has_local_prefill: bool
    egress_utilisation: float  # current cross-DC rate / capacity, 0..1
    link_capacity_gbps: float
    prfaas_backlog_s: float  # least-loaded PrfaaS instance's queued work
    local_backlog_s: float  # least-loaded local prefill instance's queued work
    now_s: float = 0.0
    link_backlog_s: float = 0.0  # KV bytes waiting on the cross-DC link / its capacity


class Route(NamedTuple):
    cluster: str
    fetch_prefix_from: str | None = None  # cross-cluster cache transfer before the prefill


class Router(Protocol):
    def route(self, request: RoutedRequest, view: ClusterView) -> Route: ...

    def configure(self, threshold_tokens: float | None) -> None: ...
