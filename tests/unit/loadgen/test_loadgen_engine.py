"""The load generator's lifecycle on a fake clock: absolute schedule, one record each, errors as data."""

from __future__ import annotations

import asyncio
import time

import pytest

from harness.loadgen.clock import FakeClock, MonotonicClock
from harness.loadgen.engine import run_load
from harness.workload.request import Request

S = 1_000_000_000


class FakeTarget:
    """Takes `service_ns` of fake time per request; fails the ids in `fail`, raises for `boom`."""

    def __init__(self, clock, service_ns=0, fail=(), boom=()):
        self.clock, self.service_ns, self.fail, self.boom = clock, service_ns, set(fail), set(boom)
        self.in_flight = self.max_in_flight = 0
        self.prepared = []

    def prepare(self, request):
        self.prepared.append(request.request_id)
        return request.request_id

    async def send(self, body, record):
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0)
            if body in self.boom:
                raise RuntimeError("target bug")
            if body in self.fail:
                record.error = "HTTP 503: busy"
                return
            await self.clock.sleep_until(self.clock.now_ns() + self.service_ns)
            record.first_token_ns = record.last_token_ns = self.clock.now_ns()
        finally:
            self.in_flight -= 1


def trace(offsets):
    return [Request(i, t, 10, 3) for i, t in enumerate(offsets)]


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("time_scale", [1.0, 4.0])
def test_open_loop_sends_at_absolute_targets(time_scale):
    """Request i is due at start + arrival_s / time_scale, whatever happened before it."""
    clock = FakeClock(start_ns=5 * S)
    target = FakeTarget(clock)
    result = run(run_load(trace([0.0, 0.5, 0.5, 2.0]), target, clock=clock, time_scale=time_scale,
                          lag_period_s=None))
    by_id = {r.request_id: r for r in result.records}
    assert result.t0_ns == 5 * S
    for rid, offset in enumerate([0.0, 0.5, 0.5, 2.0]):
        assert by_id[rid].scheduled_ns == 5 * S + round(offset * S / time_scale)
        assert by_id[rid].sent_ns == by_id[rid].scheduled_ns  # a fake clock is never late
        assert by_id[rid].error is None and by_id[rid].done_ns is not None


def test_unsorted_trace_is_sent_in_time_order():
    clock = FakeClock()
    target = FakeTarget(clock)
    run(run_load(trace([3.0, 1.0, 2.0]), target, clock=clock, lag_period_s=None))
    assert target.prepared == [1, 2, 0]


def test_every_request_ends_in_exactly_one_record_failures_included():
    """Target errors and target bugs are recorded; the run goes on to the last request."""
    clock = FakeClock()
    target = FakeTarget(clock, fail={1}, boom={2})
    result = run(run_load(trace([0.0, 0.1, 0.2, 0.3]), target, clock=clock, lag_period_s=None))
    errors = {r.request_id: r.error for r in result.records}
    assert sorted(errors) == [0, 1, 2, 3]
    assert errors[0] is None and errors[3] is None
    assert errors[1] == "HTTP 503: busy"
    assert errors[2] == "RuntimeError: target bug"


def test_max_duration_stops_offering_and_warmup_is_flagged():
    clock = FakeClock()
    result = run(run_load(trace([0.0, 1.0, 2.0, 3.0, 4.0]), FakeTarget(clock), clock=clock, max_duration_s=3.0,
                          warmup_s=1.5, lag_period_s=None))
    assert [r.request_id for r in result.records] == [0, 1, 2, 3]
    assert [r.warmup for r in result.records] == [True, True, False, False]


@pytest.mark.parametrize("concurrency", [1, 3])
def test_closed_loop_keeps_at_most_c_in_flight_and_sends_everything(concurrency):
    """Arrival times are ignored; each slot sends its next request when the previous one ends."""
    clock = FakeClock()
    target = FakeTarget(clock, service_ns=S)
    result = run(run_load(trace([0.0] * 7), target, clock=clock, concurrency=concurrency, lag_period_s=None))
    assert sorted(r.request_id for r in result.records) == list(range(7))
    assert target.max_in_flight == concurrency
    assert not result.open_loop


