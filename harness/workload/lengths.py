"""Token-length distributions: sampled for traces, discretised exactly for the planner.

Each distribution has `sample(n, rng)` (integer token counts), `mean()` and `grid(n_points)`, a
discretisation `(values, weights)` of the exact distribution whose weights sum to 1. `chunkable`
(True for all of these) promises that `sample(a, rng)` then `sample(b, rng)` gives `sample(a + b, rng)`:
each value takes its own draws, so a long workload may draw its lengths a chunk at a time. The planner
integrates over the grid (P(L>t), E[L|L>t]) instead of sampling, so its figures carry no sampling
noise. Configs build them through `_target_`; constructors validate and raise InputError.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from harness.errors import InputError

DEFAULT_GRID_POINTS = 20_000
_TRANSFORM_CHUNK = 65_536  # samples transformed at once (bounds the temporaries of a large draw)


def _positive_int(owner: str, field: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(f"{owner}.{field} must be a positive integer number of tokens, got {value!r}")
    return int(value)


def _normal_mass(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """P(lo < Z < hi) for a standard normal, differenced on the side where it keeps precision."""
    from scipy.special import ndtr  # scipy.special only where used: it costs ~0.3 s to import

    upper_tail = lo > 0
    return np.asarray(np.where(upper_tail, ndtr(-lo) - ndtr(-hi), ndtr(hi) - ndtr(lo)))


def _log_gauss_mass(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log P(a < Z < b), computed in the left tail (the right one by symmetry), as scipy.stats does."""
    from scipy.special import log1p, log_ndtr, logsumexp, ndtr

    out = np.full_like(a, fill_value=np.nan, dtype=np.complex128)
    left, right = b <= 0, a > 0
    central = ~(left | right)
    for case, lo, hi in ((left, a, b), (right, -b, -a)):
        if lo[case].size:
            out[case] = logsumexp([log_ndtr(hi[case]), log_ndtr(lo[case]) + np.pi * 1j], axis=0)
    if a[central].size:
        out[central] = log1p(-ndtr(a[central]) - ndtr(-b[central]))
    return np.real(out)


def truncnorm_ppf(q: np.ndarray, a: float, b: float) -> np.ndarray:
    """Quantiles of a standard normal truncated to [a, b]: scipy.stats.truncnorm.ppf(q, a, b) to the
    last bit (the same steps, inverting in the tail away from the truncation), without importing
    scipy.stats (~1 s at start-up)."""
    from scipy.special import log_ndtr, logsumexp, ndtri_exp

    q = np.asarray(q, dtype=np.float64)
    out = np.full(q.shape, np.nan)
    out[q == 0], out[q == 1] = a, b
    inside = (q > 0) & (q < 1)
    if np.any(inside):
        qi = q[inside]
        av, bv = np.broadcast_arrays(np.full(qi.shape, a), np.full(qi.shape, b))
        log_mass = _log_gauss_mass(av, bv)
        if a < 0:  # invert the lower tail: Phi(x) = Phi(a) + q * mass
            x = ndtri_exp(logsumexp([log_ndtr(av), np.log(qi) + log_mass], axis=0))
        else:  # invert the upper tail: 1 - Phi(x) = Phi(-b) + (1 - q) * mass
            x = -ndtri_exp(logsumexp([log_ndtr(-bv), np.log1p(-qi) + log_mass], axis=0))
        out[inside] = x
    return out


