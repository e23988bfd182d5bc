"""The live emulator's clock: the wall clock (scaled), with timer lag measured but not leaked.

`LoopClock` fires each timer on the asyncio loop and lets its callback read the *actual* time, so
every millisecond the host loop is late becomes emulated service time: a prefill that ends 1 ms
late (x time_scale) starts the next one late, and at high utilisation queues grow from host jitter
alone. `ScheduledLoopClock` runs each timer's callback at its *scheduled* emulated time instead
(time still never runs backwards), so the emulated timeline is the one sim mode computes and the
host's lateness is what it really is, a delivery delay: it is measured (`lags_s`, `max_lag_s`) and
a run whose lag exceeds `server.max_lag_ms` is marked invalid.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from harness.clock import LoopClock, Timer


class ScheduledLoopClock(LoopClock):
    def __init__(self, loop, time_scale: float = 1.0) -> None:
        super().__init__(loop, time_scale)
        self._pinned: float | None = None  # the running timer's scheduled time
        self._last = 0.0  # latest time handed out (keeps now() monotonic)
        # Emulated seconds each timer fired late; the most recent ones only, so a long-running
        # server's memory stays flat.
        self.lags_s: deque[float] = deque(maxlen=1 << 18)

    def wall_now(self) -> float:
        """Emulated time from the wall clock alone (what `LoopClock.now` returns)."""
        return LoopClock.now(self)

    def now(self) -> float:
        t = self._pinned if self._pinned is not None else LoopClock.now(self)
        if t < self._last:
            t = self._last
        self._last = t
        return t

    def call_at(self, when: float, fn: Callable[[], None]) -> Timer:
        timer = Timer(max(when, self.now()), fn)

        def fire() -> None:
            if timer.cancelled:
                return
            lag = max(0.0, LoopClock.now(self) - timer.when)
            self.lags_s.append(lag)
            if lag > self.max_lag_s:
                self.max_lag_s = lag
            self.events_run += 1
            outer, self._pinned = self._pinned, timer.when
            try:
                fn()
            finally:
                self._pinned = outer

        self._loop.call_at(self.to_loop_time(timer.when), fire)
        return timer

    def lag_wall_ms(self, q: float) -> float:
        """The q-th percentile of timer lag in wall milliseconds (NaN before any timer fired)."""
        if not self.lags_s:
            return float("nan")
        return float(np.percentile(np.asarray(self.lags_s), q)) / self.time_scale * 1e3
