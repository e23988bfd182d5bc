"""/metrics: Prometheus text that counts what the records say."""

from __future__ import annotations

import math
import re
from collections import deque
from types import SimpleNamespace

import pytest

from harness.live.metrics import Histogram, ServerMetrics

_SAMPLE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? \S+$')


@pytest.mark.parametrize(("values", "expected_cumulative"), [
    ([], [0, 0, 0, 0]),
    ([0.5], [1, 1, 1, 1]),
    ([1.0, 1.5], [1, 2, 2, 2]),  # le is inclusive
    ([3.0, 9.0, math.nan], [0, 0, 1, 2]),  # NaN is not observed
])
def test_histogram_buckets_are_cumulative_and_inclusive(values, expected_cumulative):
    h = Histogram((1.0, 2.0, 5.0))
    for v in values:
        h.observe(v)
    counts = [int(line.rsplit(" ", 1)[1]) for line in h.lines("x") if "_bucket" in line]
    assert counts == expected_cumulative


def _engine():
    dep = SimpleNamespace(cross_link=None, in_flight={1: None}, waiting=deque([1, 2]),
                          prefill={"local": [SimpleNamespace(queue=deque([1]), running=[1])],
                                   "prfaas": [SimpleNamespace(queue=deque(), running=[])]},
                          decode=[SimpleNamespace(running=3)])
    clock = SimpleNamespace(now=lambda: 12.5, time_scale=10.0, max_lag_s=0.02)
    return SimpleNamespace(deployment=dep, clock=clock)


def test_render_counts_records_and_reads_gauges():
    """Every sample line is well formed; counters follow the records, gauges the deployment."""
    m = ServerMetrics()
    m.on_submit(SimpleNamespace(input_tokens=100))
    m.on_record({"route": "prfaas", "error": None, "cached_tokens": 64, "kv_bytes_sent": 1e6,
                 "output_tokens": 8, "ttft_s": 0.3, "tpot_s": 0.02, "e2e_s": 0.5})
    m.on_record({"route": "local", "error": "boom", "cached_tokens": 0, "kv_bytes_sent": 0.0,
                 "output_tokens": 0, "ttft_s": math.nan, "tpot_s": math.nan, "e2e_s": math.nan})
    m.http["/v1/completions", 200] += 2
    text = m.render(_engine())
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert all(_SAMPLE.match(line) for line in samples), [s for s in samples if not _SAMPLE.match(s)]
    values = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in samples}
    assert values['harness_requests_finished_total{status="completed",route="prfaas"}'] == 1
    assert values['harness_requests_finished_total{status="failed",route="local"}'] == 1
    assert values["harness_prompt_tokens_total"] == 100
    assert values["harness_generation_tokens_total"] == 8
    assert values["harness_prefix_cache_hit_tokens_total"] == 64
    assert values['harness_kv_transfer_bytes_total{route="prfaas"}'] == 1e6
    assert values['harness_prefill_queue_requests{cluster="local"}'] == 1
    assert values["harness_decode_waiting_requests"] == 2
    assert values["harness_decode_running_requests"] == 3
    assert values["harness_ttft_seconds_count"] == 1
    assert values['harness_ttft_seconds_bucket{le="0.5"}'] == 1
    assert values['harness_http_responses_total{endpoint="/v1/completions",code="200"}'] == 2
    assert values["harness_timer_lag_max_seconds"] == pytest.approx(0.002)
