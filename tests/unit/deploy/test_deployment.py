"""A whole emulated deployment on fake profiles: timelines by hand, and queueing theory."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.clock import VirtualClock
from harness.deploy.deployment import Deployment
from harness.deploy.link import Link
from harness.deploy.router.homogeneous import HomogeneousRouter
from harness.deploy.router.naive import NaiveRouter
from harness.deploy.router.prfaas import PrfaasRouter
from harness.workload.request import Request


def _request(rid, tokens, out=5, t=0.0, hash_ids=()):
    return Request(request_id=rid, arrival_s=t, input_tokens=tokens, output_tokens=out, hash_ids=tuple(hash_ids))


def _deployment(clock, profile, router, *, n_prefill=1, n_decode=1, n_prfaas=0, cross_gbps=None, **kw):
    cross = Link(clock, cross_gbps) if cross_gbps is not None else None
    return Deployment(name="test", clock=clock, router=router, local_profile=profile, n_prefill=n_prefill,
                      n_decode=n_decode, prfaas_profile=profile, n_prfaas=n_prfaas, cross_link=cross,
                      rdma_link=Link(clock, 800.0), **kw)


def _run(clock, dep, requests):
    for r in requests:
        clock.call_at(r.arrival_s, lambda r=r: dep.submit(r))
    clock.run()
    dep.close()
    return {rec["request_id"]: rec for rec in dep.records}


def test_local_path_ttft_is_prefill_when_rdma_keeps_up(fake_profile):
    """1000 tokens at 1 ms/token; 1 MB of KV over 800 Gbps streams during the prefill."""
    clock = VirtualClock()
    dep = _deployment(clock, fake_profile(per_token_s=0.001, step_s=0.1), HomogeneousRouter())
    rec = _run(clock, dep, [_request(1, 1000, out=5)])[1]
    assert rec["route"] == "local"
    assert rec["ttft_s"] == pytest.approx(1.0)
    assert rec["e2e_s"] == pytest.approx(1.4)
    assert rec["tpot_s"] == pytest.approx(0.1)
    assert rec["kv_bytes_sent"] == pytest.approx(1_000_000)
    assert rec["error"] is None


def test_remote_path_waits_for_the_slow_link(fake_profile):
    """4 MB of KV over 8 Mbit/s (1 MB/s): the transfer, not the 1 s prefill, sets TTFT at 4 s."""
    clock = VirtualClock()
    profile = fake_profile(per_token_s=0.001, kv_per_token=4000.0)
    dep = _deployment(clock, profile, NaiveRouter(), n_prefill=0, n_prfaas=1, cross_gbps=0.008)
    rec = _run(clock, dep, [_request(1, 1000, out=2)])[1]
    assert rec["route"] == "prfaas"
    assert rec["prefill_end_s"] == pytest.approx(1.0)
    assert rec["ttft_s"] == pytest.approx(4.0)


def test_shared_link_stretches_transfers(fake_profile):
    """Two simultaneous remote prefills share the link: each transfer takes twice as long."""
    clock = VirtualClock()
    profile = fake_profile(per_token_s=0.0001, kv_per_token=4000.0, bs_max=8)
    alone = _run(clock, _deployment(clock, profile, NaiveRouter(), n_prefill=0, n_prfaas=2, cross_gbps=0.008),
                 [_request(1, 1000)])
    clock2 = VirtualClock()
    both = _run(clock2, _deployment(clock2, profile, NaiveRouter(), n_prefill=0, n_prfaas=2, cross_gbps=0.008),
                [_request(1, 1000), _request(2, 1000)])
    assert alone[1]["kv_ready_s"] == pytest.approx(4.0)
    assert both[1]["kv_ready_s"] == pytest.approx(8.0) and both[2]["kv_ready_s"] == pytest.approx(8.0)


def test_threshold_router_splits_by_length(fake_profile):
    clock = VirtualClock()
    dep = _deployment(clock, fake_profile(bs_max=8), PrfaasRouter(threshold_tokens=500), n_prfaas=1,
                      cross_gbps=100.0)
    recs = _run(clock, dep, [_request(1, 400), _request(2, 600)])
    assert recs[1]["route"] == "local" and recs[2]["route"] == "prfaas"


def test_prefix_cache_discounts_the_shared_prefix(fake_profile):
    """The second request repeats the first's two full 512-token blocks: only its tail is computed."""
    clock = VirtualClock()
    dep = _deployment(clock, fake_profile(per_token_s=0.001), HomogeneousRouter())
    first = _request(1, 1024, out=2, hash_ids=(10, 11))
    second = _request(2, 1500, out=2, t=5.0, hash_ids=(10, 11, 12))
    recs = _run(clock, dep, [first, second])
    assert recs[2]["cached_tokens"] == 1024
    assert recs[2]["prefill_end_s"] - recs[2]["prefill_start_s"] == pytest.approx(0.476)


