"""The generator's self-report: a run it could not offer as asked is marked invalid, with reasons."""

from __future__ import annotations

import pytest

from harness.loadgen.health import loadgen_health
from harness.loadgen.records import RequestRecord

MS = 1_000_000


def records(n, gap_ms, late_ms):
    out = []
    for i in range(n):
        r = RequestRecord(i, i * gap_ms * MS, 10, 10)
        r.sent_ns = r.scheduled_ns + late_ms * MS
        out.append(r)
    return out


LIMITS = dict(max_lateness_ms=10.0, min_rate_fraction=0.95, max_loop_lag_ms=20.0)


@pytest.mark.parametrize(("recs", "lags_ms", "open_loop", "valid", "reason"), [
    (records(11, 100, 1), [1, 2], True, True, ""),
    (records(11, 100, 30), [1], True, False, "send lateness"),
    (records(11, 100, 0), [1, 50, 50], True, False, "event-loop lag"),
    (records(11, 100, 30), [1], False, True, ""),  # closed loop: no schedule to be late for
])
def test_validity(recs, lags_ms, open_loop, valid, reason):
    h = loadgen_health(recs, [x * MS for x in lags_ms], open_loop=open_loop, time_scale=1.0, **LIMITS)
    assert h["valid"] is valid
    assert reason in h["invalid_reason"]


def test_rates_use_the_run_clock():
    """10 gaps of 100 ms at time_scale 10 are 10 gaps of 1 run-second: 1 req/s target and achieved."""
    h = loadgen_health(records(11, 100, 0), [], open_loop=True, time_scale=10.0, **LIMITS)
    assert h["target_rps"] == pytest.approx(1.0) and h["achieved_rps"] == pytest.approx(1.0)


def test_falling_behind_the_rate_is_invalid():
    """Sends that drift later and later: the achieved rate falls short of the target."""
    recs = records(11, 100, 0)
    for i, r in enumerate(recs):
        r.sent_ns = r.scheduled_ns + i * 20 * MS
    h = loadgen_health(recs, [], open_loop=True, time_scale=1.0, max_lateness_ms=1e9, min_rate_fraction=0.95,
                       max_loop_lag_ms=1e9)
    assert not h["valid"] and "achieved" in h["invalid_reason"]
    assert h["achieved_rps"] == pytest.approx(10 / 1.2)


def test_extra_problems_invalidate():
    h = loadgen_health(records(3, 100, 0), [], open_loop=True, time_scale=1.0, other_problems=["emulator lag"],
                       **LIMITS)
    assert not h["valid"] and h["invalid_reason"] == "emulator lag"
