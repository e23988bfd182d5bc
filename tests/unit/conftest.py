"""Fixtures shared by the unit tests: configs composed from the repository's conf/."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.schema import register_configs

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")


@pytest.fixture(scope="session")
def compose_cfg():
    """compose_cfg(overrides) -> the root config, as `python -m harness <overrides>` would see it.

    Composition takes ~0.2 s, so results are cached per override list and made read-only.
    """
    register_configs()

    @functools.cache
    def _cached(overrides: tuple[str, ...]):
        with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
            cfg = compose("config", overrides=list(overrides))
        OmegaConf.set_readonly(cfg, True)
        return cfg

    return lambda overrides=(): _cached(tuple(overrides))


@pytest.fixture(scope="session")
def hardware(compose_cfg):
    """hardware[name] -> the composed hardware node (via a deployment that uses it)."""
    cfg = compose_cfg(["deployment=prfaas_pd"])
    return {"h200": cfg.deployment.prfaas.hardware, "h20": cfg.deployment.local.hardware,
            "b200": compose_cfg(["deployment=prfaas_pd", "hardware@deployment.prfaas.hardware=b200"])
            .deployment.prfaas.hardware,
            "rubin_cpx": compose_cfg(["deployment=prfaas_pd", "hardware@deployment.prfaas.hardware=rubin_cpx"])
            .deployment.prfaas.hardware}
