"""Routers' decisions as a table: request lengths and cache state -> cluster."""

from __future__ import annotations

import pytest

from harness.deploy.router.base import LOCAL, PRFAAS, ClusterSnapshot, RoutedRequest
from harness.deploy.router.homogeneous import HomogeneousRouter
from harness.deploy.router.naive import NaiveRouter
from harness.deploy.router.prfaas import PrfaasRouter
from harness.deploy.router.prfaas_dynamic import PrfaasDynamicRouter
from harness.errors import InputError

VIEW = ClusterSnapshot(has_prfaas=True, has_local_prefill=True, egress_utilisation=0.1, link_capacity_gbps=100.0,
                   prfaas_backlog_s=0.0, local_backlog_s=0.0)


@pytest.mark.parametrize(
    ("input_tokens", "cached_local", "cached_prfaas", "expected"),
    [
        (30_000, 0, 0, PRFAAS),  # long, nothing cached
        (20_000, 0, 0, LOCAL),  # exactly at t stays local (l <= t)
        (20_001, 0, 0, PRFAAS),
        (10_000, 0, 0, LOCAL),
        (60_000, 50_000, 0, LOCAL),  # long prompt but only 10K incremental after the local prefix
        (60_000, 0, 50_000, PRFAAS),  # cache_view=local: a remote prefix does not shorten the local decision
    ],
)
def test_prfaas_threshold_on_incremental_length(input_tokens, cached_local, cached_prfaas, expected):
    router = PrfaasRouter(threshold_tokens=20_000, cache_view="local")
    assert router.route(RoutedRequest(input_tokens, cached_local, cached_prfaas), VIEW) == (expected, None)


@pytest.mark.parametrize(
    ("cached_local", "cached_prfaas", "expected"),
    [
        (0, 0, (PRFAAS, None)),
        (50_000, 0, (LOCAL, None)),  # the local prefix leaves 10K: local, nothing to fetch
        (0, 50_000, (LOCAL, PRFAAS)),  # the PrfaaS prefix leaves 10K too: local, fetching that prefix first
        (0, 35_000, (PRFAAS, None)),  # 25K left after the longer prefix: PrfaaS, which holds it
        (35_000, 10_000, (PRFAAS, LOCAL)),  # PrfaaS computes, but the longer prefix is local: fetched
    ],
)
def test_prfaas_router_global_view_routes_on_the_longest_prefix_anywhere(cached_local, cached_prfaas, expected):
    """The default view (the paper's global KVCache manager): l = input - max(l_pd, l_prfaas), and a prefix
    held by the cluster that does not prefill is fetched across the link (section 3.4.3)."""
    router = PrfaasRouter(threshold_tokens=20_000)
    assert router.cache_view == "global"
    assert router.route(RoutedRequest(60_000, cached_local, cached_prfaas), VIEW) == expected


def test_prfaas_router_rejects_an_unknown_cache_view():
    with pytest.raises(InputError, match=r"router.cache_view must be one of global, local, got 'both'"):
        PrfaasRouter(cache_view="both")


def test_prfaas_router_falls_back_when_a_cluster_is_missing():
    router = PrfaasRouter(threshold_tokens=1000)
    no_remote = ClusterSnapshot(False, True, 0.0, 0.0, float("inf"), 0.0)
    no_local_prefill = ClusterSnapshot(True, False, 0.0, 100.0, 0.0, float("inf"))
    assert router.route(RoutedRequest(50_000, 0, 0), no_remote).cluster == LOCAL
    assert router.route(RoutedRequest(10, 0, 0), no_local_prefill).cluster == PRFAAS


def test_prfaas_router_takes_the_planned_threshold_only_when_unset():
    unset, fixed = PrfaasRouter(), PrfaasRouter(threshold_tokens=5000)
    unset.configure(12_345)
    fixed.configure(12_345)
    assert unset.threshold_tokens == 12_345
    assert fixed.threshold_tokens == 5000


@pytest.mark.parametrize("router", [PrfaasRouter(), PrfaasDynamicRouter()])
def test_routing_before_a_threshold_is_configured_is_a_clear_error(router):
    """A threshold left to the planner must be configured before the first request is routed."""
    with pytest.raises(RuntimeError, match=r"router\.threshold_tokens is unset"):
        router.route(RoutedRequest(30_000, 0, 0), VIEW)
    router.configure(20_000)
    assert router.route(RoutedRequest(30_000, 0, 0), VIEW).cluster == PRFAAS


def test_prfaas_router_rejects_a_negative_threshold():
    with pytest.raises(InputError, match="threshold_tokens"):
        PrfaasRouter(threshold_tokens=-1)


@pytest.mark.parametrize("tokens", [100, 19_400, 131_072])
def test_baselines_ignore_length(tokens):
    request = RoutedRequest(tokens, 0, 0)
    assert HomogeneousRouter().route(request, VIEW).cluster == LOCAL
    assert NaiveRouter().route(request, VIEW).cluster == PRFAAS
