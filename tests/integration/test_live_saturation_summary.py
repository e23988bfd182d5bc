"""A live saturation run (`mode=live loadgen.rate_rps=inf`) is summarised as a sim one: every
`saturation_*` key (it wrote none: only sim runs called saturation_meta; contract26 finding 4)."""

from __future__ import annotations

import json

from harness.runs.assemble import run_into

SATURATION_KEYS = {f"saturation_{k}" for k in ("in_flight", "in_flight_source", "util_pd_p", "util_prfaas",
                                                 "util_pd_d", "route", "counted_in", "window_start_s",
                                                 "window_end_s", "warning")}


def test_live_saturation_run_writes_every_saturation_key(compose_cfg, tmp_path):
    cfg = compose_cfg(["mode=live", "deployment=homogeneous_pd", "workload=fixed", "workload.input_tokens=2000",
                       "workload.output_tokens=8", "workload.num_requests=40", "loadgen.rate_rps=inf",
                       "loadgen.saturation_in_flight=4", "server.time_scale=20", "analysis.figures=false"])
    run_into(cfg, tmp_path / "live")
    summary = json.loads((tmp_path / "live" / "summary.json").read_text())
    assert set(summary) >= SATURATION_KEYS, sorted(SATURATION_KEYS - set(summary))
    assert summary["saturation_in_flight"] == 4 and summary["saturation_in_flight_source"] == "given"
    assert (summary["saturation_route"], summary["saturation_counted_in"]) == ("local", "completions")
    assert summary["saturation_window_end_s"] > summary["saturation_window_start_s"] > 0
    assert summary["saturation_util_prfaas"] is None  # homogeneous_pd has no PrfaaS pool
    assert 0 < summary["saturation_util_pd_p"] <= 1 and summary["steady_throughput_rps"] > 0
