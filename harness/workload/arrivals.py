"""Open-loop arrival processes: when each request is sent, as offsets from the start of the run.

Each process has `offsets(n, rng)` (absolute, non-decreasing offsets in seconds; the first
request arrives at 0), `offset_chunks(n, rng, chunk)` (the same offsets a piece at a time, so a
long workload never holds them all) and `with_rate(rate_rps)`, a copy at another mean rate. That is how
`loadgen.rate_rps` sweeps one workload over offered loads without changing its lengths.
Closed-loop concurrency is not an arrival process; the load generator handles it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from harness.errors import InputError


def _check_rate(owner: str, rate_rps: float) -> float:
    if isinstance(rate_rps, bool) or not isinstance(rate_rps, (int, float)) or not (
            math.isfinite(rate_rps) and rate_rps > 0):
        raise InputError(f"{owner}.rate_rps must be a finite number > 0, got {rate_rps!r}")
    return float(rate_rps)


def _from_gaps(gaps: np.ndarray) -> np.ndarray:
    """Offsets with the first request at 0 and the given n-1 inter-arrival gaps after it."""
    return np.concatenate(([0.0], np.cumsum(gaps[:-1]))) if len(gaps) else np.zeros(0)


def _chunks_from_gaps(draw: Callable[[int, np.random.Generator], np.ndarray], n: int, rng: np.random.Generator,
                      chunk: int) -> Iterator[np.ndarray]:
    """`_from_gaps(draw(n, rng))` a chunk at a time, to the last bit.

    Implementation note: numpy draws each gap from the generator in turn, so `chunk` gaps at a time
    are the same gaps; the running sum restarts from the carried offset (`[carry, g0, g1, ...]`
    accumulated left to right, as np.cumsum does), so every offset is the same sum in the same order.
    """
    carry = 0.0
    for lo in range(0, n, chunk):
        summed = np.cumsum(np.concatenate(([carry], draw(min(chunk, n - lo), rng))))
        carry = float(summed[-1])
        yield summed[:-1]


@dataclass(frozen=True)
class Poisson:
    """Exponential inter-arrival gaps at `rate_rps` (inter-arrival CV 1)."""

    rate_rps: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate_rps", _check_rate("Poisson", self.rate_rps))

    def offsets(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return _from_gaps(self._gaps(n, rng))

    def offset_chunks(self, n: int, rng: np.random.Generator, chunk: int) -> Iterator[np.ndarray]:
        """`offsets(n, rng)` in consecutive pieces of at most `chunk` (the same values)."""
        return _chunks_from_gaps(self._gaps, n, rng, chunk)

    def _gaps(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.exponential(1.0 / self.rate_rps, size=n)

    def with_rate(self, rate_rps: float) -> Poisson:
        return Poisson(rate_rps)


@dataclass(frozen=True)
class Gamma:
    """Gamma inter-arrival gaps with mean 1/rate_rps and coefficient of variation `cv`.

    cv > 1 is bursty (clusters of near-simultaneous requests, then lulls), cv = 1 is Poisson and
    cv < 1 smoother than Poisson. ServeGen fits per-client windows with CVs from ~1 to ~6.
    """

    rate_rps: float
    cv: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate_rps", _check_rate("Gamma", self.rate_rps))
        if isinstance(self.cv, bool) or not isinstance(self.cv, (int, float)) or not (
                math.isfinite(self.cv) and self.cv > 0):
            raise InputError(f"Gamma.cv must be a finite number > 0, got {self.cv!r}")
        object.__setattr__(self, "cv", float(self.cv))

    def offsets(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return _from_gaps(self._gaps(n, rng))

    def offset_chunks(self, n: int, rng: np.random.Generator, chunk: int) -> Iterator[np.ndarray]:
        """`offsets(n, rng)` in consecutive pieces of at most `chunk` (the same values)."""
        return _chunks_from_gaps(self._gaps, n, rng, chunk)

    def _gaps(self, n: int, rng: np.random.Generator) -> np.ndarray:
        shape = 1.0 / (self.cv * self.cv)
        return rng.gamma(shape, 1.0 / (self.rate_rps * shape), size=n)

    def with_rate(self, rate_rps: float) -> Gamma:
        return Gamma(rate_rps, self.cv)


@dataclass(frozen=True)
class Constant:
    """Evenly spaced arrivals, 1/rate_rps apart: the paper's steady-state "uniform" arrivals."""

    rate_rps: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "rate_rps", _check_rate("Constant", self.rate_rps))

    def offsets(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return np.arange(n, dtype=np.float64) / self.rate_rps

    def offset_chunks(self, n: int, rng: np.random.Generator, chunk: int) -> Iterator[np.ndarray]:
        """`offsets(n, rng)` in consecutive pieces of at most `chunk` (the same values)."""
        for lo in range(0, n, chunk):
            yield np.arange(lo, min(lo + chunk, n), dtype=np.float64) / self.rate_rps

    def with_rate(self, rate_rps: float) -> Constant:
        return Constant(rate_rps)


@dataclass(frozen=True)
class Replay:
    """A trace's own timestamps, rebased so the first request arrives at 0.

    `speedup` divides every offset (2.0 replays twice as fast). `rate_rps`, when set, instead
    rescales the timestamps so that n / duration equals it (the same rate `harness-trace stats`
    reports), which is what a load sweep needs. `spread_ticks_s` spreads requests that share a
    timestamp evenly over the following tick (never past the next distinct timestamp): the Mooncake
    conversation trace stamps arrivals on a 3 s grid, which replayed raw is a burst of ~10
    requests every 3 s.
    """

    speedup: float = 1.0
    rate_rps: float | None = None
    spread_ticks_s: float | None = None

    def __post_init__(self) -> None:
        if isinstance(self.speedup, bool) or not isinstance(self.speedup, (int, float)) or not (
                math.isfinite(self.speedup) and self.speedup > 0):
            raise InputError(f"Replay.speedup must be a finite number > 0, got {self.speedup!r}")
        if self.rate_rps is not None:
            object.__setattr__(self, "rate_rps", _check_rate("Replay", self.rate_rps))
            if self.speedup != 1.0:
                raise InputError(f"Replay: set speedup ({self.speedup}) or rate_rps ({self.rate_rps}), not both")
        if self.spread_ticks_s is not None and not (
                isinstance(self.spread_ticks_s, (int, float)) and not isinstance(self.spread_ticks_s, bool)
                and math.isfinite(self.spread_ticks_s) and self.spread_ticks_s > 0):
            raise InputError(f"Replay.spread_ticks_s must be null or a number > 0, got {self.spread_ticks_s!r}")

    def offsets(self, n: int, rng: np.random.Generator) -> np.ndarray:
        raise InputError("Replay arrivals need trace timestamps: use them in a trace workload "
                         "(or choose Poisson, Gamma or Constant arrivals)")

    def with_rate(self, rate_rps: float) -> Replay:
        return dataclasses.replace(self, speedup=1.0, rate_rps=rate_rps)

    def retime(self, timestamps_s: np.ndarray) -> tuple[np.ndarray, int]:
        """Replay offsets for the trace's timestamps, and how many requests were moved by spreading."""
        t = np.asarray(timestamps_s, dtype=np.float64)
        if len(t) == 0:
            return t.copy(), 0
        t = t - t[0]
        moved = 0
        if self.spread_ticks_s is not None:
            t, moved = _spread_ticks(t, self.spread_ticks_s)
        if self.rate_rps is not None:
            duration_s = t[-1]
            if duration_s <= 0:
                raise InputError(f"Replay.rate_rps={self.rate_rps} needs a trace spanning some time, but all "
                                 f"{len(t)} timestamps are equal")
            t = t * (len(t) / duration_s) / self.rate_rps
        else:
            t = t / self.speedup
        return t, moved


def _spread_ticks(t: np.ndarray, tick_s: float) -> tuple[np.ndarray, int]:
    starts, first_index, counts = np.unique(t, return_index=True, return_counts=True)
    gaps = np.append(np.diff(starts), tick_s)
    width = np.minimum(gaps, tick_s)
    group = np.repeat(np.arange(len(starts)), counts)
    rank = np.arange(len(t)) - first_index[group]
    spread = starts[group] + rank * (width[group] / counts[group])
    return spread, int(np.count_nonzero(rank))
