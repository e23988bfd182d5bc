"""Compose real configs and run the emulator in virtual time."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from harness.runs.sim import run_sim
from harness.schema import register_configs

CONF = str(Path(__file__).resolve().parents[2] / "conf")


def compose_cfg(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return compose("config", overrides=["loadgen.progress=false", *overrides])


@pytest.fixture
def sim():
    def run(*overrides: str):
        cfg = compose_cfg(*overrides)
        return cfg, run_sim(cfg)

    return run
