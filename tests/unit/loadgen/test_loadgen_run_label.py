"""A url run's directory is named after its target, not the default emulated deployment."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from harness.loadgen.settings import run_label
from harness.schema import register_configs

CONF_DIR = str(Path(__file__).resolve().parents[3] / "conf")


@pytest.mark.parametrize(("args", "label"), [
    (("prfaas_pd", "sim", None, None), "prfaas_pd"),
    (("prfaas_pd", "live", "http://127.0.0.1:8000", None), "prfaas_pd"),  # live ignores target.url
    (("prfaas_pd", "url", "http://10.0.0.5:8000/v1", None), "url_10.0.0.5_8000"),
    (("prfaas_pd", "sim", "https://gateway.example.com/v1", None), "url_gateway.example.com"),  # harness-load
    (("prfaas_pd", "url", "http://h:1", "my gateway/blue"), "my_gateway_blue"),
])
def test_run_label(args, label):
    assert run_label(*args) == label


def _run_dir(*overrides):
    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    return str(cfg.hydra.run.dir)


def test_the_hydra_run_dir_uses_it():
    assert _run_dir("mode=url", "target.url=http://127.0.0.1:8123").endswith("_url_127.0.0.1_8123")
    assert _run_dir("deployment=homogeneous_pd").endswith("_homogeneous_pd")


def test_the_target_and_loadgen_overrides_compose_as_written():
    """design.md's override names: target.headers={...}, target.extra_body={...}, target.api_key, ..."""
    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose("config", overrides=["target.headers={X-Tenant: blue}", "target.extra_body={temperature: 0}",
                                           "target.api_key=sk-1", "target.time_scale=10", "loadgen.max_concurrency=4",
                                           "loadgen.ramp_up_s=30", "analysis.percentiles=[50,95,99.9]",
                                           "server.tokens_per_word=1.3"])
    assert dict(cfg.target.headers) == {"X-Tenant": "blue"} and dict(cfg.target.extra_body) == {"temperature": 0}
    assert (cfg.target.api_key, cfg.target.time_scale, cfg.loadgen.max_concurrency) == ("sk-1", 10.0, 4)
    assert list(cfg.analysis.percentiles) == [50, 95, 99.9] and cfg.server.tokens_per_word == 1.3
