"""Length distributions against the paper's workload figures (paper-facts 12.6) and exact integrals."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy  # scipy.stats and scipy.integrate import on first use (~0.7 s): only where these tests run

from harness.errors import InputError
from harness.workload.lengths import Empirical, Fixed, TruncatedLogNormal, Uniform

PAPER = TruncatedLogNormal(mu=9.90, sigma=1.00, low=128, high=131072)
T = 19_400
N_SAMPLES = 200_000


def _grid_stats(dist):
    values, weights = dist.grid()
    long = values > T
    cdf = np.cumsum(weights)
    return {
        "mean": float(values @ weights),
        "p_long": float(weights[long].sum()),
        "l_long": float(values[long] @ weights[long] / weights[long].sum()),
        "l_short": float(values[~long] @ weights[~long] / weights[~long].sum()),
        "p90": float(values[np.searchsorted(cdf, 0.9)]),
    }


@pytest.mark.parametrize(("key", "target", "rel_tol"), [
    ("mean", 27_486, 1e-4),
    ("p_long", 0.4957, 2e-4),
    ("l_long", 45_046, 1e-4),
    ("l_short", 10_224, 1e-4),
    ("p90", 62_410, 5e-4),
])
def test_paper_grid_matches_paper_facts(key, target, rel_tol):
    """The planner's grid reproduces the numerically integrated paper workload (paper-facts 12.6)."""
    assert _grid_stats(PAPER)[key] == pytest.approx(target, rel=rel_tol)


def test_grid_is_fine_and_normalised():
    values, weights = PAPER.grid()
    assert len(values) >= 20_000
    assert weights.sum() == pytest.approx(1.0, abs=1e-12)
    assert np.all(np.diff(values) > 0)
    assert values[0] >= 128 and values[-1] <= 131072


@pytest.mark.parametrize("dist", [PAPER, TruncatedLogNormal(9.9, 1.0, 20_000, 40_000),
                                  TruncatedLogNormal(4.0, 2.5, 1, 1_000_000)])
def test_mean_equals_numerical_integral(dist):
    """The closed-form conditional mean agrees with quadrature of the truncated density."""
    law = scipy.stats.lognorm(s=dist.sigma, scale=math.exp(dist.mu))
    mass = law.cdf(dist.high) - law.cdf(dist.low)
    first_moment, _ = scipy.integrate.quad(lambda x: x * law.pdf(x), dist.low, dist.high, limit=400)
    assert dist.mean() == pytest.approx(first_moment / mass, rel=1e-6)
    values, weights = dist.grid()
    assert values @ weights == pytest.approx(first_moment / mass, rel=1e-6)


@pytest.fixture(scope="module")
def paper_samples():
    return PAPER.sample(N_SAMPLES, np.random.default_rng(12345))


def test_samples_mean_within_sampling_error(paper_samples):
    """Sample mean within 4 standard errors of the paper's E[L] (sd taken from the exact grid)."""
    values, weights = PAPER.grid()
    sd = math.sqrt(weights @ (values - 27_486) ** 2)
    assert abs(paper_samples.mean() - 27_486) < 4 * sd / math.sqrt(N_SAMPLES)


@pytest.mark.parametrize(("threshold", "cdf"), [(19_199, 0.50), (19_400, 1 - 0.4957), (62_410, 0.90),
                                                (115_417, 0.99)])
def test_samples_cdf_at_paper_quantiles(paper_samples, threshold, cdf):
    """P(L <= paper quantile) within 4 binomial standard errors of its level (P50, P90, P99, t)."""
    tol = 4 * math.sqrt(cdf * (1 - cdf) / N_SAMPLES)
    assert np.mean(paper_samples <= threshold) == pytest.approx(cdf, abs=tol)


def test_truncation_is_conditional_not_clipping(paper_samples):
    """Clipping would pile 2.98% of the mass on 131072; the conditional law puts ~none there."""
    assert paper_samples.min() >= 128 and paper_samples.max() <= 131072
    assert np.mean(paper_samples == 131072) < 1e-4
    assert paper_samples.dtype == np.int64


def test_fixed_uniform_empirical():
    rng = np.random.default_rng(0)
    assert Fixed(1024).sample(5, rng).tolist() == [1024] * 5
    assert Fixed(1024).grid() == (pytest.approx([1024.0]), pytest.approx([1.0]))
    values, weights = Uniform(3, 6).grid()
    assert values.tolist() == [3, 4, 5, 6] and weights.tolist() == [0.25] * 4
    coarse_values, coarse_weights = Uniform(1, 1_000_000).grid(1000)
    assert len(coarse_values) == 1000 and coarse_values @ coarse_weights == pytest.approx(500_000.5)
    draws = Uniform(3, 6).sample(10_000, rng)
    assert set(draws.tolist()) == {3, 4, 5, 6}
    emp = Empirical([10, 20, 20], weights=[1, 1, 2])
    assert emp.mean() == pytest.approx(17.5)
    ev, ew = emp.grid()
    assert ev.tolist() == [10, 20] and ew.tolist() == [0.25, 0.75]
    assert set(emp.sample(1000, rng).tolist()) == {10, 20}


@pytest.mark.parametrize(("make", "field"), [
    (lambda: TruncatedLogNormal(9.9, 0.0, 128, 1000), "sigma"),
    (lambda: TruncatedLogNormal(9.9, 1.0, 1000, 128), "low"),
    (lambda: TruncatedLogNormal(9.9, 1.0, 0, 128), "low"),
    (lambda: Fixed(0), "Fixed.value"),
    (lambda: Fixed(1.5), "Fixed.value"),
    (lambda: Uniform(5, 3), "low <= high"),
    (lambda: Empirical([]), "Empirical.values"),
    (lambda: Empirical([1, 2], weights=[1]), "Empirical.weights"),
])
def test_bad_parameters_raise_input_error(make, field):
    with pytest.raises(InputError, match=field):
        make()
