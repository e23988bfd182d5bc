"""Prefill instance: FIFO service, backlog accounting, token-budget batching."""

from __future__ import annotations

import pytest

from harness.clock import VirtualClock
from harness.deploy.job import Job
from harness.deploy.prefill import PrefillInstance
from harness.workload.request import Request


def _job(rid, tokens, cached=0):
    job = Job(Request(request_id=rid, arrival_s=0.0, input_tokens=tokens, output_tokens=1))
    job.cached_tokens = cached
    return job


def _instance(clock, profile, **kw):
    starts, ends = [], []
    inst = PrefillInstance("p0", clock, profile, on_start=lambda j, d: starts.append((j, d)),
                           on_done=ends.append, **kw)
    return inst, starts, ends


def test_fifo_service_one_request_at_a_time(fake_profile):
    """1 ms/token: 1000, 500, 2000 tokens queued at t=0 end at 1.0, 1.5, 3.5 s."""
    clock = VirtualClock()
    inst, _, ends = _instance(clock, fake_profile(per_token_s=0.001))
    jobs = [_job(1, 1000), _job(2, 500), _job(3, 2000)]
    for job in jobs:
        inst.submit(job)
    assert inst.backlog_s() == pytest.approx(3.5)
    clock.run()
    assert [j.prefill_end_s for j in jobs] == pytest.approx([1.0, 1.5, 3.5])
    assert [j.prefill_start_s for j in jobs] == pytest.approx([0.0, 1.0, 1.5])
    assert ends == jobs


def test_backlog_counts_remaining_work_of_the_running_request(fake_profile):
    clock = VirtualClock()
    inst, _, _ = _instance(clock, fake_profile(per_token_s=0.001))
    inst.submit(_job(1, 1000))
    inst.submit(_job(2, 1000))
    clock.run(until=0.25)
    assert inst.backlog_s() == pytest.approx(1.75)


def test_cached_prefix_is_not_recomputed(fake_profile):
    clock = VirtualClock()
    inst, _, _ = _instance(clock, fake_profile(per_token_s=0.001))
    job = _job(1, 1000, cached=600)
    inst.submit(job)
    clock.run()
    assert job.prefill_end_s == pytest.approx(0.4)


def test_token_budget_batches_queued_requests_and_pays_the_fixed_cost_once(fake_profile):
    """base 0.2 s + 1 ms/token, budget 1500: [1000 alone], then [300, 400] together, then [900]."""
    clock = VirtualClock()
    inst, starts, _ = _instance(clock, fake_profile(base_s=0.2, per_token_s=0.001), max_batch_tokens=1500)
    jobs = [_job(1, 1000), _job(2, 300), _job(3, 400), _job(4, 900)]
    for job in jobs:
        inst.submit(job)
    clock.run()
    # first pass starts on submit with only job 1 queued; jobs 2+3 share the second pass.
    assert jobs[0].prefill_end_s == pytest.approx(1.2)
    assert jobs[1].prefill_end_s == jobs[2].prefill_end_s == pytest.approx(1.2 + 0.2 + 0.7)
    assert jobs[3].prefill_end_s == pytest.approx(2.1 + 1.1)
    assert [round(d, 6) for _, d in starts] == [1.2, 0.9, 0.9, 1.1]
