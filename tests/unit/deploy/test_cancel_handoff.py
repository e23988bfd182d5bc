"""Cancels in every state a modelled KV hand-off adds (harness/deploy/handoff.py): saving on the prefill
instance, waiting in the link's FIFO queue, on the link, restoring into a decode slot; and in the states
around them. A request is cancelled at every 50 ms of its life; each time every request ends in one
record, the others complete, and nothing it held (instance, link, transfer cache, slot) stays held.
"""

from __future__ import annotations

import pytest

from harness.clock import VirtualClock
from harness.deploy.deployment import Deployment
from harness.deploy.handoff import Handoff
from harness.deploy.link import Link
from harness.deploy.router.naive import NaiveRouter
from harness.workload.request import Request
from tests.unit.deploy.test_cancel import Watch

# 1000-token prompts: prefill 1 s, save 0.3 s, ~1 MB over a 0.5 MB/s link (~2 s: the second waits for
# the first in the FIFO), restore 0.2 s into the one decode slot, then 4 steps of 0.1 s.
HANDOFF = Handoff(store_and_forward=True, save_base_s=0.3, restore_base_s=0.2, fixed_bytes=192, per_token_bytes=16)


def _deployment(fake_profile):
    clock = VirtualClock()
    profile = fake_profile(per_token_s=0.001, step_s=0.1, bs_max=1)
    dep = Deployment(name="t", clock=clock, router=NaiveRouter(), local_profile=profile, n_prefill=0, n_decode=1,
                     prfaas_profile=profile, n_prfaas=1, rdma_link=Link(clock, 800.0),
                     cross_link=Link(clock, 0.004, efficiency=0.956, sharing="fifo"), handoff=HANDOFF)
    return clock, dep, Watch(clock, dep)


def _state(dep, job) -> str:
    """Where the request is now, in the hand-off's terms."""
    instance = dep.prefill["prfaas"][0]
    if job in instance.queue:
        return "queued"
    if job in instance.running:
        return "save" if dep.clock.now() >= job.prefill_start_s + job.prefill_s - job.kv_save_s else "prefill"
    if job.flows:
        return "link" if job.flows[0].rate_gbps > 0 else "link_wait"
    if job in dep.waiting:
        return "slot_wait"
    if job.decode_instance and job.join_step is None:
        return "restore"
    if job.decode_instance:
        return "decode"
    return "done"


@pytest.mark.parametrize("rid", [1, 2])
def test_a_cancel_in_any_state_ends_in_one_record_and_frees_what_it_held(fake_profile, rid):
    seen: set[str] = set()
    for k in range(1, 200):
        at = k * 0.05
        clock, dep, w = _deployment(fake_profile)
        for i in (1, 2, 3):
            w.submit_at(0.0, Request(i, 0.0, 1000, 5))
        clock.call_at(at, lambda dep=dep, w=w: seen.add(_state(dep, w.jobs[rid])))  # at the cancel's instant, first
        ok = w.cancel_at(at, rid)
        recs = w.finish()  # one record each
        others = [r for i, r in recs.items() if i != rid]
        assert all(r["error"] is None for r in others), (at, others)
        assert recs[rid]["error"] == ("client disconnected" if ok["ok"] else None)
        assert dep.cross_link.active_flows == 0 and dep.pools["prfaas"].transfer_bytes == pytest.approx(0.0)
        assert dep.decode[0].reserved == 0 and dep.landed_bytes == 0.0 and not dep.waiting and not dep.blocked
        assert dep.prefill["prfaas"][0].holds == 0 and not dep.in_flight
    assert {"prefill", "save", "link", "restore", "decode"} <= seen
    if rid == 2:
        assert {"queued", "link_wait"} <= seen
