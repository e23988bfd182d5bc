"""The one reading of loadgen.*: open or closed loop, saturation, offered rate, bad values."""

from __future__ import annotations

import math

import pytest

from harness.analysis.metrics import arrival_rps
from harness.errors import InputError
from harness.runs.offer import make_offer, offered_rate
from harness.runs.sim import run_sim
from harness.workload.arrivals import Constant
from harness.workload.request import Request

BASE = ["workload=fixed", "workload.num_requests=11", "workload.input_tokens=100", "workload.output_tokens=4"]


def test_rate_is_the_offered_rate_in_open_loop(compose_cfg):
    offer = make_offer(compose_cfg((*BASE, "loadgen.rate_rps=4")))
    assert offer.concurrency is None and offer.offered_rps == 4.0 and len(offer.requests) == 11


def test_inf_rate_saturates_with_a_closed_loop(compose_cfg):
    offer = make_offer(compose_cfg((*BASE, "loadgen.rate_rps=inf", "loadgen.saturation_in_flight=7")))
    assert offer.concurrency == 7 and math.isinf(offer.offered_rps)


def test_native_timing_offers_the_arrival_span_rate():
    reqs = [Request(i, t, 10, 2) for i, t in enumerate([0.0, 1.0, 2.0, 4.0, 5.0])]
    assert offered_rate(reqs, None, None) == pytest.approx(4 / 5.0)
    assert math.isnan(offered_rate(reqs, None, 3))  # a closed loop offers no rate
    assert math.isnan(offered_rate([Request(0, 1.0, 10, 2), Request(1, 1.0, 10, 2)], None, None))


@pytest.mark.parametrize("override,key", [("loadgen.rate_rps=0", "loadgen.rate_rps"),
                                          ("loadgen.concurrency=0", "loadgen.concurrency"),
                                          ("loadgen.warmup_s=-1", "loadgen.warmup_s")])
def test_bad_values_name_their_key(compose_cfg, override, key):
    with pytest.raises(InputError, match=key):
        make_offer(compose_cfg((*BASE, override)))


@pytest.mark.parametrize("rate", ["5", "inf"])
def test_a_closed_loop_and_a_rate_are_not_both_taken(compose_cfg, rate):
    """Before, the closed loop ignored the rate (the summary still said offered_rps=5), and a capacity run
    ignored the concurrency (it sized its own in-flight count)."""
    with pytest.raises(InputError, match=r"loadgen.concurrency=2 .* and loadgen.rate_rps=.* exclude each other"):
        make_offer(compose_cfg((*BASE, "loadgen.concurrency=2", f"loadgen.rate_rps={rate}")))


# A trace whose rate changes: 100 requests at 2.5 req/s (~40 s), then 400 at 25 req/s. loadgen.max_duration_s=30
# offers only the first phase's arrivals up to 30 s; the whole trace's span rate is ~8.4 req/s.
SHIFT = ["workload=traffic_shift", "workload.phases.0.num_requests=100", "workload.phases.1.num_requests=400",
         "workload.phases.1.arrivals.rate_rps=25", "workload.phases.0.output_lengths.value=4",
         "workload.phases.1.output_lengths.value=4", "loadgen.max_duration_s=30"]


def test_a_cut_offer_reports_the_rate_of_the_arrivals_offered():
    reqs = [Request(i, t, 10, 2) for i, t in enumerate([0.0, 1.0, 2.0, 4.0, 5.0, 5.1, 5.2, 5.3])]
    assert offered_rate(reqs, None, None, max_duration_s=4.0) == pytest.approx(3 / 4.0)  # 0, 1, 2, 4
    assert offered_rate(reqs, None, None, max_duration_s=5.05) == pytest.approx(4 / 5.0)  # ... and 5
    assert offered_rate(reqs, None, None, max_duration_s=1e9) == pytest.approx(7 / 5.3)  # all offered
    assert math.isnan(offered_rate(reqs, None, None, max_duration_s=0.5))  # one arrival: no rate
    assert offered_rate(reqs, 7.0, None, max_duration_s=4.0) == 7.0  # a configured rate is what was asked


def test_a_cut_lazy_offer_counts_arrivals_and_builds_no_request(monkeypatch):
    """make_offer(stream=True)'s stream, cut at 10 s of a 10^9-request workload: the rate comes from
    the arrival draws up to the cut (no Request built, nothing drawn past the cut's chunk)."""
    import harness.workload.synthetic as synthetic

    built = []
    monkeypatch.setattr(synthetic, "make_request", lambda *a: built.append(a))
    workload = synthetic.FixedWorkload(100, 4, Constant(2.0), num_requests=10**9, seed=0)
    stream = workload.stream(until_s=10.0)
    assert offered_rate(stream, None, None, max_duration_s=10.0) == pytest.approx(2.0)
    assert len(stream) == 21 and not built  # arrivals 0, 0.5, ..., 10.0
    whole = workload.stream()
    assert len(whole) == 10**9 and not built  # no cut: the count is num_requests, nothing drawn


def test_the_sim_run_reports_the_rate_it_offered(compose_cfg):
    cfg = compose_cfg(tuple(SHIFT))
    offer = make_offer(cfg, stream=True)
    whole = (len(offer.requests) - 1) / (offer.requests[-1].arrival_s - offer.requests[0].arrival_s)
    result = run_sim(cfg)
    assert 1.5 < result.meta["offered_rps"] < 4.0 < whole  # the first phase's ~2.5, not the trace's ~8.4
    # the arrival rate the summary measures over the requests the run recorded (all it offered)
    assert result.meta["offered_rps"] == pytest.approx(arrival_rps(result.requests), rel=1e-12)
    assert result.requests["arrival_s"].max() <= 30.0 < offer.requests[len(result.requests)].arrival_s
