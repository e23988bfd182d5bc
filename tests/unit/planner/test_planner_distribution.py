"""p(t), l_long(t), l_short(t) of a discrete law and of the paper's truncated log-normal."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import scipy  # scipy.stats and scipy.integrate import on first use (~0.7 s): only where these tests run

from harness.errors import InputError
from harness.planner import LengthDistribution


def test_split_of_a_two_point_law():
    d = LengthDistribution(np.array([3000.0, 1000.0]), np.array([3.0, 1.0]))  # unnormalised, unsorted
    p, q, long_, short = d.split(np.array([-np.inf, 999.0, 1000.0, 2999.0, 3000.0]))
    np.testing.assert_allclose(p, [1, 1, 0.75, 0.75, 0])  # L > t is strict: t = 3000 offloads nothing
    np.testing.assert_allclose(q, 1 - p)
    np.testing.assert_allclose(long_[:4], [2500, 2500, 3000, 3000])
    assert np.isnan(long_[4]) and np.isnan(short[0])
    np.testing.assert_allclose(short[2:], [1000, 1000, 2500])
    assert d.mean == 2500


@pytest.mark.parametrize("t", [5_000, 19_456, 60_000])
def test_paper_law_against_numerical_integration(paper_lengths, t):
    """The 20,000-point grid against scipy.integrate on the truncated log-normal density."""
    mu, sigma, lo, hi = 9.90, 1.00, 128, 131072
    law = scipy.stats.lognorm(s=sigma, scale=np.exp(mu))
    mass = law.cdf(hi) - law.cdf(lo)
    p_exact = (law.cdf(hi) - law.cdf(t)) / mass
    mean_long = scipy.integrate.quad(lambda x: x * law.pdf(x), t, hi, limit=200)[0] / mass / p_exact
    mean_short = scipy.integrate.quad(lambda x: x * law.pdf(x), lo, t, limit=200)[0] / mass / (1 - p_exact)
    p, _, long_, short = LengthDistribution(*paper_lengths).split(np.array([float(t)]))
    assert p[0] == pytest.approx(p_exact, abs=1e-4)
    assert long_[0] == pytest.approx(mean_long, rel=1e-3)
    assert short[0] == pytest.approx(mean_short, rel=1e-3)


@pytest.mark.parametrize(
    ("values", "weights", "message"),
    [
        ([1.0, 2.0], [1.0], "equal length"),
        ([], [], "empty"),
        ([1.0, -2.0], [1.0, 1.0], ">= 0"),
        ([1.0, 2.0], [0.0, 0.0], "sum to 0"),
        ([1.0, np.nan], [1.0, 1.0], "finite"),
    ],
)
def test_bad_distributions(values, weights, message):
    with pytest.raises(InputError, match=message):
        LengthDistribution(np.array(values), np.array(weights))


_MEAN = """
import numpy as np
from harness.planner import LengthDistribution
rng = np.random.default_rng(7)
values, weights = rng.lognormal(9.9, 1.0, 200_000), rng.random(200_000)
print(repr(LengthDistribution(values, weights).mean))
"""


def test_mean_is_the_same_whatever_blas_threads_the_machine_runs():
    """The plan's decode context (Eq. 5) starts from the mean length: it must not depend on how many cores
    the machine has. A BLAS dot product over 200,000 points splits the sum across OpenBLAS's threads (one
    per core), and the one- and two-thread sums differed in the last bit on a 2-core machine."""
    outs = set()
    for threads in ("1", "2"):
        env = {**os.environ, "OPENBLAS_NUM_THREADS": threads}
        outs.add(subprocess.run([sys.executable, "-c", _MEAN], env=env, capture_output=True, text=True,
                                check=True, timeout=120).stdout)
    assert len(outs) == 1, outs
