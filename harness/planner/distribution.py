"""The uncached input length L as a discrete distribution, and its split at routing thresholds.

p(t) = P(L > t), l_long(t) = E[L | L > t], l_short(t) = E[L | L <= t] (paper Table 4), for a whole
vector of thresholds at once: prefix and suffix sums over the sorted support, then one
searchsorted. Tail masses come from suffix sums (not 1 - head) so small p keeps its precision.
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np

from harness.errors import InputError


class LengthDistribution:
    """Sorted support `values` (tokens) with probabilities `weights` (normalised to sum 1)."""

    def __init__(self, values: np.ndarray, weights: np.ndarray) -> None:
        v = np.asarray(values, dtype=float)
        w = np.asarray(weights, dtype=float)
        if v.ndim != 1 or w.ndim != 1 or v.shape != w.shape:
            raise InputError(f"length distribution: values and weights must be 1-D of equal length, got shapes "
                             f"{v.shape} and {w.shape}")
        if v.size == 0:
            raise InputError("length distribution is empty")
        if not (np.all(np.isfinite(v)) and np.all(np.isfinite(w))):
            raise InputError("length distribution: values and weights must be finite")
        if np.any(v < 0) or np.any(w < 0):
            raise InputError("length distribution: values and weights must be >= 0")
        total = w.sum()
        if total <= 0:
            raise InputError("length distribution: weights sum to 0")
        order = np.argsort(v, kind="stable")
        self.values = v[order]
        self.weights = w[order] / total
        self._head_w = np.concatenate([[0.0], np.cumsum(self.weights)])
        self._tail_w = np.concatenate([np.cumsum(self.weights[::-1])[::-1], [0.0]])
        self._head_w /= self._head_w[-1]
        self._tail_w /= self._tail_w[0]

    @property
    def mean(self) -> float:
        """E[L], correctly rounded (`math.fsum`): the same on every machine. A BLAS dot product
        (`weights @ values`) splits long vectors across as many threads as the machine has cores, and
        the plan (Eq. 5's decode context) then changed in its last bits with the core count."""
        return math.fsum((self.weights * self.values).tolist())

    def _index(self, thresholds: np.ndarray) -> np.ndarray:
        """Number of support points <= t, for each t."""
        return np.searchsorted(self.values, np.asarray(thresholds, dtype=float), side="right")

    def offload_fraction(self, thresholds: np.ndarray) -> np.ndarray:
        """p(t) = P(L > t)."""
        return cast(np.ndarray, self._tail_w[self._index(thresholds)])

    def split(self, thresholds: np.ndarray, f_values: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(p, 1-p, E[f(L) | L > t], E[f(L) | L <= t]) per threshold; f = identity by default.

        Conditional means over an empty side are NaN (the caller masks them by p == 0 or p == 1).
        """
        f = self.values if f_values is None else np.asarray(f_values, dtype=float)
        fw = f * self.weights
        head_f = np.concatenate([[0.0], np.cumsum(fw)])
        tail_f = np.concatenate([np.cumsum(fw[::-1])[::-1], [0.0]])
        idx = self._index(thresholds)
        p, q = self._tail_w[idx], self._head_w[idx]
        with np.errstate(invalid="ignore", divide="ignore"):
            long_mean = np.where(p > 0, tail_f[idx] / p, np.nan)
            short_mean = np.where(q > 0, head_f[idx] / q, np.nan)
        return p, q, long_mean, short_mean