class TruncatedLogNormal:
    """exp(N(mu, sigma^2)) conditioned on [low, high] (the exact conditional law, not clipping).

    The paper's workload is mu=9.90, sigma=1.00 on [128, 131072]. Samples are rounded to the
    nearest integer; `grid` and `mean` describe the continuous law (the rounding moves the mean by
    far less than a token).
    """

    chunkable = True

    def __init__(self, mu: float, sigma: float, low: float, high: float) -> None:
        if not (math.isfinite(mu) and math.isfinite(sigma) and sigma > 0):
            raise InputError(f"TruncatedLogNormal.sigma must be > 0 and mu finite, got mu={mu!r}, sigma={sigma!r}")
        if not (0 < low < high and math.isfinite(high)):
            raise InputError(f"TruncatedLogNormal needs 0 < low < high (tokens), got low={low!r}, high={high!r}")
        self.mu, self.sigma, self.low, self.high = float(mu), float(sigma), float(low), float(high)
        self._a = (math.log(self.low) - self.mu) / self.sigma
        self._b = (math.log(self.high) - self.mu) / self.sigma
        if float(_normal_mass(np.array(self._a), np.array(self._b))) <= 0:
            raise InputError(f"TruncatedLogNormal: [low, high] = [{low}, {high}] holds no mass for mu={mu}, "
                             f"sigma={sigma}")

    def __repr__(self) -> str:
        return f"TruncatedLogNormal(mu={self.mu}, sigma={self.sigma}, low={self.low:g}, high={self.high:g})"

    def _z_ppf(self, q: np.ndarray) -> np.ndarray:
        return truncnorm_ppf(q, self._a, self._b)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        q = rng.random(n)
        out = np.empty(n, dtype=np.int64)
        # Elementwise, so transformed a slice at a time (the same values; scipy's ppf makes several
        # temporaries the size of its input, which for a million requests would be 100s of MB).
        for lo in range(0, n, _TRANSFORM_CHUNK):
            x = np.exp(self.mu + self.sigma * self._z_ppf(q[lo:lo + _TRANSFORM_CHUNK]))
            # Rounding can only step outside [low, high] by less than one token at the edges.
            out[lo:lo + _TRANSFORM_CHUNK] = np.clip(np.rint(x), math.ceil(self.low), math.floor(self.high))
        return out

    def mean(self) -> float:
        s = self.sigma
        num = _normal_mass(np.array(self._a - s), np.array(self._b - s))
        den = _normal_mass(np.array(self._a), np.array(self._b))
        return float(math.exp(self.mu + s * s / 2) * num / den)

    def grid(self, n_points: int = DEFAULT_GRID_POINTS) -> tuple[np.ndarray, np.ndarray]:
        """Equal-probability bins; each value is the exact conditional mean of its bin.

        So sum(values * weights) is the exact mean and any tail expectation is exact up to one
        bin (1/n_points of probability).
        """
        edges = self._z_ppf(np.linspace(0.0, 1.0, n_points + 1))
        edges[0], edges[-1] = self._a, self._b
        mass = _normal_mass(edges[:-1], edges[1:])
        s = self.sigma
        partial = math.exp(self.mu + s * s / 2) * _normal_mass(edges[:-1] - s, edges[1:] - s)
        keep = mass > 0
        values = partial[keep] / mass[keep]
        weights = mass[keep] / mass[keep].sum()
        return values, weights


class Fixed:
    """Every request has exactly `value` tokens (the paper's output length: 1024)."""

    chunkable = True

    def __init__(self, value: int) -> None:
        self.value = _positive_int("Fixed", "value", value)

    def __repr__(self) -> str:
        return f"Fixed({self.value})"

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)

    def mean(self) -> float:
        return float(self.value)

    def grid(self, n_points: int = DEFAULT_GRID_POINTS) -> tuple[np.ndarray, np.ndarray]:
        return np.array([float(self.value)]), np.array([1.0])


class Uniform:
    """Integers uniform on [low, high], both included."""

    chunkable = True

    def __init__(self, low: int, high: int) -> None:
        self.low = _positive_int("Uniform", "low", low)
        self.high = _positive_int("Uniform", "high", high)
        if self.high < self.low:
            raise InputError(f"Uniform needs low <= high, got low={low}, high={high}")

    def __repr__(self) -> str:
        return f"Uniform({self.low}, {self.high})"

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.integers(self.low, self.high + 1, size=n, dtype=np.int64)

    def mean(self) -> float:
        return (self.low + self.high) / 2

    def grid(self, n_points: int = DEFAULT_GRID_POINTS) -> tuple[np.ndarray, np.ndarray]:
        k = self.high - self.low + 1
        bounds = np.unique(np.round(np.linspace(0, k, min(k, n_points) + 1)).astype(np.int64))
        sizes = np.diff(bounds)
        values = self.low + (bounds[:-1] + bounds[1:] - 1) / 2
        return values.astype(np.float64), sizes / k


class Empirical:
    """Draws from a list of observed lengths (optionally weighted), e.g. a measured histogram."""

    chunkable = True

    def __init__(self, values: Sequence[int], weights: Sequence[float] | None = None) -> None:
        vals = [_positive_int("Empirical", "values[]", v) for v in values]
        if not vals:
            raise InputError("Empirical.values must not be empty")
        if weights is None:
            w = np.ones(len(vals))
        else:
            w = np.asarray(list(weights), dtype=np.float64)
            if w.shape != (len(vals),) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
                raise InputError(f"Empirical.weights must be {len(vals)} non-negative numbers with a positive sum")
        self.values = np.asarray(vals, dtype=np.int64)
        self.weights = w / w.sum()

    def __repr__(self) -> str:
        return f"Empirical({len(self.values)} values)"

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.choice(self.values, size=n, p=self.weights).astype(np.int64)

    def mean(self) -> float:
        return float(np.dot(self.values, self.weights))

    def grid(self, n_points: int = DEFAULT_GRID_POINTS) -> tuple[np.ndarray, np.ndarray]:
        values, inverse = np.unique(self.values, return_inverse=True)
        weights = np.bincount(inverse, weights=self.weights, minlength=len(values))
        return values.astype(np.float64), weights / weights.sum()