def test_every_request_ends_in_exactly_one_record(fake_profile):
    """Too-large KV fails at once; unfinished requests are recorded by close()."""
    clock = VirtualClock()
    dep = _deployment(clock, fake_profile(kv_capacity_bytes=2_000_000.0), HomogeneousRouter())
    requests = [_request(1, 100), _request(2, 5000), _request(3, 100, out=1000)]
    for r in requests:
        clock.call_at(r.arrival_s, lambda r=r: dep.submit(r))
    clock.run(until=2.0)
    dep.close()
    by_id = {rec["request_id"]: rec for rec in dep.records}
    assert sorted(by_id) == [1, 2, 3] and len(dep.records) == 3
    assert by_id[1]["error"] is None
    assert "memory" in by_id[2]["error"]
    assert "run ended" in by_id[3]["error"]
    assert math.isnan(by_id[3]["e2e_s"])


def test_single_prefill_server_matches_md1_waiting_time(fake_profile):
    """Poisson arrivals, deterministic 1 s prefills: mean wait rho*S / (2(1-rho)) (Pollaczek-Khinchine)."""
    rho, n = 0.7, 20_000
    rng = np.random.default_rng(1)
    arrivals = np.cumsum(rng.exponential(1 / rho, n))
    clock = VirtualClock()
    dep = _deployment(clock, fake_profile(per_token_s=0.001, bs_max=10_000), HomogeneousRouter())
    recs = _run(clock, dep, [_request(i, 1000, out=1, t=float(t)) for i, t in enumerate(arrivals)])
    waits = np.array([r["prefill_start_s"] - r["arrival_s"] for r in recs.values()])
    expected = rho * 1.0 / (2 * (1 - rho))
    assert waits.mean() == pytest.approx(expected, rel=0.08)


def test_least_loaded_heap_agrees_with_a_scan(fake_profile):
    """Random arrivals over 6 prefill instances: the heap's pick always has the least backlog."""
    from harness.deploy.job import Job
    from harness.deploy.prefill import PrefillInstance
    from harness.deploy.view import LeastLoaded

    clock = VirtualClock()
    profile = fake_profile(per_token_s=0.001)
    instances = [PrefillInstance(f"p{i}", clock, profile, lambda j, d: None, lambda j: None) for i in range(6)]
    heap = LeastLoaded(instances)
    for instance in instances:
        instance.on_change = heap.push
    rng = np.random.default_rng(3)
    checks = []

    def arrive(k):
        chosen = heap.least_loaded()
        checks.append(chosen.backlog_s() - min(i.backlog_s() for i in instances))
        chosen.submit(Job(_request(k, int(rng.integers(100, 3000)))))

    for k, t in enumerate(np.cumsum(rng.exponential(0.3, 400))):
        clock.call_at(float(t), lambda k=k: arrive(k))
    clock.run()
    assert len(checks) == 400 and max(checks) <= 1e-9
