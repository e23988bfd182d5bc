"""Metrics on small hand-made frames whose answers are worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from harness.analysis import metrics as m
from harness.analysis import runs


def frame(**cols) -> pd.DataFrame:
    n = max(len(v) for v in cols.values() if isinstance(v, (list, np.ndarray)))
    base = {"deployment": ["d"] * n, "arrival_s": np.arange(n, dtype=float), "input_tokens": [1000] * n,
            "output_tokens": [10] * n, "error": [None] * n}
    base.update(cols)
    if "finish_s" not in cols:
        base["finish_s"] = np.asarray(base["arrival_s"], dtype=float) + 5.0
    return pd.DataFrame(base)


@pytest.mark.parametrize(("stat", "expected"), [("mean", 5.5), ("p50", 5.5), ("p90", 9.1), ("p99", 9.91)])
def test_ttft_stats_of_ten_known_values(stat, expected):
    """TTFTs 1..10 s: mean 5.5, and linear-interpolated percentiles (numpy's / vLLM's convention)."""
    df = frame(ttft_s=[3.0, 1.0, 2.0, 10.0, 4.0, 5.0, 9.0, 6.0, 7.0, 8.0])
    assert m.ttft(df, stat) == pytest.approx(expected)


def test_failed_requests_are_counted_but_excluded_from_latency():
    """Two errored requests with absurd TTFTs change completed/failed, not the TTFT mean."""
    df = frame(ttft_s=[1.0, 2.0, 3.0, 1000.0, 2000.0], error=[None, "", None, "timeout", "http 500"])
    assert m.n_completed(df) == 3
    assert m.ttft(df, "mean") == pytest.approx(2.0)
    assert m.ttft(df, "p99") == pytest.approx(2.98)


def test_request_without_finish_time_is_not_completed():
    df = frame(ttft_s=[1.0, 1.0], finish_s=[5.0, np.nan])
    assert m.completed_mask(df).tolist() == [True, False]


def test_throughput_is_completions_over_first_arrival_to_last_finish():
    """Arrivals 0..3, finishes 5..8 and one failure: 3 completions over 8 s (arrival 0 to finish 8)."""
    df = frame(ttft_s=[1.0] * 4, output_tokens=[10, 20, 30, 40], error=[None, None, "x", None])
    assert m.duration_s(df) == pytest.approx(8.0)
    assert m.throughput_rps(df) == pytest.approx(3 / 8)
    assert m.output_tokens_per_s(df) == pytest.approx((10 + 20 + 40) / 8)
    assert m.total_tokens_per_s(df) == pytest.approx((70 + 3000) / 8)


def overload() -> pd.DataFrame:
    """1 req/s offered for 100 s into a 0.5 req/s FIFO server: request i finishes at 2 (i + 1)."""
    i = np.arange(100)
    return frame(arrival_s=i.astype(float), finish_s=2.0 * (i + 1), ttft_s=np.ones(100))


def test_steady_throughput_under_overload_is_the_capacity():
    """Window [0.2 * 99, 99] = [19.8, 99]: finishes 20, 22, .., 98 -> 40 completions in 79.2 s."""
    assert m.steady_window(overload(), 0.2) == pytest.approx((19.8, 99.0))
    assert m.steady_throughput_rps(overload(), 0.2) == pytest.approx(40 / 79.2)
    assert m.steady_throughput_rps(overload(), 0.2) == pytest.approx(0.5, rel=0.02)
    assert m.throughput_rps(overload()) == pytest.approx(100 / 200)


def test_steady_throughput_under_light_load_is_the_offered_rate():
    """2 req/s, constant 5 s latency: window [19.9, 99.5] holds finishes of arrivals 15.0..94.5 (160)."""
    arrival = np.arange(200) * 0.5
    df = frame(arrival_s=arrival, finish_s=arrival + 5.0, ttft_s=np.ones(200))
    assert m.steady_throughput_rps(df, 0.2) == pytest.approx(160 / 79.6)


def test_steady_window_never_starts_before_the_first_completion():
    """With no warm-up the window starts at the first finish (2 s), not at the first arrival."""
    assert m.steady_window(overload(), 0.0) == (2.0, 99.0)
    assert m.steady_throughput_rps(overload(), 0.0) == pytest.approx(49 / 97)  # finishes 2..98


def test_steady_throughput_falls_back_to_run_throughput_when_the_window_is_empty():
    df = frame(arrival_s=[0.0, 1.0], finish_s=[10.0, 11.0], ttft_s=[1.0, 1.0])
    assert m.steady_throughput_rps(df, 0.2) == pytest.approx(2 / 11)


def test_slo_attainment_and_goodput_count_misses_and_failures():
    """Of 4 requests one meets both SLOs; one misses TTFT, one TPOT, one failed.

    Span: arrival 0 to the last completion's finish, 7 s."""
    df = frame(ttft_s=[1.0, 20.0, 1.0, 1.0], tpot_s=[0.020, 0.020, 0.030, 0.020], error=[None, None, None, "boom"])
    assert m.slo_attainment(df, ttft_slo_s=10.0, tpot_slo_s=0.025) == pytest.approx(0.25)
    assert m.goodput_rps(df, ttft_slo_s=10.0, tpot_slo_s=0.025) == pytest.approx(1 / 7)


