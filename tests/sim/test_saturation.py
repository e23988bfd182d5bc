"""Capacity without a hidden knob: the saturation run's in-flight count comes from the planner, the
answer barely moves at 4x that count, and the summary says what was used and warns when starved.
The paper case's auto-vs-4x check is in tests/sim/test_paper_case.py: it reads that module's saturation
runs (the same configs) instead of running them again."""

from __future__ import annotations

import pytest

from harness.analysis.summary import summarize
from harness.runs.sim import run_sim

from .conftest import compose_cfg


def _saturate(*overrides: str) -> dict:
    cfg = compose_cfg("loadgen.rate_rps=inf", *overrides)
    result = run_sim(cfg)
    return summarize(result.requests, result.timeseries, result.meta, cfg.analysis)


@pytest.mark.parametrize("name", ["homogeneous_pd", "naive_hetero", "prfaas_pd"])
def test_mooncake_conversation_capacity_is_the_same_at_4x_the_automatic_in_flight(name):
    """A trace whose later turns continue earlier ones: the closed loop sends a turn only after the one
    it continues, so a large in-flight count cannot break prefix reuse (it cost 10% before). PrfaaS-PD:
    at 4x the held turns (light: their prefix is cached) reach the 600-deep remote queue late, so the
    remote pool's window holds a heavier mix; counted in mean requests its rate stays put (a plain
    count read 4.1% low), and its pool, busy throughout, is not reported starved."""
    base = (f"deployment={name}", "workload=mooncake_conversation", "workload.num_requests=6000")
    auto = _saturate(*base)
    big = _saturate(*base, f"loadgen.saturation_in_flight={4 * int(auto['saturation_in_flight'])}")
    assert big["steady_throughput_rps"] == pytest.approx(auto["steady_throughput_rps"], rel=0.02)
    assert auto["saturation_warning"] == "" and big["saturation_warning"] == ""


def test_a_run_directory_reads_the_same_capacity_as_memory(tmp_path):
    """The summary of a streamed run (every command's) reads its frame back from Parquet: the prefill
    stamps the mean-request count needs must be among the columns it reads, and so must the saturation
    keys' (route, finish and prefill stamps: reading the arrivals alone left the window NaN, the route and
    its count out, and each pool's utilisation read over the whole run)."""
    cfg = compose_cfg("loadgen.rate_rps=inf", "deployment=prfaas_pd", "workload=mooncake_conversation",
                      "workload.num_requests=1500")
    memory = run_sim(cfg)
    streamed = run_sim(cfg, run_dir=tmp_path)
    assert streamed.requests_written
    summaries = [summarize(r.requests, r.timeseries, r.meta, cfg.analysis) for r in (memory, streamed)]
    assert summaries[1]["steady_throughput_rps"] == pytest.approx(summaries[0]["steady_throughput_rps"], rel=1e-9)
    saturation = [{k: v for k, v in s.items() if k.startswith("saturation_")} for s in summaries]
    assert saturation[0]["saturation_route"] == "prfaas" and saturation[0]["saturation_window_end_s"] > 0
    assert saturation[1] == saturation[0]


def test_too_few_in_flight_is_reported_as_starved():
    summary = _saturate("deployment=prfaas_pd", "workload.num_requests=800", "loadgen.saturation_in_flight=3")
    assert summary["saturation_warning"].startswith("starved:")
    assert summary["saturation_util_pd_p"] < 0.9 and summary["saturation_util_prfaas"] < 0.9
