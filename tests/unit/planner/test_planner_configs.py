"""The planner's boundary: whatever form a config node takes, the planner reads the schema's dataclass,
and a wrong key or type fails there in one line that names it."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf

from harness.config.deployment import DeploymentConfig, LinkConfig, LocalClusterConfig, RemoteClusterConfig
from harness.errors import InputError
from harness.planner import plan_deployment
from harness.planner.configs import deployment_config, link_config, planner_config
from harness.planner.schema import PlannerConfig


def _forms(node):
    """The composed node, a plain dict of it, and the schema dataclass."""
    return {"DictConfig": node, "dict": OmegaConf.to_container(node, resolve=True),
            "dataclass": OmegaConf.to_object(node)}


@pytest.mark.parametrize("form", ["DictConfig", "dict", "dataclass"])
def test_every_form_of_the_nodes_gives_the_same_plan(compose_cfg, paper_lengths, form):
    cfg = compose_cfg(["deployment=prfaas_pd"])
    dep, link, planner = (_forms(node)[form] for node in (cfg.deployment, cfg.link, cfg.planner))
    values, weights = paper_lengths
    got = plan_deployment(dep, cfg.model, link, planner, values, weights, 1024.0).to_dict()
    reference = plan_deployment(cfg.deployment, cfg.model, cfg.link, cfg.planner, values, weights, 1024.0).to_dict()
    assert json.dumps(got, sort_keys=True) == json.dumps(reference, sort_keys=True)


def test_dicts_become_the_schema_dataclasses_with_its_defaults(compose_cfg):
    plain = OmegaConf.to_container(compose_cfg(["deployment=prfaas_pd"]).deployment, resolve=True)
    dep = deployment_config(plain)
    assert isinstance(dep, DeploymentConfig)
    assert isinstance(dep.local, LocalClusterConfig) and isinstance(dep.prfaas, RemoteClusterConfig)
    assert (dep.name, dep.local.instances, dep.prfaas.instances, dep.local.n_prefill) == ("prfaas_pd", 8, 4, None)
    assert planner_config({}) == PlannerConfig()  # a key left out takes the schema's default
    assert link_config({"name": "l", "capacity_gbps": 25}) == LinkConfig(name="l", capacity_gbps=25.0)


@pytest.mark.parametrize(("convert", "node", "message"), [
    (deployment_config, {"name": "d", "local": {"instances": 8, "n_prefil": 3}},
     r"deployment\.local\.n_prefil: Key 'n_prefil' not in 'LocalClusterConfig'"),
    (deployment_config, {"name": "d", "local": {"instances": "eight"}},
     r"deployment\.local\.instances: Value 'eight' of type 'str' could not be converted to Integer"),
    (deployment_config, {"name": "d", "prfaas": {"gpus": 8}}, r"deployment\.prfaas\.gpus: Key 'gpus' not in"),
    (planner_config, {"grid_step_tokens": "fine"}, r"planner\.grid_step_tokens: Value 'fine'"),
    (planner_config, {"slo_tokens_per_s": None}, r"planner\.slo_tokens_per_s: Incompatible value 'None'"),
    (planner_config, {"service_time": "median"}, r"planner\.service_time must be one of representative, expected"),
    (link_config, {"name": "l", "capacity_gbps": 0}, r"link\.capacity_gbps must be > 0, got 0\.0"),
    (link_config, {"capacity_gbps": 10}, r"link\.name: .*missing mandatory value: name"),
    (link_config, {"capacty_gbps": 10}, r"link\.capacty_gbps: Key 'capacty_gbps' not in 'LinkConfig'"),
    (link_config, None, r"link is missing \(null\)"),
    (deployment_config, ["prfaas_pd"], r"deployment must be a mapping, got list"),
    (deployment_config, {"name": "aggregated", "builder": "harness.deploy.aggregated.build_aggregated"},
     r"deployment aggregated: built by harness\.deploy\.aggregated\.build_aggregated, not a PD deployment"),
])
def test_a_wrong_key_or_type_fails_at_the_boundary_in_one_line(convert, node, message):
    with pytest.raises(InputError, match=message) as err:
        convert(node)
    assert "\n" not in str(err.value)


def test_the_planner_refuses_a_misspelt_key_it_used_to_ignore(compose_cfg, paper_lengths):
    """Before the boundary, `n_prefil` in a dict was never read: the planner chose the split itself."""
    cfg = compose_cfg(["deployment=prfaas_pd"])
    dep = OmegaConf.to_container(cfg.deployment, resolve=True)
    dep["local"]["n_prefil"] = 3
    with pytest.raises(InputError, match=r"deployment\.local\.n_prefil"):
        plan_deployment(dep, cfg.model, cfg.link, cfg.planner, *paper_lengths, 1024.0)
