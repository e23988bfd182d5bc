"""The landing buffer: KV waiting for a decode slot occupies the decode side's free KV memory; when it
is full the KV stays on its prefill instance, which starts nothing new until it lands (push-back)."""

from __future__ import annotations

import pytest

from harness.clock import VirtualClock
from harness.deploy.deployment import Deployment
from harness.deploy.link import Link
from harness.deploy.router.homogeneous import HomogeneousRouter
from harness.workload.request import Request


def _run(profile, n):
    clock = VirtualClock()
    dep = Deployment(name="t", clock=clock, router=HomogeneousRouter(), local_profile=profile, n_prefill=1,
                     n_decode=1, rdma_link=Link(clock, 800.0))
    for i in range(n):
        clock.call_at(0.0, lambda i=i: dep.submit(Request(i, 0.0, 100, 11)))
    peak = {"blocked": 0, "landed": 0.0}

    def watch():
        peak["blocked"] = max(peak["blocked"], len(dep.blocked))
        peak["landed"] = max(peak["landed"], dep.landed_bytes)
        if clock.now() < 100:
            clock.call_at(clock.now() + 0.05, watch)

    clock.call_at(0.0, watch)
    clock.run()
    return {r["request_id"]: r for r in dep.records}, peak


def test_a_full_decode_side_pushes_back_on_prefill(fake_profile):
    """One slot, memory for 3 requests' KV (111 kB each): at most 2 more can wait landed; the rest stay
    on the prefill instance, which stops prefilling until one lands."""
    tight = fake_profile(per_token_s=0.001, step_s=0.1, bs_max=1, kv_per_token=1000.0, kv_capacity_bytes=3 * 111_000)
    roomy = fake_profile(per_token_s=0.001, step_s=0.1, bs_max=1, kv_per_token=1000.0, kv_capacity_bytes=None)
    recs, peak = _run(tight, 8)
    free, free_peak = _run(roomy, 8)
    assert all(r["error"] is None for r in recs.values()) and len(recs) == 8
    assert peak["blocked"] >= 1 and free_peak["blocked"] == 0
    assert peak["landed"] <= 2 * 111_000 + 1e-6  # never more than the decode side's free memory
    # Without room, prefill is held: later prefills start later than on an unbounded decode side.
    assert recs[7]["prefill_start_s"] > free[7]["prefill_start_s"] + 0.5
    # Decode is the bottleneck either way: the last request finishes at the same time.
    assert recs[7]["finish_s"] == pytest.approx(free[7]["finish_s"], rel=0.05)
