"""harness-plan composes every deployment / model / hardware option it needs in one composition:
each node must equal the one a composition of its own (`<group>=<name>` plus the same overrides)
gives, and whatever the one composition cannot reproduce must fall back to compositions of their own."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import initialize_config_dir

from harness.plan import Variants
from harness.schema import register_configs

CONF = str(Path(__file__).resolve().parents[2] / "conf")
NAMES = {"deployment": ["homogeneous_pd", "naive_hetero", "prfaas_pd", "prfaas_dynamic"],
         "model": ["internal_1t", "kimi_linear_48b", "qwen3_235b"], "hardware": ["h200", "h20"]}


def _compare(base: list[str], experiment: str | None, names: dict[str, list[str]] = NAMES) -> Variants:
    register_configs()
    with initialize_config_dir(config_dir=CONF, version_base=None):
        fast = Variants(base, experiment)
        own = Variants(base, experiment, known_experiment=False)  # one composition per option (the old way)
        for group, options in names.items():
            for name in options:
                assert fast.get(group, name) == own.get(group, name), (group, name)
    return fast


@pytest.mark.parametrize("base", [[], ["link.capacity_gbps=5", "deployment=naive_hetero", "model.hidden_size=7000"]])
def test_one_composition_equals_one_per_option(base):
    fast = _compare(base, "paper_case_study")
    assert fast._fast_groups == ["deployment", "model", "hardware"]


def test_a_setting_not_every_option_takes_falls_back_to_compositions_of_their_own():
    """`deployment.prefill_max_batch_tokens` exists on the PD deployments, not on `aggregated`: the one
    composition cannot apply it to every option, so each is composed on its own, still exactly."""
    fast = _compare(["deployment.prefill_max_batch_tokens=65536"], "paper_case_study")
    assert fast._fast_groups == []


def test_experiment_that_sets_deployment_keys_falls_back_for_deployments():
    fast = _compare(["experiment=threshold_bandwidth"], "threshold_bandwidth")
    assert "deployment" not in fast._fast_groups and "model" in fast._fast_groups
    assert fast.get("deployment", "prfaas_pd").local.n_prefill == 3  # the experiment's setting, kept


def test_setting_that_does_not_fit_every_option_falls_back():
    names = {**NAMES, "deployment": ["naive_hetero", "prfaas_pd"]}  # homogeneous_pd has no prfaas to set
    fast = _compare(["deployment.prfaas.instances=2"], "paper_case_study", names)
    assert fast._fast_groups == []
    register_configs()
    with initialize_config_dir(config_dir=CONF, version_base=None):
        assert fast.get("deployment", "prfaas_pd").prfaas.instances == 2
