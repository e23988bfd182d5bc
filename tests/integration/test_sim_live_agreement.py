"""Sim and live agree on the same trace: the paper workload through the emulator over HTTP.

200 requests of the paper's workload at time_scale 10 (about 13 s of wall time): throughput within
3%, TTFT P50 and P90 within 5% (or within the timer jitter the run reports, in run seconds, if the
host was that noisy). Routes, cache hits and KV bytes are the emulator's and must match exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.analysis import metrics as m
from harness.runs.http import run_live
from harness.sim import run_sim

TIME_SCALE = 10.0


@pytest.fixture(scope="module")
def runs(compose_cfg):
    cfg = compose_cfg(["workload=paper_lognormal", "workload.num_requests=200", f"server.time_scale={TIME_SCALE}"])
    return run_sim(cfg), run_live(cfg)


def test_every_request_completes_on_the_same_route(runs):
    sim, live = runs
    s = sim.requests.set_index("request_id")
    lv = live.requests.set_index("request_id")
    assert len(lv) == len(s) == 200
    assert m.n_completed(live.requests) == m.n_completed(sim.requests) == 200
    assert (lv["route"] == s["route"]).all()
    assert (lv["output_tokens"] == s["output_tokens"]).all() and (lv["input_tokens"] == s["input_tokens"]).all()
    assert lv["kv_bytes_sent"].sum() == pytest.approx(s["kv_bytes_sent"].sum(), rel=1e-9)


def test_throughput_within_3_percent(runs):
    sim, live = runs
    assert m.throughput_rps(live.requests) == pytest.approx(m.throughput_rps(sim.requests), rel=0.03)


@pytest.mark.parametrize("stat", ["p50", "p90"])
def test_ttft_within_5_percent_or_the_measured_jitter(runs, stat):
    sim, live = runs
    expected, got = m.ttft(sim.requests, stat), m.ttft(live.requests, stat)
    jitter_s = live.meta["loadgen"]["loop_lag_p99_ms"] / 1e3 * TIME_SCALE
    assert abs(got - expected) <= max(0.05 * expected, jitter_s), (got, expected, jitter_s)
    assert got >= expected * 0.99  # HTTP can only add delay, never remove it


def test_egress_series_is_the_emulators(runs):
    """The cross-DC link log, moved onto the run clock, carries the same bytes as in sim mode."""
    sim, live = runs
    total = lambda ts: float(np.nansum(ts["egress_gbps"].to_numpy(float)))  # noqa: E731 (one bin = 1 s)
    assert total(live.timeseries) == pytest.approx(total(sim.timeseries), rel=1e-6)


def test_the_run_reports_its_own_health(runs):
    _, live = runs
    health = live.meta["loadgen"]
    for key in ("valid", "target_rps", "achieved_rps", "lateness_p99_ms", "loop_lag_p99_ms"):
        assert key in health
    assert health["achieved_rps"] == pytest.approx(health["target_rps"], rel=0.05)
    assert live.meta["server"]["events"] > 0
    assert {"scheduled_s", "sent_s", "lateness_s"} <= set(live.requests.columns)
