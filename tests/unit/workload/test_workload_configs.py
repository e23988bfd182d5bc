"""Every workload config composes, validates against its schema and builds requests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException

from harness.errors import InputError
from harness.schema import register_configs
from harness.workload import build_workload, input_length_distribution, mean_output_tokens
from harness.workload.request import n_blocks

CONF = Path(__file__).resolve().parents[3] / "conf"
WORKLOADS = sorted(p.stem for p in (CONF / "workload").glob("*.yaml"))


def _compose(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return compose("config", overrides=list(overrides))


def test_all_expected_workloads_exist():
    assert {"paper_lognormal", "fixed", "agentic", "mooncake_conversation", "mooncake_synthetic", "azure_sample",
            "gamma_bursty"} <= set(WORKLOADS)


@pytest.mark.parametrize("name", WORKLOADS)
def test_workload_composes_and_builds(name):
    cfg = _compose(f"workload={name}", "workload.num_requests=40", "workload.seed=3")
    assert cfg.workload.name == name
    requests = build_workload(cfg.workload)
    assert len(requests) == 40
    assert np.all(np.diff([r.arrival_s for r in requests]) >= 0)
    block = cfg.workload.block_tokens
    assert all(len(r.hash_ids) == n_blocks(r.input_tokens, block) for r in requests)
    values, weights = input_length_distribution(cfg.workload)
    assert weights.sum() == pytest.approx(1.0) and np.all(values >= 0)
    assert mean_output_tokens(cfg.workload) >= 1
    faster = build_workload(cfg.workload, rate_rps=50.0)
    assert faster[-1].arrival_s < requests[-1].arrival_s
    if requests[0].session_id is None:  # sessions interleave differently at another rate
        assert [r.input_tokens for r in faster] == [r.input_tokens for r in requests]


def test_fixed_override_paths():
    cfg = _compose("workload=fixed", "workload.input_tokens=1000", "workload.output_tokens=10",
                   "workload.num_requests=5")
    assert {(r.input_tokens, r.output_tokens) for r in build_workload(cfg.workload)} == {(1000, 10)}
    values, _weights = input_length_distribution(cfg.workload)
    assert values.tolist() == [1000.0] and mean_output_tokens(cfg.workload) == 10.0


def test_seed_override_changes_the_trace():
    a = build_workload(_compose("workload.num_requests=30", "workload.seed=1").workload)
    b = build_workload(_compose("workload.num_requests=30", "workload.seed=2").workload)
    c = build_workload(_compose("workload.num_requests=30", "workload.seed=1").workload)
    assert a == c and a != b


def test_default_workload_is_the_paper_one():
    """paper_lognormal's grid gives the paper's E[L], P(L>19.4K) and E[L|L>19.4K] (paper-facts 12.6)."""
    cfg = _compose()
    assert cfg.workload.name == "paper_lognormal" and cfg.workload.seed == 0
    values, weights = input_length_distribution(cfg.workload)
    long = values > 19_400
    assert values @ weights == pytest.approx(27_486, rel=1e-4)
    assert weights[long].sum() == pytest.approx(0.4957, abs=1e-4)
    assert values[long] @ weights[long] / weights[long].sum() == pytest.approx(45_046, rel=1e-4)
    assert mean_output_tokens(cfg.workload) == 1024.0


def test_gamma_cv_override():
    cfg = _compose("workload=gamma_bursty", "workload.arrivals.cv=4", "workload.num_requests=20000")
    gaps = np.diff([r.arrival_s for r in build_workload(cfg.workload)])
    # 15% is ~4 standard errors of a CV-4 estimate from 20k gamma gaps (kurtosis 99).
    assert gaps.std() / gaps.mean() == pytest.approx(4.0, rel=0.15)


def test_trace_null_num_requests_means_every_row():
    cfg = _compose("workload=mooncake_synthetic", "workload.num_requests=null")
    assert len(build_workload(cfg.workload)) == 3993


@pytest.mark.parametrize("override", ["workload.no_such_key=1", "workload.num_requests=many"])
def test_schema_rejects_unknown_keys_and_wrong_types(override):
    with pytest.raises(ConfigCompositionException):
        _compose(override)


@pytest.mark.parametrize(("overrides", "text"), [
    (["workload.arrivals.rate_rps=-1"], "Poisson.rate_rps"),
    (["workload.input_lengths.sigma=0"], "sigma"),
    (["workload.num_requests=0"], "num_requests"),
    (["workload.arrivals._target_=harness.workload.arrivals.Nope"], "workload 'paper_lognormal'"),
    (["workload=mooncake_synthetic", "workload.path=traces/nope.jsonl"], "not found"),
])
def test_bad_values_fail_with_input_error(overrides, text):
    with pytest.raises(InputError, match=text):
        build_workload(_compose(*overrides).workload)
