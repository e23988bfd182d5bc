"""The live emulator's clock: the wall clock (scaled), with timer lag measured but not leaked.

A naive wall clock that gives each timer its own asyncio handle and lets its callback read the
*actual* time turns every millisecond the host loop is late into emulated time: a prefill that ends 1 ms late
(x time_scale) starts the next one late, a link flow keeps "sending" past its last byte, and
asyncio may even run two overdue timers out of order (it batches due handles before running any,
so a timer scheduled by the first runs after an already-due later one).

`ScheduledLoopClock` keeps the emulated timeline causal instead. Its timers live in one heap, as in
`VirtualClock`, and one asyncio handle wakes for the earliest; each due timer then runs in time
order at its *scheduled* time, and time never passes a timer that has not fired (`now()` is the
earlier of the scaled wall clock and the earliest pending timer). The emulated timeline is then the
one sim mode computes; the host's lateness is what it really is, a delivery delay, measured
(`lags_s`, `max_lag_s`) and, past `server.max_lag_ms`, a reason to mark the run invalid.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Callable

import numpy as np

from harness.clock import Timer, WallClock


class ScheduledLoopClock(WallClock):
    def __init__(self, loop, time_scale: float = 1.0) -> None:
        super().__init__(loop, time_scale)
        self._heap: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._handle: asyncio.TimerHandle | None = None  # the asyncio handle armed for the earliest timer
        self._armed_for = float("inf")
        self._pinned: float | None = None  # the running timer's scheduled time
        self._last = 0.0  # latest time handed out (keeps now() monotonic)
        # Emulated seconds each timer fired late; the most recent ones only, so a long-running
        # server's memory stays flat.
        self.lags_s: deque[float] = deque(maxlen=1 << 18)

    def wall_now(self) -> float:
        """Emulated time from the wall clock alone (what `WallClock.now` returns)."""
        return WallClock.now(self)

    def _earliest(self) -> float:
        heap = self._heap
        while heap and heap[0][2].cancelled:
            heapq.heappop(heap)
        return heap[0][0] if heap else float("inf")

    def now(self) -> float:
        if self._pinned is not None:
            t = self._pinned
        else:
            t = min(WallClock.now(self), self._earliest())  # an overdue timer holds time back
        if t < self._last:
            t = self._last
        self._last = t
        return t

    def call_at(self, when: float, fn: Callable[[], None]) -> Timer:
        timer = Timer(max(when, self.now()), fn)
        heapq.heappush(self._heap, (timer.when, next(self._seq), timer))
        if timer.when < self._armed_for:
            self._arm(timer.when)
        return timer

    def fire_at(self, when: float, fn: Callable[[], None]) -> None:
        """A callback never cancelled (the `Clock` protocol's fast path in sim mode): here a `call_at`."""
        self.call_at(when, fn)

    def _arm(self, when: float) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed_for = when
        self._handle = self._loop.call_at(self.to_loop_time(when), self._run_due)

    def _run_due(self) -> None:
        """Run every timer that is due by the wall clock, in time order, each at its own time."""
        self._handle, self._armed_for = None, float("inf")
        heap = self._heap
        slack = 1e-9 * self.time_scale  # loop-time rounding
        try:
            while heap:
                when, _, timer = heap[0]
                if timer.cancelled:
                    heapq.heappop(heap)
                    continue
                wall = WallClock.now(self)  # read per timer: a callback before may have stalled the loop
                if when > wall + slack:
                    break
                heapq.heappop(heap)
                lag = max(0.0, wall - when)
                self.lags_s.append(lag)
                if lag > self.max_lag_s:
                    self.max_lag_s = lag
                self.events_run += 1
                self._pinned = max(when, self._last)
                try:
                    timer.fn()
                except Exception as exc:  # one failing callback must not stop the emulated clock
                    self._loop.call_exception_handler({"message": "emulator timer callback failed",
                                                       "exception": exc})
                finally:
                    self._pinned = None
        finally:
            earliest = self._earliest()
            if earliest < float("inf"):
                self._arm(earliest)

    def stop(self) -> None:
        """Fire no more timers: the deployment was closed (its requests in flight recorded), and a
        timer of theirs still pending (a decode step, a transfer) would end one of them a second time."""
        if self._handle is not None:
            self._handle.cancel()
        self._handle, self._armed_for = None, float("inf")
        for _, _, timer in self._heap:
            timer.cancel()
        self._heap.clear()

    def lag_wall_ms(self, q: float) -> float:
        """The q-th percentile of timer lag in wall milliseconds (NaN before any timer fired)."""
        if not self.lags_s:
            return float("nan")
        return float(np.percentile(np.asarray(self.lags_s), q)) / self.time_scale * 1e3
