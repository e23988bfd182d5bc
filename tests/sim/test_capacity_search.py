"""`loadgen.rate_rps=max`: the capacity search on deployments whose capacity is known in closed form."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from harness.deploy.build import make_plan
from harness.errors import InputError
from harness.runs.capacity import SearchSettings, search, summary_meta
from harness.schema import register_configs

CONF = str(Path(__file__).resolve().parents[2] / "conf")
# One prefill instance, fixed 32K-token prompts and short outputs on plenty of decode: an M/D/1 queue whose
# capacity is 1 / prefill time, which is the planner's Theta_pd-p (its Lambda_max here).
MD1 = ["deployment=homogeneous_pd", "workload=fixed", "workload.input_tokens=32768", "workload.output_tokens=16",
       "deployment.local.n_prefill=1", "deployment.local.n_decode=11", "analysis.figures=false"]


def _cfg(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return compose("config", overrides=list(overrides))


@pytest.fixture(scope="module")
def md1_search():
    cfg = _cfg(*MD1, "loadgen.rate_rps=max", "loadgen.capacity_search.min_requests=20000")
    settings = SearchSettings.from_cfg(cfg)
    return cfg, settings, search(cfg, settings, say=lambda line: None)


def test_the_search_finds_an_md1_capacity_within_its_tolerance(md1_search):
    cfg, settings, found = md1_search
    plan = make_plan(cfg)
    capacity = plan["theta_pd_p_rps"]  # one instance: 1 / its prefill time of a 32K prompt
    assert plan["lambda_max_rps"] == pytest.approx(capacity)  # the prefill server binds, nothing else
    assert plan["theta_pd_d_rps"] > 2 * capacity
    # The highest stable rate sits just under the server's rate: within the bracket's width plus the
    # 2% a finite run of a queue at rho ~ 0.98 cannot tell from growth.
    assert capacity * (1 - settings.tolerance - 0.02) <= found.lo_rps <= capacity
    assert found.hi_rps > capacity * (1 - settings.tolerance)


def test_every_probe_is_recorded_with_its_reason(md1_search):
    _, settings, found = md1_search
    frame = found.frame()
    assert len(frame) == len(found.probes) >= 3
    assert set(frame["stable"]) == {True, False}
    assert frame["reason"].str.match(r"^(stable|unstable): ").all()
    meta = summary_meta(found, settings)
    assert meta["converged"] and meta["runs"] == len(found.probes)
    assert meta["lo_rps"] < meta["hi_rps"] <= meta["lo_rps"] * (1 + settings.tolerance)
    assert meta["rps"] == found.lo_rps == frame.loc[frame["stable"], "rate_rps"].max()


@pytest.mark.parametrize("key,value", [("tolerance", 0), ("max_runs", 1), ("min_goodput", 1.5), ("alpha", 1)])
def test_bad_search_settings_are_one_line(key, value):
    cfg = _cfg(f"loadgen.capacity_search.{key}={value}")
    with pytest.raises(InputError, match=rf"^loadgen\.capacity_search\.{key}=.* must be "):
        SearchSettings.from_cfg(cfg)


def test_the_search_is_sim_only(tmp_path):
    from harness.runs.capacity import run_search

    cfg = _cfg("mode=live", "loadgen.rate_rps=max")
    with pytest.raises(InputError, match="sim mode only"):
        run_search(cfg, tmp_path)
