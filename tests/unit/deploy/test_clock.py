"""The virtual clock: timers in time order, ties in scheduling order, cancelled timers never run nor count."""

from __future__ import annotations

import pytest

from harness.clock import VirtualClock


def test_fire_at_and_call_at_share_one_order_and_one_event_count():
    clock = VirtualClock()
    ran: list[tuple[str, float]] = []

    def note(name: str):
        return lambda: ran.append((name, clock.now()))

    clock.fire_at(2.0, note("fire-2"))
    clock.call_at(1.0, note("call-1"))
    clock.fire_at(1.0, note("fire-1"))  # same time as call-1, scheduled after it: runs after it
    cancelled = clock.call_at(0.5, note("cancelled"))
    cancelled.cancel()
    clock.call_at(1.5, lambda: clock.fire_at(1.5, note("chained")))  # scheduled at now from a callback
    clock.run()
    assert ran == [("call-1", 1.0), ("fire-1", 1.0), ("chained", 1.5), ("fire-2", 2.0)]
    assert clock.events_run == 5  # the four above and the one that chained; not the cancelled one


def test_run_until_stops_before_later_timers_and_resumes():
    clock = VirtualClock()
    ran: list[float] = []
    for t in (1.0, 2.0, 3.0):
        clock.fire_at(t, lambda: ran.append(clock.now()))
    clock.run(until=2.5)
    assert ran == [1.0, 2.0] and clock.now() == 2.5
    clock.run()
    assert ran == [1.0, 2.0, 3.0] and clock.events_run == 3


def test_fire_at_in_the_past_is_an_error_but_rounding_is_now():
    clock = VirtualClock(start=10.0)
    with pytest.raises(ValueError, match="in the past"):
        clock.fire_at(9.0, lambda: None)
    clock.fire_at(10.0 - 1e-12, lambda: None)
    clock.run()
    assert clock.now() == 10.0
