"""The live clock keeps the emulated timeline causal when the host loop is late.

Lateness is forced deterministically (a callback that blocks the loop), so these are ordering and
value checks, not timing measurements.
"""

from __future__ import annotations

import asyncio
import math
import time

import pytest

from harness.live.clock import ScheduledLoopClock


def _run(body):
    async def main():
        loop = asyncio.get_running_loop()
        clock = ScheduledLoopClock(loop, time_scale=1.0)
        return await body(clock)

    return asyncio.run(main())


def test_overdue_timers_run_in_time_order_at_their_own_times():
    """A blocks the loop past B's time and schedules C before B: C still runs before B, and each
    callback sees its scheduled time (plain asyncio would run B first, late).

    The timers are set from a callback of the clock, whose time is pinned at its own (t0): set from
    the coroutine, a host stall between making the clock and scheduling (a busy machine) would move
    a timer that fell in the past to now, and the times asserted with it."""

    async def body(clock):
        seen, start = [], []

        def a():
            seen.append(("a", clock.now()))
            time.sleep(0.05)  # the host loop stalls past b's due time
            clock.call_at(clock.now() + 0.005, lambda: seen.append(("c", clock.now())))

        def schedule():
            t0 = clock.now()
            start.append(t0)
            clock.call_at(t0 + 0.02, a)
            clock.call_at(t0 + 0.03, lambda: seen.append(("b", clock.now())))

        clock.call_at(0.0, schedule)
        await asyncio.sleep(0.12)
        return seen, clock, start[0]

    seen, clock, t0 = _run(body)
    assert [name for name, _ in seen] == ["a", "c", "b"]
    assert [t for _, t in seen] == [t0 + 0.02, t0 + 0.02 + 0.005, t0 + 0.03]
    assert clock.max_lag_s >= 0.04  # the stall is measured, not hidden
    assert len(clock.lags_s) == 4  # schedule, a, c, b


def test_time_waits_for_an_overdue_timer():
    """Outside callbacks, now() never passes a timer that has not fired yet."""

    async def body(clock):
        timer = clock.call_at(0.01, lambda: None)  # at 0.01, or now if a host stall came first
        time.sleep(0.03)  # the timer is due but the loop has not run it
        stalled = clock.now()
        wall = clock.wall_now()
        await asyncio.sleep(0.01)
        return stalled, wall, clock.now(), timer.when

    stalled, wall, after, when = _run(body)
    assert stalled == when
    assert wall > 0.03
    assert after > 0.03  # once it fired, time follows the wall clock again


def test_cancelled_timers_do_not_run_or_hold_time():
    async def body(clock):
        ran = []
        timer = clock.call_at(0.01, lambda: ran.append(1))
        timer.cancel()
        time.sleep(0.02)
        now = clock.now()
        await asyncio.sleep(0.02)
        return ran, now

    ran, now = _run(body)
    assert ran == []
    assert now > 0.02


def test_time_scale_maps_emulated_to_wall_time():
    """At time_scale 50, an emulated second is 20 wall ms of loop time, and a timer never fires
    early; how late it fires depends on the host (lag is reported in wall ms, not bounded here)."""

    async def body(clock):
        done = asyncio.Event()
        clock.call_at(1.0, done.set)
        await done.wait()  # from the clock's own start: a host stall before call_at does not count
        return asyncio.get_running_loop().time() - clock.to_loop_time(0.0), clock

    async def main():
        clock = ScheduledLoopClock(asyncio.get_running_loop(), time_scale=50.0)
        return await body(clock)

    wall_s, clock = asyncio.run(main())
    # exact up to the loop clock's float resolution: its time since boot (~3e4 s after 9 h) has ulps of
    # ~4e-12 s, 2e-10 of the 0.02 s, so a relative 1e-12 failed or passed by the rounding of the moment
    resolution = 2 * math.ulp(clock.to_loop_time(1.0))
    assert clock.to_loop_time(1.0) - clock.to_loop_time(0.0) == pytest.approx(0.02, rel=0, abs=resolution)
    assert wall_s > 0.015
    assert clock.lag_wall_ms(50) == clock.lags_s[0] / 50 * 1e3


def test_a_failing_callback_does_not_stop_the_clock():
    """The error goes to the loop's exception handler; later timers still run."""

    async def body(clock):
        loop = asyncio.get_running_loop()
        errors, ran = [], []
        loop.set_exception_handler(lambda _loop, context: errors.append(context["exception"]))
        clock.call_at(0.005, lambda: 1 / 0)
        later = clock.call_at(0.01, lambda: ran.append(clock.now()))  # now, if a host stall came first
        await asyncio.sleep(0.05)
        return errors, ran, later.when

    errors, ran, when = _run(body)
    assert [type(e) for e in errors] == [ZeroDivisionError]
    assert ran == [when]
