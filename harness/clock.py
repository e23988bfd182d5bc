"""The emulator's notion of time: one protocol, two clocks.

Deployment code only ever calls `clock.now()`, `clock.call_at(t, fn)` (a `Timer` it may cancel)
and `clock.fire_at(t, fn)` (a callback never cancelled: no handle to make). In sim mode a
`VirtualClock` runs those callbacks from a heap as fast as the CPU allows; in live mode
`harness.live.clock.ScheduledLoopClock` (built on `WallClock` here) runs them on the asyncio
loop's wall clock, scaled. Times are seconds as floats. `Clock` is the harness's one clock
protocol; the load generator's `Pacer` (harness/loadgen/clock.py: `now_ns`/`sleep_until`) only
paces sends on the monotonic clock and schedules nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from heapq import heappop as _heappop
from heapq import heappush as _heappush
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from asyncio import AbstractEventLoop


class Timer:
    """A scheduled callback; `cancel()` makes it a no-op (lazy deletion from the heap)."""

    __slots__ = ("when", "fn", "cancelled")

    def __init__(self, when: float, fn: Callable[[], None]) -> None:
        self.when = when
        self.fn = fn
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Clock(Protocol):
    def now(self) -> float: ...

    def call_at(self, when: float, fn: Callable[[], None]) -> Timer: ...

    def fire_at(self, when: float, fn: Callable[[], None]) -> None: ...


_ROUNDING = 1e-9  # relative: a time this close behind `now` is float rounding of `now`, not the past


class VirtualClock:
    """Discrete-event clock: time jumps to the next timer. Ties run in scheduling order.

    Scheduling in the past is a bug in the caller (an event would run out of order), so it raises;
    only float rounding (within 1e-9 relative of now) is taken as now.

    The heap holds (when, seq, fn, timer): `timer` is the `Timer` a `call_at` handed out (None for
    `fire_at`, which makes none), checked for cancellation when the entry surfaces.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._heap: list[tuple[float, int, Callable[[], None], Timer | None]] = []
        self._seq = itertools.count()
        self.events_run = 0

    def now(self) -> float:
        return self._now

    def _check(self, when: float) -> float:
        now = self._now
        if not now - when <= _ROUNDING * max(1.0, abs(now)):
            raise ValueError(f"VirtualClock.call_at: {when!r} is in the past (now {now!r}); "
                             f"schedule at or after now")
        return now

    def call_at(self, when: float, fn: Callable[[], None]) -> Timer:
        if when < self._now:
            when = self._check(when)
        timer = Timer(when, fn)
        _heappush(self._heap, (when, next(self._seq), fn, timer))
        return timer

    def fire_at(self, when: float, fn: Callable[[], None]) -> None:
        """`call_at` for a callback that is never cancelled: the same order, no `Timer` made."""
        if when < self._now:
            when = self._check(when)
        _heappush(self._heap, (when, next(self._seq), fn, None))

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer:
        return self.call_at(self._now + delay, fn)

    def run(self, until: float | None = None) -> None:
        """Run timers in time order until none is left (or the next is after `until`)."""
        heap = self._heap
        pop = _heappop
        ran = 0  # events_run, counted locally (an attribute update per event is a tenth of the loop)
        try:
            if until is None:  # the whole run: no bound to test per timer
                while heap:
                    when, _, fn, timer = pop(heap)
                    if timer is not None and timer.cancelled:
                        continue
                    self._now = when
                    ran += 1
                    fn()
                return
            while heap:
                when, _, fn, timer = heap[0]
                if when > until:
                    self._now = until
                    return
                pop(heap)
                if timer is not None and timer.cancelled:
                    continue
                self._now = when
                ran += 1
                fn()
            if until > self._now:
                self._now = until
        finally:
            self.events_run += ran


class WallClock:
    """Wall-clock time on an asyncio loop, optionally scaled: `time_scale=10` runs 10x faster.

    `now()` is emulated seconds since the clock was made; `to_loop_time` maps emulated times back
    to loop times. It only tells time: the live emulator's `ScheduledLoopClock`
    (harness/live/clock.py) adds timers that run in emulated-time order, so host lag is measured
    as lag instead of leaking into the emulated timeline.
    """

    def __init__(self, loop: AbstractEventLoop, time_scale: float = 1.0) -> None:
        if not time_scale > 0:
            raise ValueError(f"server.time_scale must be > 0, got {time_scale}")
        self._loop = loop
        self.time_scale = float(time_scale)
        self._t0 = loop.time()
        self.max_lag_s = 0.0
        self.events_run = 0

    def now(self) -> float:
        return (self._loop.time() - self._t0) * self.time_scale

    def to_loop_time(self, when: float) -> float:
        return self._t0 + when / self.time_scale
