"""The one reading of loadgen.*: open or closed loop, saturation, offered rate, bad values."""

from __future__ import annotations

import math

import pytest

from harness.errors import InputError
from harness.runs.offer import make_offer, offered_rate
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
