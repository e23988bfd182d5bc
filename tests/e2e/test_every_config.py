"""Every YAML of every config group composes with the schemas, and what it names can be built.

The config groups are the registry (`_target_`), so a broken option must fail here, not in a
user's run. Experiments are composed by tests/e2e/test_sweeps.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import get_method, instantiate

from harness.costmodel import build_profile
from harness.schema import register_configs
from harness.workload import instantiate_workload

CONF = Path(__file__).resolve().parents[2] / "conf"
# group -> how to select one of its options on the command line
SELECT = {
    "workload": "workload={}",
    "model": "model={}",
    "deployment": "deployment={}",
    "link": "link={}",
    "loadgen": "loadgen={}",
    "planner": "planner={}",
    "analysis": "analysis={}",
    "faults": "faults={}",
    "router": "router@deployment.router={}",
    "hardware": "hardware@deployment.local.hardware={}",
}
OPTIONS = [(group, path.stem) for group in SELECT for path in sorted((CONF / group).glob("*.yaml"))]


def _compose(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return compose("config", overrides=list(overrides))


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}/{o}" for g, o in OPTIONS])
def test_option_composes_and_builds(group, option):
    cfg = _compose(SELECT[group].format(option))
    if group == "workload":
        assert instantiate_workload(cfg.workload).name == cfg.workload.name
    elif group == "router":
        assert callable(instantiate(cfg.deployment.router).route)
    elif group in ("model", "hardware"):
        hardware = cfg.deployment.local.hardware
        profile = build_profile(cfg.model, hardware, gpus_per_instance=16)
        assert profile.prefill_s(8192) > 0 and profile.kv_bytes(8192) > 0
    elif group == "deployment" and cfg.deployment.get("builder"):  # a kind with its own builder (aggregated)
        assert callable(get_method(cfg.deployment.builder)) and cfg.deployment.instances >= 1
    elif group == "deployment":
        assert cfg.deployment.local.instances >= 1 and cfg.deployment.router is not None


def test_every_group_folder_is_covered():
    folders = {p.name for p in CONF.iterdir() if p.is_dir()} - {"experiment", "gates", "hydra", "local"}
    assert folders <= set(SELECT), f"add {sorted(folders - set(SELECT))} to SELECT"
