"""The link's own byte counters, sampled while the testbed serves: egress Gbps and the router's view of the link.

The remote agent reads /sys/class/net/<dev>/statistics/tx_bytes inside the remote namespace (GET /counters);
the monitor polls it every `sample_s` on the router's loop and keeps (monotonic ns, tx_bytes) pairs. The
veth counts each GSO super-frame once (payload plus one set of headers, ~0.1% over the payload), so a
saturated link reads ~0.956 x the tbf rate: the rest is per-frame headers tbf charges but this counter omits.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import aiohttp
import numpy as np


class LinkMonitor:
    """Samples of the shaped device's tx_bytes, and the KV bytes the router has handed to the link."""

    def __init__(self, counters_url: str, dev: str, capacity_gbps: float, sample_s: float) -> None:
        self.counters_url, self.dev = counters_url, dev
        self.capacity_gbps, self.sample_s = capacity_gbps, sample_s
        self.samples: list[tuple[int, int]] = []
        self.in_flight_bytes = 0  # KV files handed to the link and not yet acked
        self._task: asyncio.Task | None = None

    async def read(self, session: aiohttp.ClientSession) -> int | None:
        try:
            async with session.get(self.counters_url, timeout=aiohttp.ClientTimeout(total=2.0)) as resp:
                data = await resp.json()
            return int(data[self.dev]["tx_bytes"])
        except (aiohttp.ClientError, TimeoutError, KeyError, ValueError):
            return None  # a missed sample (the agent busy, a fault): the next one spans the gap

    async def _loop(self, session: aiohttp.ClientSession) -> None:
        next_ns = time.monotonic_ns()
        while True:
            value = await self.read(session)
            if value is not None:
                self.samples.append((time.monotonic_ns(), value))
            next_ns += int(self.sample_s * 1e9)
            await asyncio.sleep(max(0.0, (next_ns - time.monotonic_ns()) / 1e9))

    def start(self, session: aiohttp.ClientSession) -> None:
        self._task = asyncio.create_task(self._loop(session))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def recent_gbps(self, window_s: float = 1.0) -> float:
        """Egress over the last `window_s` of samples (0 before two samples exist)."""
        if len(self.samples) < 2:
            return 0.0
        t_end, b_end = self.samples[-1]
        start = next((s for s in reversed(self.samples) if t_end - s[0] >= window_s * 1e9), self.samples[0])
        t, b = start
        return (b_end - b) * 8 / max(t_end - t, 1) if t_end > t else 0.0

    def utilisation(self) -> float:
        return self.recent_gbps() / self.capacity_gbps if self.capacity_gbps > 0 else 0.0

    def backlog_s(self) -> float:
        """KV bytes handed to the link and not yet acked, in seconds at the link's rate."""
        return self.in_flight_bytes * 8 / (self.capacity_gbps * 1e9) if self.capacity_gbps > 0 else 0.0


def egress_per_bin(samples: list[tuple[int, int]], t0_ns: int, edges_s: np.ndarray) -> np.ndarray:
    """Gbps in each [edges[i], edges[i+1]) of the run clock (seconds after t0_ns), from counter samples:
    the counter is interpolated linearly at every edge, so bytes are split between bins by time."""
    n = len(edges_s) - 1
    if len(samples) < 2 or n < 1:
        return np.full(max(n, 0), np.nan)
    t = (np.array([s[0] for s in samples], dtype=float) - t0_ns) / 1e9
    b = np.array([s[1] for s in samples], dtype=float)
    at = np.interp(edges_s, t, b)
    out = np.diff(at) * 8 / 1e9 / np.diff(edges_s)
    outside = (edges_s[1:] <= t[0]) | (edges_s[:-1] >= t[-1])
    out[outside] = np.nan  # no sample spans the bin
    return out
