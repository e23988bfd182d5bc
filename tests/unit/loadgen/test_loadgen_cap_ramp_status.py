"""Open loop with a concurrency cap (vLLM's --max-concurrency), linear ramp-up, the status line,
and requests cut off by a stop: all on the fake clock."""

from __future__ import annotations

import asyncio
import heapq
import io
import itertools
import math

import pytest

from harness.loadgen.clock import FakeClock
from harness.loadgen.engine import run_load
from harness.loadgen.ramp import apply_ramp, ramp_offset
from harness.loadgen.records import RequestRecord
from harness.loadgen.status import report_status, status_line
from harness.workload.request import Request

from .test_loadgen_engine import FakeTarget, S, trace


class EventClock:
    """Sleepers wake in time order: time jumps to the earliest waiter once every task is blocked
    (the loop has spun `idle_spins` times with nothing else to do). Deterministic: no real I/O."""

    def __init__(self, idle_spins=50):
        self.t, self.heap, self.seq, self.idle_spins = 0, [], 0, idle_spins

    def now_ns(self):
        return self.t

    async def sleep_until(self, t_ns):
        if t_ns <= self.t:
            await asyncio.sleep(0)
            return
        fut = asyncio.get_running_loop().create_future()
        self.seq += 1
        heapq.heappush(self.heap, (t_ns, self.seq, fut))
        await fut

    async def drive(self):
        while True:
            for _ in range(self.idle_spins):
                await asyncio.sleep(0)
            if self.heap:
                t, _, fut = heapq.heappop(self.heap)
                self.t = max(self.t, t)
                if not fut.done():
                    fut.set_result(None)


def _run_with(clock, coro_fn):
    async def go():
        driver = asyncio.create_task(clock.drive())
        try:
            return await coro_fn()
        finally:
            driver.cancel()

    return asyncio.run(go())


def test_the_cap_holds_requests_in_the_client_and_reports_their_queue_time():
    """Six requests due at 0, 1 s of service each, at most 2 in flight: they go out in pairs at
    0, 1, 2 s, each pair's wait is its queue time (not lateness), and all six complete."""
    clock = EventClock()
    target = FakeTarget(clock, service_ns=S)
    result = _run_with(clock, lambda: run_load(trace([0.0] * 6), target, clock=clock, lag_period_s=None,
                                               max_concurrency=2))
    assert target.max_in_flight == 2
    by_id = sorted(result.records, key=lambda r: r.request_id)
    assert [r.queued_ns for r in by_id] == [0, 0, S, S, 2 * S, 2 * S]
    assert [r.sent_ns for r in by_id] == [0, 0, S, S, 2 * S, 2 * S]
    rows = [r.to_row(0, 1.0, "d", "url") for r in by_id]
    assert [row["queue_s"] for row in rows] == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
    assert all(row["lateness_s"] == 0.0 for row in rows)
    assert all(r.completed for r in by_id)


def test_without_a_cap_everything_due_goes_out_at_once():
    clock = EventClock()
    target = FakeTarget(clock, service_ns=S)
    _run_with(clock, lambda: run_load(trace([0.0] * 6), target, clock=clock, lag_period_s=None))
    assert target.max_in_flight == 6


@pytest.mark.parametrize("bad", [0, -3])
def test_the_cap_must_be_positive(bad):
    from harness.errors import InputError

    with pytest.raises(InputError, match="max_concurrency"):
        asyncio.run(run_load(trace([0.0]), FakeTarget(FakeClock()), clock=FakeClock(), lag_period_s=None,
                             max_concurrency=bad))


def test_linear_ramp_from_zero_sends_the_first_requests_later_and_keeps_the_rate_after():
    """Constant 10 req/s, ramp over 4 s from 0: the request at unramped u is sent at sqrt(2 T u)
    during the ramp (the rate factor integrates to t^2 / 2T), and at u + T/2 afterwards."""
    T = 4.0
    assert ramp_offset(0.0, T, 0.0) == 0.0
    assert ramp_offset(0.5, T, 0.0) == pytest.approx(2.0)  # sqrt(2 * 4 * 0.5)
    assert ramp_offset(2.0, T, 0.0) == pytest.approx(4.0)  # the ramp's end: T/2 unramped seconds offered
    assert ramp_offset(10.0, T, 0.0) == pytest.approx(12.0)
    assert ramp_offset(3.0, T, 1.0) == pytest.approx(3.0)  # starting at the full rate: no ramp
    reqs = apply_ramp([Request(i, 5.0 + i / 10, 10, 3) for i in range(100)], T, 0.0)
    gaps = [b.arrival_s - a.arrival_s for a, b in itertools.pairwise(reqs)]
    assert reqs[0].arrival_s == 5.0  # offsets count from the first arrival
    assert gaps[0] > gaps[5] > gaps[15]  # the rate grows during the ramp...
    assert gaps[-1] == pytest.approx(0.1)  # ...and is the trace's own after it
    half_ramp = [r for r in reqs if r.arrival_s - 5.0 < T / 2]
    assert len(half_ramp) == 5  # the first T/2 = 2 s offer T/8 = 0.5 unramped seconds: 5 requests at 10/s


