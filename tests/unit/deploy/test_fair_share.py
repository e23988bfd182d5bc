"""The link's parts on their own: water-filling, the Mathis cap, the rate log (hand-worked numbers)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from harness.deploy.fair_share import per_connection_bps, water_fill
from harness.deploy.rate_log import RateLog
from harness.errors import InputError


def test_small_demands_get_their_cap_and_the_rest_split_what_is_left():
    # 10 units: caps 1 and 2 are below the fair 2.5, so they get them; 7 left for two -> 3.5 each.
    rates, agg = water_fill(10.0, [100.0, 1.0, 100.0, 2.0])
    assert rates == [3.5, 1.0, 3.5, 2.0]
    assert agg == 10.0


def test_uncapped_demands_split_equally_and_fill_the_capacity():
    rates, agg = water_fill(9.0, [math.inf] * 3)
    assert rates == [3.0, 3.0, 3.0] and agg == 9.0


def test_demands_below_capacity_leave_it_unused():
    rates, agg = water_fill(10.0, [1.0, 2.0])
    assert rates == [1.0, 2.0] and agg == 3.0


def test_zero_capacity_and_no_demands():
    assert water_fill(0.0, [1.0, math.inf]) == ([0.0, 0.0], 0.0)
    assert water_fill(5.0, []) == ([], 0.0)


def test_mathis_ceiling_and_the_fixed_cap():
    # MSS 1500 B, RTT 10 ms, p = 1.5e-4: sqrt(2p/3) = 0.01 -> 12000 bit / (0.01 s * 0.01) = 1.2e8 bit/s.
    assert per_connection_bps(math.inf, 1.5e-4, 0.01, 1500) == pytest.approx(1.2e8, rel=1e-12)
    assert per_connection_bps(5e7, 1.5e-4, 0.01, 1500) == 5e7  # a lower fixed cap wins
    assert per_connection_bps(math.inf, 0.0, 0.01, 1500) == math.inf  # no loss: no ceiling
    assert per_connection_bps(3e9, 1e-3, 0.0, 1500) == 3e9  # no RTT: no ceiling


def test_rate_log_replaces_a_point_at_the_same_time_and_skips_repeats():
    log = RateLog()
    log.record(0.0, 1.0, 10.0)
    log.record(0.0, 2.0, 10.0)  # same instant: replaces
    log.record(1.0, 2.0, 10.0)  # unchanged: skipped
    log.record(2.0, 0.0, 5.0)
    t, rate, cap = log.change_points()
    assert t.tolist() == [0.0, 2.0] and rate.tolist() == [2.0, 0.0] and cap.tolist() == [10.0, 5.0]
    assert t.dtype == np.float64


def test_rate_log_egress_series_integrates_the_steps():
    log = RateLog()
    log.record(1.0, 8.0, 10.0)
    log.record(2.0, 0.0, 4.0)
    # Bins of 1.5 s from 0: [0,1.5) has 8 Gbps for 0.5 s -> 8/3; [1.5,3) has 8 for 0.5 s -> 8/3.
    # Capacity before the first point is the first capacity (10): (10*1.5)/1.5; (10*0.5+4*1)/1.5 = 6.
    starts, egress, capacity = log.egress_series(3.0, 1.5)
    assert starts.tolist() == [0.0, 1.5]
    assert egress == pytest.approx([8 / 3, 8 / 3], rel=1e-12)
    assert capacity == pytest.approx([10.0, 6.0], rel=1e-12)
    with pytest.raises(InputError, match="bin_s"):
        log.egress_series(3.0, 0.0)
