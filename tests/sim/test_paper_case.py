"""The emulator on the paper's case study, against the planner, the paper and queueing theory.

Table 6 values appear here only as targets with tolerances (the harness never reads them). The
emulator gets t and the P/D split from the planner, nothing else: capacity, TTFT and egress come
out of queueing prefills, streaming KV over the link and batching decodes.

Two of the targets are CALIBRATION, not predictions: the H20 prefill curve (conf/model/internal_1t.yaml
profiles.h20.prefill, [I] fitted to Table 6; README "Honest numbers") passes through 9/2.11 s at E[L]
(homogeneous PD's Lambda_max with 9 prefill instances) and 9.73 s at the P90 length (homogeneous PD's
P90 TTFT). So homogeneous PD's capacity (2.11) and low-load P90 TTFT (9.73) only check that the fit
still holds through the emulator (`CALIBRATED`, the test_calibration_* tests). Every other target here is
a prediction: PrfaaS-PD's and naive heterogeneous PD's capacity, the capacity ratios (whose denominator
is the calibrated homogeneous capacity), the other TTFTs (homogeneous mean 4.44 s was not used in the
fit) and egress.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from omegaconf import OmegaConf

from harness.analysis.summary import summarize
from harness.planner import plan_deployment
from harness.workload import build_workload, mean_output_tokens

from .conftest import compose_cfg

DEPLOYMENTS = ("homogeneous_pd", "naive_hetero", "prfaas_pd")
# Paper Table 6 [P]: (Lambda_max, mean TTFT, P90 TTFT)
PAPER = {"homogeneous_pd": (2.11, 4.44, 9.73), "naive_hetero": (2.45, 1.74, 3.51), "prfaas_pd": (3.24, 2.22, 3.51)}
# The Table 6 targets above that an input was fitted to (the H20 prefill curve): calibration, checked apart.
CALIBRATED = {("homogeneous_pd", "capacity"), ("homogeneous_pd", "p90")}
N_SATURATION = 6000


def _summary(cfg, result):
    return summarize(result.requests, result.timeseries, result.meta, cfg.analysis)


@pytest.fixture(scope="module")
def saturation():
    """Each deployment driven closed-loop at saturation (rate inf): its sustained throughput."""
    from harness.runs.sim import run_sim

    out = {}
    for name in DEPLOYMENTS:
        cfg = compose_cfg(f"deployment={name}", "loadgen.rate_rps=inf", f"workload.num_requests={N_SATURATION}")
        result = run_sim(cfg)
        out[name] = (cfg, result, _summary(cfg, result))
    return out


def _plan_same_sample(cfg, result, service_time):
    """The planner on the emulated run's own length sample, with the run's split and threshold fixed."""
    meta = result.meta
    dep = OmegaConf.to_container(cfg.deployment, resolve=True)
    dep["local"]["n_prefill"], dep["local"]["n_decode"] = meta["n_prefill"], meta["n_decode"]
    if "threshold_tokens" in (dep.get("router") or {}):
        dep["router"]["threshold_tokens"] = meta["threshold_tokens"]
    planner = OmegaConf.to_container(cfg.planner, resolve=True) | {"service_time": service_time}
    lengths = np.array([r.input_tokens for r in build_workload(cfg.workload)], dtype=float)
    plan = plan_deployment(dep, cfg.model, cfg.link, planner, lengths, np.ones_like(lengths),
                           mean_output_tokens(cfg.workload))
    return plan.to_dict()["lambda_max_rps"]


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_sustained_throughput_matches_the_planner_on_the_same_lengths(saturation, name):
    """Queueing capacity = the analytic Lambda_max when the planner uses mean service times E[T(L)].

    The paper's planner evaluates T at the mean length (T(l_long)); T is convex, so that overstates
    what a queue sustains by Jensen's gap (~5% for naive, ~0% for PrfaaS-PD on this workload).
    """
    cfg, result, summary = saturation[name]
    expected = _plan_same_sample(cfg, result, "expected")
    assert summary["steady_throughput_rps"] == pytest.approx(expected, rel=0.05)
    representative = _plan_same_sample(cfg, result, "representative")
    assert summary["steady_throughput_rps"] <= representative * 1.02


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_paper_case_capacity_is_the_same_at_4x_the_automatic_in_flight(saturation, name):
    """Capacity without a hidden knob: the saturation run's in-flight count comes from the planner, and
    the answer barely moves at 4x that count (the Mooncake trace's case is in tests/sim/test_saturation.py)."""
    from harness.runs.sim import run_sim

    _, _, auto = saturation[name]
    n = int(auto["saturation_in_flight"])
    assert auto["saturation_in_flight_source"].startswith("planner")
    assert 30 < n < 400  # Little's law at the planner's Lambda_max, not the old fixed 256
    cfg = compose_cfg(f"deployment={name}", "loadgen.rate_rps=inf", f"workload.num_requests={N_SATURATION}",
                      f"loadgen.saturation_in_flight={4 * n}")
    big = _summary(cfg, run_sim(cfg))
    assert big["saturation_in_flight_source"] == "given"
    assert big["steady_throughput_rps"] == pytest.approx(auto["steady_throughput_rps"], rel=0.02)
    assert auto["saturation_warning"] == ""


def test_capacity_ratios_land_near_the_paper(saturation):
    cap = {name: saturation[name][2]["steady_throughput_rps"] for name in DEPLOYMENTS}
    assert cap["prfaas_pd"] / cap["homogeneous_pd"] == pytest.approx(3.24 / 2.11, abs=0.06)
    assert cap["naive_hetero"] / cap["homogeneous_pd"] == pytest.approx(2.45 / 2.11, abs=0.06)
    for name in DEPLOYMENTS:
        if (name, "capacity") not in CALIBRATED:
            assert cap[name] == pytest.approx(PAPER[name][0], rel=0.08)


def test_calibration_homogeneous_capacity_still_holds(saturation):
    """CALIBRATION, not a prediction: the H20 prefill curve ([I], conf/model/internal_1t.yaml) was fitted
    through T(E[L]) = 9/2.11 s, homogeneous PD's Lambda_max with 9 prefill instances, so its emulated
    capacity near 2.11 only says the fit still holds through queueing."""
    assert saturation["homogeneous_pd"][2]["steady_throughput_rps"] == pytest.approx(PAPER["homogeneous_pd"][0],
                                                                                      rel=0.08)


@pytest.fixture(scope="module")
def low_load():
    """Each deployment at 0.25 req/s (nothing queues), run once for the module: name -> summary."""
    from harness.runs.sim import run_sim

    runs: dict[str, dict] = {}

    def get(name: str) -> dict:
        if name not in runs:
            cfg = compose_cfg(f"deployment={name}", "loadgen.rate_rps=0.25", "workload.num_requests=2000")
            runs[name] = _summary(cfg, run_sim(cfg))
        return runs[name]

    return get


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_low_load_ttft_is_the_papers_service_time(low_load, name):
    """At 0.25 req/s nothing queues: TTFT is prefill (+ transfer tail + join), as the paper's numbers are.
    (Homogeneous PD's P90 is calibration: test_calibration_homogeneous_low_load_p90_still_holds.)"""
    summary = low_load(name)
    _, mean, p90 = PAPER[name]
    assert summary["ttft_mean_s"] == pytest.approx(mean, rel=0.10)
    if (name, "p90") not in CALIBRATED:
        assert summary["ttft_p90_s"] == pytest.approx(p90, rel=0.10)
    assert summary["failed"] == 0


def test_calibration_homogeneous_low_load_p90_still_holds(low_load):
    """CALIBRATION, not a prediction: the H20 prefill curve ([I], conf/model/internal_1t.yaml) was fitted
    through T(P90 length = 62,410 tokens) = 9.73 s, homogeneous PD's P90 TTFT, so its low-load P90 near
    9.73 s only says the fit still holds through the emulator (prefill, join, no queueing)."""
    assert low_load("homogeneous_pd")["ttft_p90_s"] == pytest.approx(PAPER["homogeneous_pd"][2], rel=0.10)


def test_ttft_grows_with_load_as_queueing_says():
    """Mean TTFT rises monotonically with offered load and blows up past capacity."""
    from harness.runs.sim import run_sim

    ttft = []
    for rate in (0.5, 1.5, 2.5, 3.0, 4.0):
        cfg = compose_cfg("deployment=prfaas_pd", f"loadgen.rate_rps={rate}", "workload.num_requests=1500")
        ttft.append(_summary(cfg, run_sim(cfg))["ttft_mean_s"])
    assert all(a < b for a, b in itertools.pairwise(ttft)), ttft
    assert ttft[-1] > 5 * ttft[0]


def test_egress_at_the_operating_point(sim):
    """PrfaaS-PD just below capacity: the KV egress per request served is the paper's, never above capacity.

    The paper's ~13 Gbps [P] (section 4.3; paper-facts 12.5) is PrfaaS-PD's egress at its Table 6
    operating point, Lambda_max = 3.24 req/s [P] (every throughput and bandwidth number of the case study
    is the section 3.4 model at its optimum; paper-facts 12.6 reconstructs the 13 from that rate). This
    run offers 3.0 req/s (below the emulated capacity, ~3.2, so it is steady), and egress scales with the
    rate, so the like-for-like quantity is egress per unit of throughput over the same steady window:
    Gbit of KV shipped per request served, 13 / 3.24 = 4.01 (paper) against the run's.
    Tolerance 10%: "~13" is two significant figures (12.5..13.5 is +-4%); the paper's own inputs give
    12.2-12.8 Gbps at 3.24 req/s (Lambda p S_kv(l_long), or N_prfaas Phi_kv; paper-facts 12.6), up to 6%
    under 13; the run's threshold is the planner's 19,712 tokens, not 19.4K (offload 0.49 vs 0.496); and the
    steady window's ~1,200 offloaded requests leave ~1-2% of sampling noise in their mean KV size.
    Measured here: 11.0 Gbps at 2.88 req/s steady, 3.84 Gbit per request (-4%)."""
    cfg, result = sim("deployment=prfaas_pd", "loadgen.rate_rps=3.0", "workload.num_requests=4000")
    summary = _summary(cfg, result)
    per_request_gbit = summary["steady_egress_gbps_mean"] / summary["steady_throughput_rps"]
    assert per_request_gbit == pytest.approx(13.0 / 3.24, rel=0.10)
    ts = result.timeseries
    assert (ts["egress_gbps"] <= ts["link_capacity_gbps"] * (1 + 1e-9)).all()
    assert ts["egress_gbps"].max() > 0


def test_transfers_stretch_as_the_link_is_shared(sim):
    """On an 8 Gbps link (four H200 prefills make ~12 Gbps of KV), transfers stretch under load."""
    means = []
    for rate in (0.25, 2.5):
        _, result = sim("deployment=prfaas_pd", "link.capacity_gbps=8", "deployment.router.threshold_tokens=19456",
                        "deployment.local.n_prefill=3", "deployment.local.n_decode=5",
                        f"loadgen.rate_rps={rate}", "workload.num_requests=1500")
        df = result.requests[result.requests["route"] == "prfaas"]
        means.append(float((df["kv_ready_s"] - df["prefill_end_s"]).mean()))
    assert means[1] > 2 * means[0], means


def test_a_thin_link_makes_prfaas_bandwidth_bound(sim):
    """At 5 Gbps the planner raises t and the emulated capacity falls below the 100 Gbps case."""
    runs = {}
    for gbps in (100, 5):
        cfg, result = sim("deployment=prfaas_pd", f"link.capacity_gbps={gbps}", "loadgen.rate_rps=inf",
                          "workload.num_requests=3000")
        runs[gbps] = (result.meta, _summary(cfg, result))
    assert runs[5][0]["threshold_tokens"] > runs[100][0]["threshold_tokens"]
    assert runs[5][1]["steady_throughput_rps"] < 0.95 * runs[100][1]["steady_throughput_rps"]
    assert runs[5][1]["steady_egress_gbps_mean"] <= 5.0 * 1.001
