"""The dynamic PrfaaS router's short-term rules as a table, and its threshold following the link."""

from __future__ import annotations

import pytest

from harness.deploy.router.base import LOCAL, PRFAAS, ClusterSnapshot, RoutedRequest
from harness.deploy.router.prfaas_dynamic import PrfaasDynamicRouter


def _view(util=0.1, backlog_s=0.0, capacity=100.0, now=0.0):
    return ClusterSnapshot(has_prfaas=True, has_local_prefill=True, egress_utilisation=util,
                       link_capacity_gbps=capacity, prfaas_backlog_s=0.0, local_backlog_s=0.0, now_s=now,
                       link_backlog_s=backlog_s)


@pytest.mark.parametrize(
    ("total", "l_pd", "l_prfaas", "util", "expected"),
    [
        # abundant: the longer prefix counts, and it is fetched when the other cluster holds it
        (30_000, 0, 25_000, 0.1, (LOCAL, PRFAAS)),  # 5K left after the remote prefix -> local, fetch it
        (30_000, 25_000, 0, 0.1, (LOCAL, None)),  # local already holds it
        (60_000, 10_000, 0, 0.1, (PRFAAS, LOCAL)),  # 50K left -> PrfaaS, fetch the local 10K prefix there
        (30_000, 0, 0, 0.1, (PRFAAS, None)),
        # scarce: each cluster judged on its own, nothing moves across
        (30_000, 0, 25_000, 0.8, (PRFAAS, None)),  # 30K left vs the local cache -> PrfaaS reuses its own
        (30_000, 25_000, 0, 0.8, (LOCAL, None)),
    ],
)
def test_scarce_and_abundant_rules(total, l_pd, l_prfaas, util, expected):
    router = PrfaasDynamicRouter(threshold_tokens=20_000, smoothing_s=0.0)
    route = router.route(RoutedRequest(total, l_pd, l_prfaas), _view(util=util))
    assert (route.cluster, route.fetch_prefix_from) == expected


def test_link_backlog_alone_makes_bandwidth_scarce():
    router = PrfaasDynamicRouter(threshold_tokens=20_000, smoothing_s=0.0, max_link_backlog_s=1.0)
    route = router.route(RoutedRequest(30_000, 0, 25_000), _view(util=0.1, backlog_s=2.0))
    assert (route.cluster, route.fetch_prefix_from) == (PRFAAS, None)


def test_cache_blind_routes_on_the_whole_prompt():
    router = PrfaasDynamicRouter(threshold_tokens=20_000, cache_aware=False)
    assert router.route(RoutedRequest(30_000, 25_000, 25_000), _view()).cluster == PRFAAS


def test_utilisation_is_smoothed_over_time():
    """EWMA with a 2 s time constant: one sample of 1.0 after 0 does not make the link scarce at once."""
    router = PrfaasDynamicRouter(threshold_tokens=20_000, smoothing_s=2.0)
    router.utilisation(_view(util=0.0, now=0.0))
    assert router.utilisation(_view(util=1.0, now=0.2)) == pytest.approx(1 - 2.718281828 ** -0.1, rel=1e-6)
    assert router.utilisation(_view(util=1.0, now=20.0)) > 0.99


def test_threshold_follows_the_link_capacity():
    seen = []

    def replan(capacity):
        seen.append(capacity)
        return 10_000 + 100_000 / capacity

    router = PrfaasDynamicRouter(threshold_tokens=11_000)
    router.set_replanner(replan, planned_gbps=100.0)
    router.route(RoutedRequest(10, 0, 0), _view(capacity=95.0))  # within 10%: no re-solve
    assert seen == [] and router.threshold_tokens == 11_000
    router.route(RoutedRequest(10, 0, 0), _view(capacity=10.0))
    assert seen == [10.0] and router.threshold_tokens == pytest.approx(20_000)
    router.route(RoutedRequest(10, 0, 0), _view(capacity=0.0))  # link down: nothing is offloaded
    assert router.route(RoutedRequest(10**6, 0, 0), _view(capacity=0.0)).cluster == LOCAL
