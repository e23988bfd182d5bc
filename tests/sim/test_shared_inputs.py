"""One source of truth: every planner input the emulator also uses moves both when it changes.

Each test changes one shared input (SLO, BS_max, decode step, prefill profile, service-time mode)
and checks the planner's answer and the emulated deployment's instances both moved to it; the
decode-bound dense-model case checks the emulator's capacity against the planner's at 20 and 40 tok/s.
"""

from __future__ import annotations

import pytest

from harness.analysis.summary import summarize
from harness.clock import VirtualClock
from harness.deploy.build import build
from harness.runs.sim import run_sim

from .conftest import compose_cfg

DENSE = ("model=minimax_m25", "deployment=homogeneous_pd", "workload=fixed", "workload.input_tokens=8192",
         "workload.output_tokens=1024")
DECODE_BOUND = ("deployment.local.n_prefill=10", "deployment.local.n_decode=2")


def _built(*overrides: str):
    cfg = compose_cfg(*overrides)
    return build(cfg, VirtualClock(), mode="sim")


def test_the_slo_moves_the_planner_and_the_emulators_batch():
    at40, at20 = _built(*DENSE), _built(*DENSE, "planner.slo_tokens_per_s=20")
    assert at20.plan["bs_max"] > at40.plan["bs_max"]  # a looser SLO lets a bigger batch meet it
    for built in (at40, at20):
        assert {d.bs_max for d in built.deployment.decode} == {built.plan["bs_max"]}
    assert at20.plan["slo_tokens_per_s"] == 20.0


def test_a_given_bs_max_moves_both():
    built = _built("model.profiles.h20.decode.bs_max=12")
    assert built.plan["bs_max"] == 12
    assert {d.bs_max for d in built.deployment.decode} == {12}


def test_a_fixed_decode_step_moves_both():
    built = _built("deployment=homogeneous_pd", "+deployment.decode_step_s=0.05")
    assert built.plan["t_decode_s"] == pytest.approx(0.05)
    decode = built.deployment.decode[0]
    assert decode._fixed_step_s == pytest.approx(0.05)
    base = _built("deployment=homogeneous_pd")
    assert built.plan["theta_pd_d_rps"] < base.plan["theta_pd_d_rps"]


def test_the_prefill_profile_moves_both():
    slow = _built("deployment=homogeneous_pd", "deployment.local.n_prefill=9", "deployment.local.n_decode=3",
                  "model.profiles.h20.prefill.coefficients=[0.9382,2.6008e-4,5.880e-10]")
    base = _built("deployment=homogeneous_pd", "deployment.local.n_prefill=9", "deployment.local.n_decode=3")
    assert slow.plan["t_prefill_short_s"] == pytest.approx(2 * base.plan["t_prefill_short_s"], rel=1e-6)
    assert slow.deployment.profiles["local"].prefill_s(8192) == pytest.approx(
        2 * base.deployment.profiles["local"].prefill_s(8192), rel=1e-6)


def test_the_service_time_mode_reaches_the_plan_the_emulator_runs():
    expected, paper = _built(), _built("planner.service_time=representative")
    assert expected.plan["service_time"] == "expected" and paper.plan["service_time"] == "representative"
    assert expected.plan["lambda_max_rps"] < paper.plan["lambda_max_rps"]  # Jensen's gap
    assert expected.threshold_tokens != paper.threshold_tokens or expected.n_prefill != paper.n_prefill


@pytest.mark.parametrize("slo", [40, 20])
def test_decode_bound_dense_case_emulator_capacity_matches_the_planner(slo):
    """MiniMax-M2.5 (dense GQA, roofline decode on H20), 10 prefill / 2 decode: decode-bound. Before one
    source of truth the emulator ran the 40 tok/s batch (26) at 20 tok/s too (planner: 55), 23% off."""
    cfg = compose_cfg(*DENSE, *DECODE_BOUND, f"planner.slo_tokens_per_s={slo}", "loadgen.rate_rps=inf",
                      "workload.num_requests=1500")
    result = run_sim(cfg)
    summary = summarize(result.requests, result.timeseries, result.meta, cfg.analysis)
    plan = result.meta["plan"]
    assert plan["bound"] == "pd_d"
    assert summary["steady_throughput_rps"] == pytest.approx(plan["lambda_max_rps"], rel=0.05)
