"""Decode instance: lock-step continuous batching, joins at step boundaries, memory limits."""

from __future__ import annotations

import math

import pytest

from harness.clock import VirtualClock
from harness.deploy.decode import DecodeInstance
from harness.deploy.job import Job
from harness.workload.request import Request


def _job(rid, output_tokens, input_tokens=100):
    return Job(Request(request_id=rid, arrival_s=0.0, input_tokens=input_tokens, output_tokens=output_tokens))


def _instance(clock, profile, **kw):
    done = []
    inst = DecodeInstance("d0", clock, profile, on_first_token=lambda j: None, on_done=done.append, **kw)
    return inst, done


def _admit_at(clock, inst, t, job):
    clock.call_at(t, lambda: inst.admit(job))


def test_single_request_emits_first_token_on_join_then_one_token_per_step(fake_profile):
    """Output 5 at 0.1 s per step: first token at join, 4 more steps -> done at 0.4 s."""
    clock = VirtualClock()
    inst, done = _instance(clock, fake_profile(step_s=0.1))
    job = _job(1, 5)
    _admit_at(clock, inst, 0.0, job)
    clock.run()
    assert job.first_token_s == 0.0
    assert job.finish_s == pytest.approx(0.4)
    assert done == [job]


def test_mid_step_arrival_joins_at_next_boundary_and_does_not_disturb_others(fake_profile):
    """A (11 tokens) runs from 0; B arrives at 0.25 and joins at 0.3; constant step time."""
    clock = VirtualClock()
    inst, done = _instance(clock, fake_profile(step_s=0.1))
    a, b = _job(1, 11), _job(2, 3)
    _admit_at(clock, inst, 0.0, a)
    _admit_at(clock, inst, 0.25, b)
    clock.run()
    assert b.first_token_s == pytest.approx(0.3)
    assert b.finish_s == pytest.approx(0.5)
    assert a.finish_s == pytest.approx(1.0)
    assert [j.request.request_id for j in done] == [2, 1]


def test_step_time_follows_batch_size_between_membership_changes(fake_profile):
    """step = 0.1 s x batch. A (7 tokens) alone for 2 steps, B (3) joins at 0.2: both step at 0.2 s.

    B: 2 steps of 0.2 -> 0.6. A: 2 steps alone (0.2) + 2 shared (0.4) + 2 alone (0.2) -> 0.8.
    """
    clock = VirtualClock()
    inst, _ = _instance(clock, fake_profile(step_s=0.0, per_seq_s=0.1))
    a, b = _job(1, 7), _job(2, 3)
    _admit_at(clock, inst, 0.0, a)
    _admit_at(clock, inst, 0.2, b)
    clock.run()
    assert b.finish_s == pytest.approx(0.6)
    assert a.finish_s == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("bs_max", "kv_capacity", "admitted"),
    [
        (2, None, 2),  # batch slots bind
        (8, 250_000.0, 2),  # each job needs (100+10) * 1000 B = 110 kB: two fit in 250 kB
        (8, 100_000.0, 0),  # not even one fits
    ],
)
def test_admission_respects_batch_slots_and_kv_memory(fake_profile, bs_max, kv_capacity, admitted):
    clock = VirtualClock()
    inst, _ = _instance(clock, fake_profile(bs_max=bs_max, kv_capacity_bytes=kv_capacity))
    count = 0
    for rid in range(5):
        job = _job(rid, 10)
        if inst.can_admit(job):
            inst.admit(job)
            count += 1
    assert count == admitted


def test_slot_and_memory_are_released_when_a_request_finishes(fake_profile):
    clock = VirtualClock()
    inst, _ = _instance(clock, fake_profile(bs_max=1, kv_capacity_bytes=200_000.0))
    job = _job(1, 3)
    inst.admit(job)
    assert not inst.can_admit(_job(2, 3))
    clock.run()
    assert inst.can_admit(_job(2, 3))
    assert inst.kv_bytes_used == pytest.approx(0.0)
    assert inst.running == 0


def test_single_token_output_finishes_on_join(fake_profile):
    clock = VirtualClock()
    inst, done = _instance(clock, fake_profile())
    job = _job(1, 1)
    inst.admit(job)
    clock.run()
    assert job.finish_s == job.first_token_s == 0.0
    assert done == [job] and inst.reserved == 0


def test_many_requests_throughput_matches_slots_over_occupancy(fake_profile):
    """Saturated: bs_max=4 slots, each request holds one for 9 steps of 0.1 s -> 4/0.9 req/s."""
    clock = VirtualClock()
    inst, done = _instance(clock, fake_profile(bs_max=4, step_s=0.1))
    queue = [_job(i, 10) for i in range(40)]

    def refill(_job=None):
        while queue and inst.can_admit(queue[0]):
            inst.admit(queue.pop(0))

    inst.on_done = lambda j: (done.append(j), refill())
    refill()
    clock.run()
    assert len(done) == 40
    assert max(j.finish_s for j in done) == pytest.approx(10 * 0.9)
    assert all(math.isclose(j.finish_s - j.first_token_s, 0.9) for j in done)


def test_tokens_done_counts_one_on_join_then_one_per_step(fake_profile):
    """Live streaming reads progress from the step counter: 1 token at join, +1 per 0.1 s step."""
    clock = VirtualClock()
    inst, _ = _instance(clock, fake_profile(step_s=0.1))
    job = _job(1, 5)
    _admit_at(clock, inst, 0.0, job)
    seen = {}
    for t in (0.0, 0.05, 0.1, 0.25, 0.39, 0.5):
        clock.call_at(t, lambda t=t: seen.__setitem__(t, inst.tokens_done(job, clock.now())))
    clock.run()
    assert seen == {0.0: 1, 0.05: 1, 0.1: 2, 0.25: 3, 0.39: 4, 0.5: 5}
