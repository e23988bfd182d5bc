"""Whole-run time-series statistics (egress, link and stage utilisation) cover the run span, first
arrival .. last finish of a completed request, not every bin of the series: a `harness-serve` series
covers the server's uptime, idle before and after its load. A bin counts when its start lies in the span."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.analysis.frames import requests_frame, timeseries_frame
from harness.analysis.summary import summarize

META = {"deployment": "prfaas_pd", "mode": "serve", "link_capacity_gbps": 100.0}


def _requests(arrivals: list[float], finishes: list[float]):
    pairs = enumerate(zip(arrivals, finishes, strict=True))
    return requests_frame([{"deployment": "prfaas_pd", "request_id": i, "arrival_s": a, "input_tokens": 30000,
                            "output_tokens": 8, "route": "prfaas", "ttft_s": 1.0, "tpot_s": 0.02,
                            "e2e_s": f - a, "finish_s": f} for i, (a, f) in pairs])


def _series(egress: dict[int, float], util: dict[int, float], n_bins: int = 200):
    """1-second bins 0..n_bins-1; egress and util_decode 0 except where given."""
    return timeseries_frame([{"deployment": "prfaas_pd", "t_s": float(t), "bin_s": 1.0,
                              "egress_gbps": egress.get(t, 0.0), "link_capacity_gbps": 100.0,
                              "util_decode": util.get(t, 0.0)} for t in range(n_bins)])


def test_idle_bins_before_and_after_the_requests_do_not_count():
    """A serve-like series: 200 s of uptime, requests from 100 s to 119.5 s, egress 1..20 Gbps in
    bins 100..119. Over the span: mean 10.5, P99 19.81; over the uptime it was 1.05 and 18.01."""
    req = _requests([100.0, 105.0, 110.0], [112.0, 116.0, 119.5])
    ts = _series({100 + k: float(k + 1) for k in range(20)}, {100 + k: 0.8 for k in range(20)})
    s = summarize(req, ts, META)
    assert s["duration_s"] == pytest.approx(19.5)
    assert s["egress_gbps_mean"] == pytest.approx(10.5)
    assert s["egress_gbps_p99"] == pytest.approx(19.81)
    assert s["link_util_mean"] == pytest.approx(0.105) and s["link_util_p99"] == pytest.approx(0.1981)
    assert s["util_decode_mean"] == pytest.approx(0.8)


def test_a_bin_counts_when_its_start_lies_in_the_span():
    """Span 100.4 .. 119.5: bin 100 starts before it (left out), bin 119 inside it (counted)."""
    req = _requests([100.4], [119.5])
    ts = _series({100: 1000.0, **dict.fromkeys(range(101, 120), 3.0), 120: 1000.0}, {})
    s = summarize(req, ts, META)
    assert s["egress_gbps_mean"] == pytest.approx(3.0) and s["egress_gbps_p99"] == pytest.approx(3.0)


def test_a_span_inside_one_bin_is_that_bin():
    """No bin starts in 50.2 .. 50.7: the bin holding the span (50) is used, not none (NaN) nor all."""
    req = _requests([50.2], [50.7])
    s = summarize(req, _series({50: 7.0}, {50: 0.25}), META)
    assert s["egress_gbps_mean"] == pytest.approx(7.0) and s["util_decode_mean"] == pytest.approx(0.25)


def test_steady_window_values_keep_their_window():
    """The steady-window versions were already windowed (first completion 102 .. last arrival 110)."""
    req = _requests([100.0, 105.0, 110.0], [102.0, 116.0, 119.5])
    ts = _series({t: 2.0 if t < 112 else 6.0 for t in range(100, 120)}, {})
    s = summarize(req, ts, META, {"warmup_fraction": 0.0})
    assert s["steady_egress_gbps_mean"] == pytest.approx(2.0)
    assert s["egress_gbps_mean"] == pytest.approx(3.6)  # 12 bins of 2 and 8 of 6


def test_no_completed_request_has_no_run_span():
    req = requests_frame([{"deployment": "prfaas_pd", "request_id": 0, "arrival_s": 1.0, "input_tokens": 10,
                           "output_tokens": 2, "route": "prfaas", "error": "refused"}])
    s = summarize(req, _series({1: 5.0}, {}, n_bins=4), META)
    assert all(math.isnan(s[k]) for k in ("duration_s", "egress_gbps_mean", "link_util_mean", "util_decode_mean"))
    assert np.isnan(s["egress_gbps_p99"])
