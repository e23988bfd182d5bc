"""The recorded aggregate rate of a link and the egress time series integrated from it.

The log is a piecewise-constant function: (t_s, rate Gbps, capacity Gbps) change points, each
holding until the next. Points are stored in `array('d')` (8 bytes a value, not a Python float
object each): the same doubles at about a third of the memory of lists.
"""

from __future__ import annotations

import math
from array import array

import numpy as np

from harness.deploy.link_inputs import number
from harness.errors import InputError


class RateLog:
    """Change points of a link's aggregate rate and capacity, both in Gbps."""

    __slots__ = ("_t", "_rate", "_cap")

    def __init__(self) -> None:
        self._t = array("d")
        self._rate = array("d")
        self._cap = array("d")

    def record(self, now: float, rate_gbps: float, cap_gbps: float) -> None:
        """Note the state from `now` on: replaces a point at the same time, skips a repeat."""
        if not self._t:
            unchanged = False
        elif self._t[-1] == now:
            self._rate[-1], self._cap[-1] = rate_gbps, cap_gbps
            unchanged = True
        else:
            unchanged = (self._rate[-1], self._cap[-1]) == (rate_gbps, cap_gbps)
        if not unchanged:
            self._t.append(now)
            self._rate.append(rate_gbps)
            self._cap.append(cap_gbps)

    def change_points(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Recorded (t_s, aggregate Gbps, capacity Gbps) as copies; each holds until the next t_s."""
        return (np.array(self._t, dtype=np.float64), np.array(self._rate, dtype=np.float64),
                np.array(self._cap, dtype=np.float64))

    def egress_series(self, t_end: float, bin_s: float, *,
                      t_start: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Bin start times, mean egress Gbps and mean capacity Gbps per bin of `bin_s`.

        Bins cover [t_start, t_end) (the last one may run past t_end). Means are exact
        integrals of the recorded piecewise-constant rates; after the last point its state is
        assumed to persist. Before the first point the rate is 0.
        """
        bin_s = number("egress_series.bin_s", bin_s, strict=True)
        t_end = number("egress_series.t_end", t_end, minimum=-math.inf)
        if t_end <= t_start:
            raise InputError(f"egress_series.t_end must be > t_start={t_start:g}, got {t_end:g}")
        n_bins = max(1, math.ceil((t_end - t_start) / bin_s - 1e-9))
        edges = t_start + bin_s * np.arange(n_bins + 1)
        t, rate, cap = self.change_points()
        egress = np.diff(step_integral(t, rate, edges, before=0.0)) / bin_s
        capacity = np.diff(step_integral(t, cap, edges, before=cap[0])) / bin_s
        return edges[:-1], egress, capacity


def step_integral(t: np.ndarray, y: np.ndarray, x: np.ndarray, *, before: float) -> np.ndarray:
    """Integral from t[0] of the step function y (y[k] on [t[k], t[k+1])), evaluated at x.

    Left of t[0] the function is `before` (integral negative there, so differences stay exact).
    """
    cum = np.concatenate(([0.0], np.cumsum(y[:-1] * np.diff(t))))
    k = np.searchsorted(t, x, side="right") - 1
    inside = k >= 0
    kk = np.where(inside, k, 0)
    return np.where(inside, cum[kk] + y[kk] * (x - t[kk]), before * (x - t[0]))
