"""Decode context grows with the tokens produced (one event per membership change, no per-token events),
and the virtual clock refuses to schedule in the past."""

from __future__ import annotations

import pytest

from harness.clock import VirtualClock
from harness.deploy.decode import DecodeInstance
from harness.deploy.job import Job
from harness.workload.request import Request


class ContextProfile:
    """step = base + per_token x context tokens the batch holds (a linear, context-bound step)."""

    bs_max = 8
    kv_capacity_bytes = None

    def __init__(self, base_s: float, per_token_s: float) -> None:
        self.base_s, self.per_token_s = base_s, per_token_s

    def kv_bytes(self, tokens):
        return float(tokens)

    def decode_step_s(self, batch, context_tokens):
        return self.base_s + self.per_token_s * context_tokens


def _job(rid, input_tokens, output_tokens):
    return Job(Request(request_id=rid, arrival_s=0.0, input_tokens=input_tokens, output_tokens=output_tokens))


def _run(profile, jobs_at):
    clock = VirtualClock()
    inst = DecodeInstance("d0", clock, profile, on_first_token=lambda j: None, on_done=lambda j: None)
    for t, job in jobs_at:
        clock.call_at(t, lambda job=job: inst.admit(job))
    clock.run()
    return clock


def test_a_lone_sequence_reads_its_growing_context_exactly():
    """Input 100, output 11: 10 steps reading 101, 102, ..., 110 tokens. Exact sum, one timer."""
    profile = ContextProfile(base_s=0.01, per_token_s=0.001)
    job = _job(1, 100, 11)
    clock = _run(profile, [(0.0, job)])
    expected = sum(0.01 + 0.001 * (100 + k) for k in range(1, 11))
    assert job.finish_s == pytest.approx(expected, rel=1e-12)
    assert clock.events_run == 2  # the admit and the finish: nothing per token


def test_two_sequences_share_growing_steps():
    """A (input 100, output 5) and B (input 50, output 3) join together at 0: both grow one token a step."""
    profile = ContextProfile(base_s=0.0, per_token_s=0.001)
    a, b = _job(1, 100, 5), _job(2, 50, 3)
    _run(profile, [(0.0, a), (0.0, b)])
    # context at step k (k = 0..): A 101 + k, B 51 + k while B runs (2 steps), then A alone.
    shared = sum(0.001 * ((101 + k) + (51 + k)) for k in range(2))
    alone = sum(0.001 * (101 + k) for k in range(2, 4))
    assert b.finish_s == pytest.approx(shared, rel=1e-9)
    assert a.finish_s == pytest.approx(shared + alone, rel=1e-9)


def test_frozen_context_would_be_wrong():
    """The old rule (input + output/2, frozen) gives a different finish for a long output."""
    profile = ContextProfile(base_s=0.0, per_token_s=1e-6)
    job = _job(1, 1000, 2001)
    _run(profile, [(0.0, job)])
    frozen = 2000 * 1e-6 * (1000 + 2001 // 2)
    exact = sum(1e-6 * (1000 + k) for k in range(1, 2001))
    assert job.finish_s == pytest.approx(exact, rel=1e-9)
    assert abs(frozen - exact) > 1e-6


def test_virtual_clock_raises_on_a_time_in_the_past():
    clock = VirtualClock()
    clock.call_at(5.0, lambda: None)
    clock.run()
    with pytest.raises(ValueError, match="in the past"):
        clock.call_at(4.0, lambda: None)
    clock.call_at(5.0 - 1e-12, lambda: None)  # float rounding of now is now
    clock.run()
    assert clock.now() == 5.0
