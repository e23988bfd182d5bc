"""A live run cut by `loadgen.max_duration_s` reports the rate it offered over HTTP, not the trace's."""

from __future__ import annotations

import pytest

from harness.analysis.metrics import arrival_rps
from harness.runs.http import run_live

# 100 requests at 2.5 req/s (~40 s), then 400 at 25 req/s: the whole trace's span rate is ~8.4 req/s;
# the first 30 s offer ~2.5 req/s.
SHIFT = ["workload=traffic_shift", "workload.phases.0.num_requests=100", "workload.phases.1.num_requests=400",
         "workload.phases.1.arrivals.rate_rps=25", "workload.phases.0.output_lengths.value=4",
         "workload.phases.1.output_lengths.value=4", "loadgen.max_duration_s=30", "server.time_scale=50",
         "analysis.figures=false"]


def test_a_live_run_cut_by_max_duration_reports_the_rate_it_offered(compose_cfg):
    result = run_live(compose_cfg(SHIFT))
    sent = result.requests
    assert sent["scheduled_s"].max() <= 30.0 and result.meta["offered"] == len(sent)
    assert 1.5 < result.meta["offered_rps"] < 4.0  # the first phase's ~2.5, not the trace's ~8.4
    # what the client scheduled: the same arrivals, so the same (n - 1) / span
    assert result.meta["offered_rps"] == pytest.approx(arrival_rps(sent.assign(arrival_s=sent["scheduled_s"])),
                                                       rel=1e-9)
