"""The load generator's pacer, injected: `now_ns()` and `sleep_until(t_ns)` on absolute targets.

A `Pacer` is not the emulator's `harness.clock.Clock` (`now()`/`call_at()` in float seconds, the one
clock protocol of the deployment code): it only tells monotonic time and waits for it.

`MonotonicClock` is the real one (the monotonic clock asyncio's loop also uses, so loop times and
our stamps share one base). `FakeClock` jumps to each target at once, for unit tests that check
what was scheduled without waiting for it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Pacer(Protocol):
    def now_ns(self) -> int: ...

    async def sleep_until(self, t_ns: int) -> None: ...


class MonotonicClock:
    """Wall time from `time.monotonic_ns`.

    Implementation note: asyncio wakes a timer on the first loop turn at or after its deadline, and
    epoll rounds waits up to whole milliseconds, so a send is up to ~1 ms late on an idle loop. That
    lateness is measured per request, not hidden.
    """

    def now_ns(self) -> int:
        return time.monotonic_ns()

    async def sleep_until(self, t_ns: int) -> None:
        delay_s = (t_ns - time.monotonic_ns()) / 1e9
        if delay_s > 0:
            await asyncio.sleep(delay_s)


class FakeClock:
    """Time moves only when someone sleeps (to the later of now and the target) or calls `advance`."""

    def __init__(self, start_ns: int = 0) -> None:
        self.t_ns = start_ns

    def now_ns(self) -> int:
        return self.t_ns

    def advance(self, ns: int) -> None:
        self.t_ns += ns

    async def sleep_until(self, t_ns: int) -> None:
        self.t_ns = max(self.t_ns, t_ns)
        await asyncio.sleep(0)
