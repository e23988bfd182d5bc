"""The emulator's hot paths, written out for speed, answer exactly as the plain code they replace.

Each test would fail if a fast path changed a value: the link's written-out water-filling against
`water_fill` itself, a stream's range block ids against its tuples (a whole sim run, to the last
bit), `make_request` against the dataclass constructor, the event count of a run a callback stops.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.clock import VirtualClock
from harness.deploy.fair_share import water_fill
from harness.deploy.link import Link
from harness.workload.request import FIELDS, Request, make_request, unique_hash_ids

GBIT = 1.25e8  # bytes


@settings(max_examples=150, deadline=None)
@given(capacity_gbps=st.sampled_from([0.0, 0.5, 3.0, 10.0, 100.0]),
       flow_cap_gbps=st.one_of(st.none(), st.floats(0.1, 50.0)),
       flows=st.lists(st.tuples(st.floats(0.0, 2.0), st.floats(1e3, 5e10), st.floats(0.0, 3.0)),
                      min_size=1, max_size=12),
       probe_s=st.floats(0.0, 4.0))
def test_link_rates_are_water_fill_of_the_caps(capacity_gbps, flow_cap_gbps, flows, probe_s):
    """At any event the flows' rates and the aggregate are `water_fill` of their caps (the producing
    ones capped at their production rate), in both of the link's branches: every flow at its cap,
    and some flows sharing what is left."""
    clock = VirtualClock()
    link = Link(clock, capacity_gbps, per_connection_gbps=flow_cap_gbps)
    given_to: dict[int, tuple[float, float, float]] = {}  # id(flow) -> the (start, nbytes, produce_s) it was given

    def start_flow(start: float, nbytes: float, produce_s: float) -> None:
        given_to[id(link.transfer(nbytes, lambda: None, produce_s=produce_s))] = (start, nbytes, produce_s)

    for start, nbytes, produce_s in flows:
        clock.fire_at(start, lambda s=start, n=nbytes, p=produce_s: start_flow(s, n, p))
    clock.run(until=probe_s)
    link._update()  # an event now: the state the link leaves after it
    now = clock.now()
    # Each flow's cap from this test's own inputs, not the link's fields: one connection of
    # flow_cap_gbps (no loss: no Mathis ceiling), or none; while producing (start <= now <
    # start + produce_s) also its production rate nbytes / produce_s (layer-wise pipelining).
    flow_cap = math.inf if flow_cap_gbps is None else flow_cap_gbps * GBIT

    def cap(start: float, nbytes: float, produce_s: float) -> float:
        return min(nbytes / produce_s, flow_cap) if start <= now < start + produce_s else flow_cap

    caps = [cap(*given_to[id(f)]) for f in link._flows]
    rates, agg = water_fill(capacity_gbps * GBIT, caps)
    assert [f._rate for f in link._flows] == rates
    assert link._agg == agg
    t, rate_gbps, _ = link.change_points()
    assert t[-1] <= now and rate_gbps[-1] == agg / GBIT  # the log's state from now on (a repeat adds no point)


def test_range_block_ids_are_the_tuples_ids():
    inputs = [1, 512, 513, 40_000, 7]
    tuples = unique_hash_ids(inputs, 512, first_id=10)
    ranges = unique_hash_ids(inputs, 512, first_id=10, as_ranges=True)
    assert all(isinstance(r, range) for r in ranges)
    assert [tuple(r) for r in ranges] == tuples and [len(r) for r in ranges] == [1, 1, 2, 79, 1]


def test_a_sim_run_is_the_same_with_range_block_ids(compose_cfg, monkeypatch):
    """The paper workload's pools forget blocks, so its stream hands ranges; with tuples the run
    gives the same records, bit for bit, and the same event count."""
    from harness.runs.sim import run_sim
    from harness.workload.synthetic import RequestStream

    cfg = compose_cfg(["workload.num_requests=400", "loadgen.rate_rps=3.0", "loadgen.progress=false"])
    seen: list[type] = []
    build = RequestStream._build

    def spy(self, lo, hi):
        out = build(self, lo, hi)
        seen.extend(type(r.hash_ids) for r in out[:1])
        return out

    monkeypatch.setattr(RequestStream, "_build", spy)
    fast = run_sim(cfg)
    assert range in seen  # the fast path was taken
    monkeypatch.setattr(RequestStream, "ids_as_ranges", lambda self: None)
    seen.clear()
    plain = run_sim(cfg)
    assert seen and range not in seen
    pd.testing.assert_frame_equal(fast.requests, plain.requests, check_exact=True)
    pd.testing.assert_frame_equal(fast.timeseries, plain.timeseries, check_exact=True)
    assert fast.meta["sim_events"] == plain.meta["sim_events"]


@pytest.mark.parametrize("args", [
    (3, 1.5, 100, 10, (1, 2), 7, 2),
    (0, 0.0, 1, 1, (), None, None),
    (5, 2.25, 513, 4, range(9, 11)),
])
def test_make_request_is_the_dataclass_request(args):
    made, plain = make_request(*args), Request(*args)
    assert made == plain and hash(made) == hash(plain) and type(made) is Request
    assert [getattr(made, f) for f in FIELDS] == [getattr(plain, f) for f in FIELDS]
    with pytest.raises(AttributeError):
        made.arrival_s = 1.0  # type: ignore[misc]  # still frozen


def test_a_callback_that_raises_is_still_counted():
    clock = VirtualClock()
    clock.fire_at(1.0, lambda: None)

    def boom() -> None:
        raise KeyboardInterrupt

    clock.fire_at(2.0, boom)
    clock.fire_at(3.0, lambda: None)
    with pytest.raises(KeyboardInterrupt):
        clock.run()
    assert clock.events_run == 2 and clock.now() == 2.0
    clock.run()
    assert clock.events_run == 3 and not math.isnan(clock.now())