def test_exponential_ramp_doubles_the_rate_each_second_from_an_eighth():
    """f0 = 1/8 over T = 3 s: f(t) = 2^t / 8. The integral to t is (2^t - 1) / (8 ln 2), so the unramped
    offset offered by the ramp's end is 7 / (8 ln 2); later requests keep the trace's own spacing."""
    ln2 = math.log(2)
    assert ramp_offset(7 / (8 * ln2), 3.0, 1 / 8, "exponential") == pytest.approx(3.0)
    assert ramp_offset(1 / (8 * ln2), 3.0, 1 / 8, "exponential") == pytest.approx(1.0)  # 2^1 - 1 = 1
    assert ramp_offset(7 / (8 * ln2) + 5.0, 3.0, 1 / 8, "exponential") == pytest.approx(8.0)
    reqs = apply_ramp([Request(i, i / 10, 10, 3) for i in range(100)], 3.0, 1 / 8, "exponential")
    per_second = [sum(1 for r in reqs if k <= r.arrival_s < k + 1) for k in range(5)]
    # 10 req/s x (2^(k+1) - 2^k) / (8 ln 2) unramped seconds in second k: 1.80, 3.61, 7.21, then 10/s
    assert per_second == [2, 4, 7, 10, 10]
    gaps = [b.arrival_s - a.arrival_s for a, b in itertools.pairwise(reqs)]
    assert gaps[-1] == pytest.approx(0.1)


def test_ramp_names_and_values_are_checked():
    from harness.errors import InputError

    with pytest.raises(InputError, match="ramp_up_strategy"):
        apply_ramp(trace([0.0, 1.0]), 2.0, 0.0, "quadratic")
    with pytest.raises(InputError, match="exponential needs"):
        apply_ramp(trace([0.0, 1.0]), 2.0, 0.0, "exponential")
    with pytest.raises(InputError, match="ramp_up_start_fraction"):
        apply_ramp(trace([0.0, 1.0]), 2.0, 1.5)
    assert apply_ramp(trace([0.0, 1.0]), None) == trace([0.0, 1.0])


def test_status_line_counts_sent_done_errors_and_lateness():
    recs = [RequestRecord(i, scheduled_ns=i * S, input_tokens=1, output_tokens=1) for i in range(4)]
    for r in recs[:3]:
        r.sent_ns = r.scheduled_ns + 2_000_000  # 2 ms late
    recs[0].done_ns = recs[1].done_ns = 5 * S
    recs[1].error = "HTTP 500: x"
    line = status_line(recs, 10, 4 * S, time_scale=1.0)
    assert line == "load: t=4.0s sent=3/10 done=2 errors=1 rate=0.75 req/s lateness_p99=2.00 ms"


def test_status_is_printed_every_period_until_cancelled():
    async def go():
        clock, out = FakeClock(), io.StringIO()
        task = asyncio.create_task(report_status([], 5, clock, 0, 10.0, 1.0, out))
        for _ in range(10):
            await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return out.getvalue().splitlines(), clock.now_ns()

    lines, now = asyncio.run(go())
    assert lines[0] == "load: t=10.0s sent=0/5 done=0 errors=0 rate=0 req/s lateness_p99=n/a"
    assert lines[1].startswith("load: t=20.0s") and now >= 20 * S


def test_a_stop_marks_what_is_in_flight_interrupted_and_only_that():
    """Requests 0-1 finish at 10 s; 2-3 are in flight (sent at 11 s) when the stop comes at 12 s."""
    clock = EventClock()
    target = FakeTarget(clock, service_ns=10 * S)
    stop = asyncio.Event()

    async def body():
        async def stopper():
            await clock.sleep_until(12 * S)
            stop.set()

        task = asyncio.create_task(stopper())
        result = await run_load(trace([0.0, 0.0, 11.0, 11.0, 50.0]), target, clock=clock, lag_period_s=None,
                                stop=stop)
        task.cancel()
        return result

    result = _run_with(clock, body)
    by_id = {r.request_id: r for r in result.records}
    assert {i for i, r in by_id.items() if r.interrupted} == {2, 3}
    assert by_id[0].completed and by_id[1].completed and 4 not in by_id
    assert by_id[2].to_row(0, 1.0, "d", "url")["interrupted"] is True
    assert by_id[2].error.startswith("interrupted")


def test_a_binding_cap_does_not_make_the_generator_look_late():
    """Queueing for a slot is the experiment: health judges lateness and rate from when each request
    was ready to go, so the capped run above is valid (sent on time, at the scheduled rate)."""
    from harness.loadgen.health import loadgen_health

    clock = EventClock()
    target = FakeTarget(clock, service_ns=S)
    result = _run_with(clock, lambda: run_load(trace([i * 0.1 for i in range(20)]), target, clock=clock,
                                               lag_period_s=None, max_concurrency=2))
    assert max(r.queued_ns for r in result.records) > 5 * S  # the cap did bind
    health = loadgen_health(result.records, [], open_loop=True, time_scale=1.0, max_lateness_ms=1.0,
                            min_rate_fraction=0.95, max_loop_lag_ms=20.0)
    assert health["valid"], health["invalid_reason"]
    assert health["lateness_max_ms"] == 0.0
