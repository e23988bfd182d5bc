"""Every YAML of every config group composes with the schemas, and what it names can be built.

The config groups are the registry (`_target_`), so a broken option must fail here, not in a
user's run. Experiments are composed by tests/e2e/test_sweeps.py.

Built the way a run builds it: each option, on the defaults for every other group, is run in sim
mode as `python -m harness` does (`run_sim`: the workload, the planner, the deployment with its
router, hardware, link and faults, the offer) with 2 requests, then summarised with the option's
analysis config; both requests must complete. A few options only run beside another choice, named
in COMPANIONS with the reason (as their own YAML says). The run also says it used what the option
names (deployment, workload, model, link capacity, router class, the faults' events fired).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import get_class, get_method, instantiate
from omegaconf import OmegaConf, open_dict

from harness.analysis.summary import summarize
from harness.clock import VirtualClock
from harness.costmodel import build_profile
from harness.deploy.build import build
from harness.runs.sim import run_sim
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
    "testbed": "testbed={}",
    "engine": "engine={}",  # a real engine's preset: a sim run composes and ignores it
    "router": "router@deployment.router={}",
    "hardware": "hardware@deployment.local.hardware={}",
}
OPTIONS = [(group, path.stem) for group in SELECT for path in sorted((CONF / group).glob("*.yaml"))]
# Options a run can only use beside another choice: (group, option) -> overrides, and why.
COMPANIONS = {
    # an aggregated engine's profile is model.profiles.<hardware> (cpu_local): only the measured model has one
    ("deployment", "aggregated"): ["model=random_llama_35m"],
    # the default model (1T parameters) does not fit 8 x cpu_local; the measured small model runs there
    ("hardware", "cpu_local"): ["model=random_llama_35m"],
    # conf/model/ring_25_1t.yaml: "At FP8 the weights need more than 8 x H20: plan it with
    # deployment.local.gpus_per_instance=16 on H20"
    ("model", "ring_25_1t"): ["deployment.local.gpus_per_instance=16"],
}
N_RUN = 2
_RUNS: dict[str, tuple] = {}  # one run per distinct composed config


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
    companions = COMPANIONS.get((group, option))
    if companions:
        cfg = _compose(SELECT[group].format(option), *companions)
    _run_as_a_run_does(group, cfg)


def _run_as_a_run_does(group: str, cfg) -> None:
    with open_dict(cfg):
        cfg.workload.num_requests = N_RUN
        cfg.loadgen.progress = False
    key = OmegaConf.to_yaml(cfg)  # a default option (prfaas_pd, h20, vpc_100g, ...) composes the default config
    if key not in _RUNS:
        result = run_sim(cfg)
        _RUNS[key] = result, summarize(result.requests, result.timeseries, result.meta, cfg.analysis)
    result, summary = _RUNS[key]
    assert (summary["n_requests"], summary["completed"], summary["failed"]) == (N_RUN, N_RUN, 0)
    meta = result.meta
    assert (meta["deployment"], meta["workload"], meta["model"]) == (cfg.deployment.name, cfg.workload.name,
                                                                     cfg.model.name)
    if group in ("router", "deployment") and not cfg.deployment.get("builder"):
        router = build(cfg, VirtualClock()).deployment.router
        assert type(router) is get_class(cfg.deployment.router._target_)
    if group == "link":
        assert meta["link_capacity_gbps"] == cfg.link.capacity_gbps and meta["n_prfaas"] > 0
    if group == "planner":
        assert meta["plan"]["lambda_max_rps"] > 0
    if group == "faults":  # every event it schedules ran: the run's clock went past the last one
        times = [e["t_s"] for e in cfg.faults.link_events] + [w[1] for w in cfg.faults.prfaas_outages]
        assert meta["stopped_at_s"] >= max(times, default=0.0)


def test_every_group_folder_is_covered():
    # scale/: an experiment's size of a deployment, chosen by the two together (test_scale_... below)
    folders = {p.name for p in CONF.iterdir() if p.is_dir()} - {"experiment", "gates", "hydra", "local", "scale"}
    assert folders <= set(SELECT), f"add {sorted(folders - set(SELECT))} to SELECT"


SCALES = sorted((p.parent.name, p.stem) for p in (CONF / "scale").glob("*/*.yaml"))


@pytest.mark.parametrize(("deployment", "experiment"), SCALES, ids=[f"{d}/{e}" for d, e in SCALES])
def test_a_scale_file_resizes_its_deployment_under_its_experiment(deployment, experiment):
    """conf/scale/<deployment>/<experiment>.yaml: both exist, and composing the two applies the file."""
    assert (CONF / "deployment" / f"{deployment}.yaml").is_file()
    assert (CONF / "experiment" / f"{experiment}.yaml").is_file()
    sized = OmegaConf.load(CONF / "scale" / deployment / f"{experiment}.yaml")
    cfg = _compose(f"experiment={experiment}", f"deployment={deployment}")
    for key, value in sized.items():
        if key != "defaults":  # the file's values are in the composed deployment: merging them changes nothing
            assert OmegaConf.merge(cfg.deployment[key], value) == cfg.deployment[key], key
