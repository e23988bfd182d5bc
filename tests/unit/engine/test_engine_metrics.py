"""An engine's Prometheus text parsed as `harness.engine.metrics` reads it: series summed over label sets,
checked against what prometheus_client itself renders."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from harness.engine.metrics import metrics_url, parse_metrics


def test_histogram_sums_and_counts_add_up_over_labels():
    reg = CollectorRegistry()
    h = Histogram("vllm:request_prefill_time_seconds", "prefill", ["model_name", "engine"], registry=reg)
    h.labels("m", "0").observe(0.25)
    h.labels("m", "1").observe(0.5)
    c = Counter("llamacpp:prompt_seconds", "prompt", registry=reg)
    c.inc(1.5)
    got = parse_metrics(generate_latest(reg).decode())
    assert got["vllm:request_prefill_time_seconds_sum"] == pytest.approx(0.75)
    assert got["vllm:request_prefill_time_seconds_count"] == 2
    assert got["llamacpp:prompt_seconds_total"] == pytest.approx(1.5)


def test_label_values_with_spaces_and_timestamps():
    text = 'a_total{x="b c} d"} 3 1700000000\n# HELP a_total x\nb 2.5e-3\nbad{x="1"} nan-ish\n'
    assert parse_metrics(text) == {"a_total": 3.0, "b": 0.0025}


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1"])
def test_metrics_live_beside_v1(url):
    assert metrics_url(url) == "http://127.0.0.1:8000/metrics"
