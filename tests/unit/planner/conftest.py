"""Length grids and planner fixtures (configs come from tests/unit/conftest.py)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf


def lognormal_grid(mu: float = 9.90, sigma: float = 1.00, low: float = 128, high: float = 131072, n: int = 20_000):
    """(values, weights): n midpoint quantiles of the truncated log-normal (the paper's workload law).

    Built here with scipy, independently of harness.workload, so the planner is tested on its own.
    """
    import numpy as np
    from scipy import stats

    a, b = stats.norm.cdf((np.log(low) - mu) / sigma), stats.norm.cdf((np.log(high) - mu) / sigma)
    u = a + (np.arange(n) + 0.5) / n * (b - a)
    return np.exp(mu + sigma * stats.norm.ppf(u)), np.full(n, 1.0 / n)


@pytest.fixture(scope="session")
def paper_lengths():
    return lognormal_grid()


@pytest.fixture(scope="session")
def variant(compose_cfg):
    """variant(overrides, {dotted.key: value}) -> a mutable copy of the composed config with values set.

    Group choices (deployment=, model=) need composition; plain values are set on a copy, which is
    ~100x cheaper than composing again and reaches the planner the same way.
    """

    def _variant(overrides=(), updates=None):
        cfg = OmegaConf.create(OmegaConf.to_container(compose_cfg(list(overrides)), resolve=True))
        for key, value in (updates or {}).items():
            OmegaConf.update(cfg, key, value, force_add=True)
        return cfg

    return _variant


@pytest.fixture(scope="session")
def plan(variant, paper_lengths):
    """plan(overrides, updates, lengths=paper, mean_output_tokens=1024) -> Plan.to_dict() (or the Plan)."""
    from harness.planner import plan_deployment

    def _plan(overrides=(), updates=None, lengths=None, mean_output_tokens=1024.0, as_dict=True):
        cfg = variant(overrides, updates)
        values, weights = lengths if lengths is not None else paper_lengths
        result = plan_deployment(cfg.deployment, cfg.model, cfg.link, cfg.planner, values, weights,
                                 mean_output_tokens)
        return result.to_dict() if as_dict else result

    return _plan


@pytest.fixture(scope="session")
def lognormal():
    """lognormal(mu=..., sigma=..., ...) -> (values, weights), see lognormal_grid."""
    return lognormal_grid
