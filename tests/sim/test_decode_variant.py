"""The batch- and context-dependent H20 decode variant (`model.decode_variant=linear`): TPOT grows with
load in the emulator, and the planner's Little's-law prediction of it (Plan.tpot_s) tracks it."""

from __future__ import annotations

import pytest

from harness.analysis.summary import summarize
from harness.planner import plan_deployment
from harness.runs.sim import run_sim
from harness.workload import input_length_distribution, mean_output_tokens

from .conftest import compose_cfg

VARIANT = ("deployment=prfaas_pd", "model.decode_variant=linear")


def _plan(cfg):
    values, weights = input_length_distribution(cfg.workload)
    return plan_deployment(cfg.deployment, cfg.model, cfg.link, cfg.planner, values, weights,
                           mean_output_tokens(cfg.workload))


def test_the_variant_keeps_the_slo_batch_and_the_papers_decode_bound():
    cfg = compose_cfg(*VARIANT)
    plan = _plan(cfg)
    assert plan.bs_max == 20  # anchored: the SLO batch at the reference context stays the paper's 20
    assert plan.t_decode_s < 0.025  # the workload's mean context (~28K) is below the 32K reference


def test_tpot_varies_with_load_and_the_planner_accounts_for_it():
    tpot, predicted = [], []
    for rate in (0.5, 2.5):
        cfg = compose_cfg(*VARIANT, f"loadgen.rate_rps={rate}", "workload.num_requests=1500")
        result = run_sim(cfg)
        summary = summarize(result.requests, result.timeseries, result.meta, cfg.analysis)
        tpot.append(summary["tpot_mean_s"])
        predicted.append(_plan(cfg).tpot_s(rate))
    assert tpot[1] > 1.15 * tpot[0], tpot  # a fuller batch steps slower
    for measured, planned in zip(tpot, predicted, strict=True):
        assert measured == pytest.approx(planned, rel=0.05)


def test_the_constant_default_is_unchanged():
    cfg = compose_cfg("deployment=prfaas_pd", "loadgen.rate_rps=0.5", "workload.num_requests=300")
    result = run_sim(cfg)
    tpot = result.requests["tpot_s"].dropna()
    assert tpot.min() == pytest.approx(0.025) and tpot.max() == pytest.approx(0.025)
