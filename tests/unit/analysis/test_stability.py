"""The stability verdict a capacity search bisects on, on queues whose stability is known (Lindley's recursion)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.analysis.stability import MIN_REQUESTS, judge


def md1(rho: float, n: int, seed: int, service_s: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Arrivals and ends of a FIFO single server with Poisson arrivals at rho / service_s and fixed service."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(service_s / rho, n))
    ends = np.empty(n)
    free = 0.0
    for i, a in enumerate(arrivals):
        free = max(free, a) + service_s
        ends[i] = free
    return arrivals, ends


@pytest.mark.parametrize("rho", [0.5, 0.8, 0.9])
def test_a_stable_queue_is_judged_stable(rho):
    arrivals, ends = md1(rho, 20_000, seed=1)
    verdict = judge(arrivals, ends, np.zeros(len(arrivals), bool))
    assert verdict.stable, verdict.reason
    assert verdict.goodput_ratio == pytest.approx(1.0, abs=0.01)


@pytest.mark.parametrize("rho", [1.05, 1.2, 2.0])
def test_an_unstable_queue_is_never_judged_stable(rho):
    for seed in range(20):
        arrivals, ends = md1(rho, 5_000, seed=seed)
        verdict = judge(arrivals, ends, np.zeros(len(arrivals), bool))
        assert not verdict.stable, (seed, verdict.reason)
        assert verdict.reason.startswith("unstable")


def test_requests_that_never_end_count_as_in_the_system():
    """A run cut off with requests still in flight (NaN ends) that pile up is unstable."""
    arrivals, ends = md1(0.5, 5_000, seed=2)
    ends[len(ends) // 2:] = np.nan  # from the middle on nothing ends
    assert not judge(arrivals, ends, np.zeros(len(arrivals), bool)).stable


def test_failures_are_no_goodput():
    """Requests that fail at once leave the system but are not goodput: 5% failed is under 99%."""
    arrivals, ends = md1(0.5, 10_000, seed=3)
    failed = np.zeros(len(arrivals), bool)
    failed[::20] = True
    verdict = judge(arrivals, ends, failed)
    assert not verdict.stable and "goodput under 99%" in verdict.reason
    assert verdict.goodput_ratio == pytest.approx(0.95, abs=0.01)


def test_too_few_requests_are_not_judged_stable():
    arrivals, ends = md1(0.5, MIN_REQUESTS, seed=4)  # the window holds about half of them
    verdict = judge(arrivals, ends, np.zeros(len(arrivals), bool))
    assert not verdict.stable and "too few requests" in verdict.reason
