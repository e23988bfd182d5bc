"""Arrival processes: rates, burstiness (inter-arrival CV) and trace replay."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.errors import InputError
from harness.workload.arrivals import Constant, Gamma, Poisson, Replay

N = 200_000


def _cv_tolerance(cv: float) -> float:
    """4 standard errors of a sample CV of N gamma gaps (kurtosis 3 + 6 cv^2)."""
    kurtosis = 3 + 6 * cv * cv
    return 4 * cv * math.sqrt((kurtosis - 1) / (4 * N) + 1 / (2 * N))


@pytest.mark.parametrize(("process", "cv"), [
    (Poisson(3.0), 1.0),
    (Gamma(3.0, 0.5), 0.5),
    (Gamma(3.0, 2.0), 2.0),
    (Gamma(3.0, 4.0), 4.0),
])
def test_rate_and_cv(process, cv):
    """Mean gap 1/rate and gap CV as configured, within sampling error of 200k gaps."""
    t = process.offsets(N, np.random.default_rng(7))
    gaps = np.diff(t)
    assert t[0] == 0.0 and np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(1 / 3.0, rel=4 * cv / math.sqrt(N))
    assert gaps.std() / gaps.mean() == pytest.approx(cv, abs=_cv_tolerance(cv))


def test_constant_is_evenly_spaced():
    assert Constant(4.0).offsets(5, np.random.default_rng(0)).tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]


@pytest.mark.parametrize("process", [Poisson(1.0), Gamma(1.0, 3.0), Constant(1.0), Replay(speedup=2.0)])
def test_with_rate_returns_a_copy_at_the_new_rate(process):
    faster = process.with_rate(5.0)
    assert type(faster) is type(process) and faster.rate_rps == 5.0
    assert process.rate_rps != 5.0
    if isinstance(process, Gamma):
        assert faster.cv == 3.0


def test_same_rng_seed_same_offsets():
    a = Gamma(2.0, 2.0).offsets(100, np.random.default_rng(3))
    b = Gamma(2.0, 2.0).offsets(100, np.random.default_rng(3))
    c = Gamma(2.0, 2.0).offsets(100, np.random.default_rng(4))
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_replay_rebases_and_speeds_up():
    t, moved = Replay(speedup=2.0).retime(np.array([10.0, 12.0, 20.0]))
    assert t.tolist() == [0.0, 1.0, 5.0] and moved == 0


def test_replay_rate_rescales_to_n_over_duration():
    t, _ = Replay(rate_rps=2.0).retime(np.array([0.0, 1.0, 3.0, 10.0]))
    assert len(t) / t[-1] == pytest.approx(2.0)
    assert t.tolist() == pytest.approx([0.0, 0.2, 0.6, 2.0])


def test_replay_spreads_ticks_evenly_and_never_past_the_next_stamp():
    t, moved = Replay(spread_ticks_s=3.0).retime(np.array([0, 0, 0, 3, 3, 6, 7, 7], dtype=float))
    assert t.tolist() == pytest.approx([0, 1, 2, 3, 4.5, 6, 7, 8.5])
    assert moved == 4  # every request but the first of its tick
    t, _ = Replay(spread_ticks_s=3.0).retime(np.array([0, 0, 1], dtype=float))
    assert t.tolist() == pytest.approx([0, 0.5, 1])


@pytest.mark.parametrize(("make", "text"), [
    (lambda: Poisson(0), "Poisson.rate_rps"),
    (lambda: Poisson(float("nan")), "Poisson.rate_rps"),
    (lambda: Gamma(1.0, 0), "Gamma.cv"),
    (lambda: Constant(-1), "Constant.rate_rps"),
    (lambda: Replay(speedup=2.0, rate_rps=3.0), "not both"),
    (lambda: Replay(spread_ticks_s=0), "spread_ticks_s"),
    (lambda: Replay().offsets(3, np.random.default_rng(0)), "trace timestamps"),
])
def test_bad_parameters_raise_input_error(make, text):
    with pytest.raises(InputError, match=text):
        make()