def test_closed_loop_respects_max_duration():
    clock = FakeClock()
    target = FakeTarget(clock, service_ns=S)
    result = run(run_load(trace([0.0] * 10), target, clock=clock, concurrency=1, max_duration_s=2.5,
                          lag_period_s=None))
    assert len(result.records) == 3  # sent at 0, 1 and 2 s; the slot is free at 3 s, past the limit


def test_cancelled_run_still_records_what_it_sent(monkeypatch):
    """Interrupting the run cancels requests in flight; each keeps its record, marked cancelled."""
    import harness.loadgen.engine as engine

    class Hang:
        def prepare(self, request):
            return request.request_id

        async def send(self, body, record):
            await asyncio.sleep(3600)

    records = []
    original = engine.RequestRecord
    monkeypatch.setattr(engine, "RequestRecord", lambda *a, **k: records.append(original(*a, **k)) or records[-1])

    async def main():
        task = asyncio.create_task(run_load(trace([0.0, 0.0]), Hang(), lag_period_s=None))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(main())
    assert len(records) == 2
    assert all(r.error == "interrupted: the run was stopped" and r.done_ns is not None for r in records)


class CountingClock(MonotonicClock):
    """The real clock, counting the sleeps that have returned (the offer's and the watcher's)."""

    def __init__(self):
        self.wakes = 0

    async def sleep_until(self, t_ns):
        await super().sleep_until(t_ns)
        self.wakes += 1


def test_loop_watcher_measures_lag():
    """On the real clock the watcher ticks and reports how late each tick woke. The send lasts until
    the watcher has woken 3 times (counted, not timed: a busy machine only makes that take longer),
    and blocks the loop for STALL_S between the first wake and the rest: a tick due in that stall
    wakes at least STALL_S - period late, whatever else the host does."""
    period_s, stall_s = 0.005, 0.03
    clock = CountingClock()

    class WaitsForTheWatcher:
        def prepare(self, request):
            return None

        async def send(self, body, record):
            start = clock.wakes  # the offer has slept to t0 already; every later wake is the watcher's
            deadline = time.monotonic() + 30  # a hang bound: the asserts below say what was missing
            while clock.wakes < start + 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.001)
            time.sleep(stall_s)  # the loop stalls, as on a busy host
            while clock.wakes < start + 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.001)

    result = run(run_load(trace([0.0]), WaitsForTheWatcher(), clock=clock, lag_period_s=period_s))
    assert len(result.loop_lag_ns) >= 3, result.loop_lag_ns
    assert all(lag >= 0 for lag in result.loop_lag_ns)
    assert max(result.loop_lag_ns) >= (stall_s - period_s) * 1e9, result.loop_lag_ns


def test_stop_cancels_what_is_in_flight_and_sends_nothing_more():
    """The SIGINT path: requests in flight end as interrupted records, later ones are never sent."""

    class Hang:
        def prepare(self, request):
            return request.request_id

        async def send(self, body, record):
            await asyncio.sleep(3600)

    async def main():
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, stop.set)
        return await run_load(trace([0.0, 0.01, 3600.0]), Hang(), stop=stop, lag_period_s=None)

    result = run(main())
    assert result.interrupted
    assert [r.request_id for r in result.records] == [0, 1]
    assert all(r.error == "interrupted: the run was stopped" for r in result.records)


def test_a_closed_loop_with_predecessors_never_sends_a_turn_before_the_one_it_continues():
    """A saturation run's order (harness/workload/turns.py, as sim mode): two sessions of three turns,
    interleaved in trace order, four slots. Without `predecessors` the loop sends both sessions'
    second turns at t=0 with their first; with them each turn waits for its previous one to end."""
    requests = [Request(i, 0.0, 10, 3, session_id=i % 2, turn=i // 2) for i in range(6)]
    pred = {i: i - 2 for i in range(2, 6)}

    def sends(predecessors):
        clock = FakeClock()
        result = run(run_load(requests, FakeTarget(clock, service_ns=S), clock=clock, concurrency=4,
                              lag_period_s=None, predecessors=predecessors))
        return {r.request_id: (r.sent_ns / S, r.done_ns / S) for r in result.records}

    plain = sends(None)
    assert [plain[i][0] for i in range(4)] == [0, 0, 0, 0]  # trace order alone: turns 2 and 3 go at once
    ordered = sends(pred)
    assert sorted(ordered) == list(range(6))  # every request sent once
    assert all(ordered[turn][0] >= ordered[prev][1] > 0 for turn, prev in pred.items())
