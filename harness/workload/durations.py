"""Time distributions in seconds (think and tool time between the turns of an agentic session)."""

from __future__ import annotations

import math

import numpy as np

from harness.errors import InputError


def _positive(owner: str, field: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise InputError(f"{owner}.{field} must be a finite number of seconds > 0, got {value!r}")
    return float(value)


class FixedTime:
    """Always `value_s` seconds."""

    def __init__(self, value_s: float) -> None:
        self.value_s = _positive("FixedTime", "value_s", value_s)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.full(n, self.value_s)

    def mean(self) -> float:
        return self.value_s


class ExponentialTime:
    """Exponential with mean `mean_s` (memoryless think time)."""

    def __init__(self, mean_s: float) -> None:
        self.mean_s = _positive("ExponentialTime", "mean_s", mean_s)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.exponential(self.mean_s, size=n)

    def mean(self) -> float:
        return self.mean_s


class LogNormalTime:
    """Log-normal with the given median and log-space sigma: mostly quick tool calls, a long tail."""

    def __init__(self, median_s: float, sigma: float) -> None:
        self.median_s = _positive("LogNormalTime", "median_s", median_s)
        self.sigma = _positive("LogNormalTime", "sigma", sigma)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self.median_s * np.exp(self.sigma * rng.standard_normal(n))

    def mean(self) -> float:
        return self.median_s * math.exp(self.sigma ** 2 / 2)