def test_tpot_equal_to_the_slo_up_to_float_rounding_is_a_hit():
    df = frame(ttft_s=[1.0, 1.0], tpot_s=[0.025 * (1 + 1e-13), 0.0251])
    assert m.slo_met_mask(df, 10.0, 0.025).tolist() == [True, False]


def test_single_token_request_needs_only_the_ttft_slo():
    df = frame(ttft_s=[1.0], tpot_s=[np.nan])
    assert m.slo_attainment(df, 10.0, 0.025) == 1.0


@pytest.mark.parametrize(("routes", "expected"), [
    (["prfaas", "local", "prfaas", ""], 2 / 3),
    (["local", "local"], 0.0),
    (["prfaas", None], 1.0),
    (["", ""], math.nan),
])
def test_offload_fraction_is_the_share_of_routed_requests_sent_remote(routes, expected):
    df = frame(route=routes, ttft_s=[1.0] * len(routes))
    got = m.offload_fraction(df)
    assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected)


def test_cache_fractions_are_hits_and_skips_over_input_tokens():
    """Pool hits (block-level) and skipped prefill (usable) are separate: hybrids reuse less than they hit."""
    df = frame(input_tokens=[1000, 3000], cached_tokens=[0, 1000], ttft_s=[1.0, 1.0])
    df["cache_hit_tokens"] = [512, 1536]
    assert m.cache_hit_token_frac(df) == pytest.approx(0.512)
    assert m.cached_token_frac(df) == pytest.approx(0.25)
    assert m.prefill_tokens_computed(df) == 3000


def test_kv_bytes_prfaas_total_counts_only_remote_transfers():
    df = frame(route=["prfaas", "local", "prfaas"], kv_bytes_sent=[1e9, 5e9, 2e9], ttft_s=[1.0] * 3)
    assert m.kv_bytes_prfaas_total(df) == pytest.approx(3e9)


def test_egress_and_link_utilisation_follow_a_changing_capacity():
    """Egress 10 Gbps on a link that drops from 100 to 50 Gbps: utilisation 0.1 then 0.2."""
    ts = pd.DataFrame({"t_s": [0.0, 1.0, 2.0, 3.0], "egress_gbps": [10.0, 10.0, 10.0, 30.0],
                       "link_capacity_gbps": [100.0, 100.0, 50.0, 50.0]})
    assert m.egress_gbps(ts, "mean") == pytest.approx(15.0)
    assert m.egress_gbps(ts, "mean", 2.0, 3.0) == pytest.approx(20.0)
    assert m.egress_gbps(ts, "p99") == pytest.approx(np.percentile([10, 10, 10, 30], 99))
    assert m.link_util(ts, "mean") == pytest.approx((0.1 + 0.1 + 0.2 + 0.6) / 4)


def test_stage_util_means_cover_every_util_column():
    ts = pd.DataFrame({"t_s": [0.0, 1.0], "util_decode": [0.5, 1.0], "util_new_stage": [0.0, 0.2], "other": [1, 2]})
    assert m.stage_util_means(ts) == pytest.approx({"util_decode_mean": 0.75, "util_new_stage_mean": 0.1})


def test_lateness_statistics():
    df = frame(ttft_s=[1.0] * 3, lateness_s=[0.001, 0.002, 0.006])
    assert m.lateness(df, "mean") == pytest.approx(0.003)
    assert m.lateness(df, "max") == pytest.approx(0.006)
    assert math.isnan(m.lateness(frame(ttft_s=[1.0]), "mean"))


def test_capacity_is_the_max_steady_throughput_of_a_deployment():
    report = pd.DataFrame({"deployment": ["a", "a", "a", "b"], "steady_throughput_rps": [1.0, 2.1, 2.0, 5.0]})
    assert runs.capacity_rps(report, "a") == 2.1
    assert math.isnan(runs.capacity_rps(report, "missing"))


def test_metrics_of_an_empty_frame_are_nan_without_warnings():
    df = pd.DataFrame(columns=["deployment", "arrival_s", "finish_s", "ttft_s", "error"])
    assert math.isnan(m.ttft(df, "mean"))
    assert math.isnan(m.throughput_rps(df))
    assert math.isnan(m.steady_throughput_rps(df, 0.2))
