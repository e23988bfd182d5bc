"""One transfer in progress on a `harness.deploy.link.Link` (the link moves it forward)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.deploy.link import Link

BYTES_PER_GBIT = 1e9 / 8
# A flow is done when fewer than _BYTE_EPS + _REL_BYTE_EPS * nbytes bytes remain.
_BYTE_EPS = 1e-6
_REL_BYTE_EPS = 1e-12


class Flow:
    """One transfer in progress on a `Link`. Read-only for callers.

    `finish_s` is when the last byte left (None until then); `on_done` runs at
    `finish_s + rtt_s/2`. `sent_bytes` and `rate_gbps` are evaluated at the clock's now().
    """

    __slots__ = ("_link", "nbytes", "start_s", "produce_s", "produce_end_s", "_produce_rate",
                 "_produce_t0", "_on_done", "_sent", "_rate", "_eps", "finish_s")

    def __init__(self, link: Link, nbytes: float, on_done: Callable[[], None], start_s: float,
                 produce_s: float) -> None:
        self._link = link
        self.nbytes = nbytes
        self.start_s = start_s
        self.produce_s = produce_s
        self.produce_end_s = start_s + produce_s
        self._produce_rate = nbytes / produce_s if produce_s > 0 else math.inf
        self._produce_t0 = start_s  # produced by t: _produce_rate * (t - _produce_t0) (Link.reproduce moves it)
        self._on_done = on_done
        self._sent = 0.0  # bytes sent as of link._t_last
        self._rate = 0.0  # bytes/s since link._t_last
        self._eps = _BYTE_EPS + _REL_BYTE_EPS * nbytes  # done when fewer bytes remain
        self.finish_s: float | None = None

    @property
    def done(self) -> bool:
        return self.finish_s is not None

    @property
    def sent_bytes(self) -> float:
        if self.finish_s is not None:
            return self.nbytes
        dt = self._link._clock.now() - self._link._t_last
        return min(self.nbytes, self._sent + self._rate * dt)

    @property
    def rate_gbps(self) -> float:
        return 0.0 if self.finish_s is not None else self._rate / BYTES_PER_GBIT
