"""Sim and live agree on the same trace: the paper workload through the emulator over HTTP.

100 requests of the paper's workload at time_scale 20 (about 4 s of wall time). What does not
depend on how busy the host is must match exactly: every request completes on the route sim mode
gives it, with the same token counts, KV bytes and egress. How close live *latencies* come to sim's
depends on the host's timer and HTTP lag, so that agreement (throughput within 3%, TTFT P50/P90
within 5% on a quiet machine) is a benchmark, reported rather than asserted:
`benchmarks/bench_loadgen.py agreement`.
"""

from __future__ import annotations

import numpy as np
import pytest

from harness.analysis import metrics as m
from harness.runs.http import run_live
from harness.runs.sim import run_sim

TIME_SCALE = 20.0


@pytest.fixture(scope="module")
def runs(compose_cfg):
    cfg = compose_cfg(["workload=paper_lognormal", "workload.num_requests=100", f"server.time_scale={TIME_SCALE}"])
    return run_sim(cfg), run_live(cfg)


def test_every_request_completes_on_the_same_route(runs):
    sim, live = runs
    s = sim.requests.set_index("request_id")
    lv = live.requests.set_index("request_id")
    assert len(lv) == len(s) == 100
    assert m.n_completed(live.requests) == m.n_completed(sim.requests) == 100
    assert (lv["route"] == s["route"]).all()
    assert (lv["output_tokens"] == s["output_tokens"]).all() and (lv["input_tokens"] == s["input_tokens"]).all()
    assert lv["kv_bytes_sent"].sum() == pytest.approx(s["kv_bytes_sent"].sum(), rel=1e-9)


def test_egress_series_is_the_emulators(runs):
    """The cross-DC link log, moved onto the run clock, carries the same bytes as in sim mode."""
    sim, live = runs
    def total(ts):  # one bin = 1 s
        return float(np.nansum(ts["egress_gbps"].to_numpy(float)))

    assert total(live.timeseries) == pytest.approx(total(sim.timeseries), rel=1e-6)


def test_the_run_reports_its_own_health(runs):
    _, live = runs
    health = live.meta["loadgen"]
    for key in ("valid", "target_rps", "achieved_rps", "lateness_p99_ms", "loop_lag_p99_ms"):
        assert key in health
    assert health["target_rps"] > 0 and health["achieved_rps"] > 0
    assert live.meta["server"]["events"] > 0
    assert {"scheduled_s", "sent_s", "lateness_s"} <= set(live.requests.columns)
