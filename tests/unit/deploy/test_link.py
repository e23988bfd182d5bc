"""The fluid link model: fair sharing, TCP caps, pipelining, capacity changes, egress series.

Expected times are worked out by hand in the comments (1 Gbit = 1.25e8 bytes).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from omegaconf import OmegaConf

from harness.clock import VirtualClock
from harness.config.deployment import LinkConfig
from harness.deploy.link import Flow, Link
from harness.errors import InputError

GBIT = 1.25e8  # bytes


def approx(x: float) -> object:
    return pytest.approx(x, rel=1e-9, abs=1e-12)


def run(link_kwargs: dict, flows: list[tuple[float, float, float]],
        actions: list[tuple[float, float]] = (), *,
        start_s: float = 0.0) -> tuple[list[float], Link, VirtualClock]:
    """Start flows (start_s, nbytes, produce_s), apply set_capacity actions (t_s, gbps), run.

    Returns each flow's on_done time (nan if it never completed).
    """
    clock = VirtualClock(start=start_s)
    link = Link(clock, **link_kwargs)
    done = [math.nan] * len(flows)
    for i, (start, nbytes, produce_s) in enumerate(flows):
        def start_flow(i: int = i, nbytes: float = nbytes, produce_s: float = produce_s) -> None:
            def on_done() -> None:
                done[i] = clock.now()
            link.transfer(nbytes, on_done, produce_s=produce_s)
        clock.call_at(start, start_flow)
    for t, gbps in actions:
        clock.call_at(t, lambda gbps=gbps: link.set_capacity(gbps))
    clock.run()
    return done, link, clock


@pytest.mark.parametrize(("capacity_gbps", "nbytes", "rtt_s", "expected_s"), [
    (100.0, 100 * GBIT, 0.0, 1.0),
    (100.0, 100 * GBIT, 0.01, 1.005),  # + one-way delay rtt/2
    (800.0, 8 * GBIT, 0.002, 0.011),  # intra-cluster RDMA: 8 Gbit / 800 Gbps = 10 ms, + 1 ms
    (10.0, 10 * GBIT, 0.05, 1.025),
    (2.5, 1 * GBIT, 0.0, 0.4),
])
def test_single_flow_takes_bytes_over_capacity_plus_half_rtt(capacity_gbps, nbytes, rtt_s,
                                                             expected_s):
    """A lone uncapped flow runs at the full capacity and arrives rtt/2 after its last byte."""
    done, link, _ = run(dict(capacity_gbps=capacity_gbps, rtt_s=rtt_s), [(0.0, nbytes, 0.0)])
    assert done[0] == approx(expected_s)
    assert link.active_flows == 0
    assert link.bytes_sent == pytest.approx(nbytes, rel=1e-9)


@pytest.mark.parametrize("n_flows", [2, 3, 5])
def test_equal_flows_started_together_finish_together(n_flows):
    """n equal flows share the link equally and all finish at n times the lone duration."""
    done, _, _ = run(dict(capacity_gbps=100.0), [(0.0, 100 * GBIT, 0.0)] * n_flows)
    assert done == [approx(float(n_flows))] * n_flows


def test_flow_started_midway_shares_fairly():
    """A: 200 Gbit at t=0; B: 50 Gbit at t=1 on 100 Gbps.

    [0,1): A alone at 100 -> 100 Gbit left. [1,2): 50 each -> B done at 2, A has 50 left.
    [2,2.5): A alone at 100 -> done at 2.5.
    """
    done, _, _ = run(dict(capacity_gbps=100.0), [(0.0, 200 * GBIT, 0.0), (1.0, 50 * GBIT, 0.0)])
    assert done == [approx(2.5), approx(2.0)]


def test_water_filling_gives_unused_share_to_the_uncapped_flow():
    """P produces 20 Gbit over 2 s (cap 10 Gbps); B: 45 Gbit, on 100 Gbps.

    Max-min fair: P 10, B 90 -> B done at 0.5 (an equal split would give 0.9); P ends with
    production at 2.0.
    """
    done, _, _ = run(dict(capacity_gbps=100.0), [(0.0, 20 * GBIT, 2.0), (0.0, 45 * GBIT, 0.0)])
    assert done == [approx(2.0), approx(0.5)]


def test_production_end_lifts_the_cap_of_a_flow_that_fell_behind():
    """On 90 Gbps: P produces 90 Gbit over 2 s (cap 45 Gbps); B1, B2: 30 Gbit each.

    [0,1): 30 each (share 30 < 45), B1 and B2 done at 1, P has 30 Gbit. [1,2): P alone but
    capped at 45 -> 75 Gbit. At 2 production ends: 15 Gbit at 90 Gbps -> done at 2 + 1/6.
    """
    done, _, _ = run(dict(capacity_gbps=90.0),
                     [(0.0, 90 * GBIT, 2.0), (0.0, 30 * GBIT, 0.0), (0.0, 30 * GBIT, 0.0)])
    assert done == [approx(2 + 1 / 6), approx(1.0), approx(1.0)]


@pytest.mark.parametrize(("connections", "expected_s"), [
    (1, 10.0),  # 10 Gbps
    (4, 2.5),  # 40 Gbps
    (10, 1.0),  # 100 Gbps: exactly fills the link
    (16, 1.0),  # 160 Gbps of connections, still 100 Gbps of link
])
def test_per_connection_cap_times_connections(connections, expected_s):
    """100 Gbit over a 100 Gbps link with 10 Gbps per connection."""
    done, _, _ = run(dict(capacity_gbps=100.0, connections=connections, per_connection_gbps=10.0),
                     [(0.0, 100 * GBIT, 0.0)])
    assert done[0] == approx(expected_s)


def test_per_connection_cap_leaves_room_for_other_flows():
    """Two flows of 20 Gbit capped at 30 Gbps each on 100 Gbps: both at 30, done at 2/3 s."""
    done, link, _ = run(dict(capacity_gbps=100.0, per_connection_gbps=30.0),
                        [(0.0, 20 * GBIT, 0.0)] * 2)
    assert done == [approx(2 / 3)] * 2
    assert link.rate_gbps == 0.0
    _, rate, _ = link.change_points()
    assert rate.max() == approx(60.0)


# Mathis: MSS*8 / (RTT*sqrt(2p/3)); with MSS 1250 B, RTT 10 ms, p = 1.5e-4:
# sqrt(2p/3) = 0.01, so 10,000 bit / 1e-4 s = 0.1 Gbps per connection.
@pytest.mark.parametrize(("loss_rate", "connections", "expected_s"), [
    (0.0, 1, 0.01 + 0.005),  # no loss: 1 Gbit at 100 Gbps, + rtt/2
    (1.5e-4, 1, 10.0 + 0.005),  # 0.1 Gbps
    (1.5e-4, 100, 0.1 + 0.005),  # 10 Gbps
    (1.5e-4, 5000, 0.01 + 0.005),  # 500 Gbps of connections: the link is full again
])
def test_loss_lowers_rate_by_mathis_ceiling_and_connections_restore_it(loss_rate, connections,
                                                                       expected_s):
    done, _, _ = run(dict(capacity_gbps=100.0, rtt_s=0.01, mss_bytes=1250, loss_rate=loss_rate,
                          connections=connections), [(0.0, 1 * GBIT, 0.0)])
    assert done[0] == approx(expected_s)


@pytest.mark.parametrize(("capacity_gbps", "expected_s"), [
    (100.0, 1.0 + 0.005),  # production (10 Gbps) is the bottleneck: ends with production
    (10.0, 1.0 + 0.005),  # exactly balanced
    (5.0, 2.0 + 0.005),  # the link is the bottleneck: 10 Gbit / 5 Gbps
])
def test_pipelined_flow_finishes_with_production_or_link(capacity_gbps, expected_s):
    """10 Gbit produced over 1 s, RTT 10 ms."""
    done, _, _ = run(dict(capacity_gbps=capacity_gbps, rtt_s=0.01), [(0.0, 10 * GBIT, 1.0)])
    assert done[0] == approx(expected_s)


def test_flow_never_gets_ahead_of_production():
    """On a fast link a producing flow sends exactly what has been produced so far."""
    clock = VirtualClock()
    link = Link(clock, 100.0)
    flow = link.transfer(10 * GBIT, lambda: None, produce_s=1.0)
    for t in (0.1, 0.3, 0.75, 0.999):
        clock.run(until=t)
        assert flow.sent_bytes == approx(t * 10 * GBIT)
        assert flow.rate_gbps == approx(10.0) and link.rate_gbps == approx(10.0)
    clock.run()
    assert flow.finish_s == approx(1.0)


def test_flow_behind_production_catches_up_at_fair_share():
    """On 10 Gbps: A produces 10 Gbit over 1 s, B sends 20 Gbit.

    [0,1): 5 each (A is behind: 5 of 10 Gbit sent). [1,2): production over, still 5 each -> A
    done at 2 with B at 10 Gbit. [2,3): B alone at 10 -> done at 3.
    """
    clock = VirtualClock()
    link = Link(clock, 10.0)
    a = link.transfer(10 * GBIT, lambda: None, produce_s=1.0)
    b = link.transfer(20 * GBIT, lambda: None)
    clock.run(until=0.5)
    assert a.sent_bytes == approx(2.5 * GBIT)
    clock.run(until=1.5)
    assert link.rate_gbps == approx(10.0)
    assert a.sent_bytes == approx(7.5 * GBIT)
    assert b.sent_bytes == approx(7.5 * GBIT)
    clock.run()
    assert (a.finish_s, b.finish_s) == (approx(2.0), approx(3.0))


@pytest.mark.parametrize("how", ["schedule", "set_capacity"])
@pytest.mark.parametrize(("new_gbps", "expected_s"), [
    (50.0, 3.0),  # 100 Gbit sent by t=1, 100 left at 50 Gbps -> 2 s more
    (200.0, 1.5),  # 100 left at 200 Gbps -> 0.5 s more
    (100.0, 2.0),  # no change
])
def test_capacity_change_mid_transfer_stretches_it(how, new_gbps, expected_s):
    """200 Gbit on 100 Gbps, capacity changes at t=1."""
    kwargs: dict = dict(capacity_gbps=100.0)
    actions: list[tuple[float, float]] = []
    if how == "schedule":
        kwargs["capacity_schedule"] = [(1.0, new_gbps)]
    else:
        actions = [(1.0, new_gbps)]
    done, _, _ = run(kwargs, [(0.0, 200 * GBIT, 0.0)], actions)
    assert done[0] == approx(expected_s)


def test_capacity_zero_stalls_then_resumes():
    """200 Gbit: 100 sent by t=1, link down [1,4), the other 100 in [4,5)."""
    done, link, _ = run(dict(capacity_gbps=100.0, capacity_schedule=[(1.0, 0.0), (4.0, 100.0)]),
                        [(0.0, 200 * GBIT, 0.0)])
    assert done[0] == approx(5.0)
    _, egress, capacity = link.egress_series(6.0, 1.0)
    np.testing.assert_allclose(egress, [100, 0, 0, 0, 100, 0], atol=1e-9)
    np.testing.assert_allclose(capacity, [100, 0, 0, 0, 100, 100], atol=1e-9)


def test_link_down_without_schedule_waits_for_set_capacity():
    """With no event pending the stalled flow waits; set_capacity at t=10 resumes it."""
    clock = VirtualClock()
    link = Link(clock, 100.0, capacity_schedule=[(1.0, 0.0)])
    done: list[float] = []
    flow = link.transfer(200 * GBIT, lambda: done.append(clock.now()))
    clock.run()
    assert done == [] and link.active_flows == 1 and clock.now() == 1.0
    assert flow.sent_bytes == approx(100 * GBIT)
    clock.call_at(10.0, lambda: link.set_capacity(100.0))
    clock.run()
    assert done == [approx(11.0)]


def test_egress_series_bins_are_exact_means():
    """A lone 125 Gbit flow on 100 Gbps runs over [0, 1.25): 1 s bins read 100 then 25."""
    _, link, _ = run(dict(capacity_gbps=100.0), [(0.0, 125 * GBIT, 0.0)])
    t, egress, capacity = link.egress_series(3.0, 1.0)
    np.testing.assert_allclose(t, [0.0, 1.0, 2.0])
    np.testing.assert_allclose(egress, [100.0, 25.0, 0.0], atol=1e-9)
    np.testing.assert_allclose(capacity, [100.0, 100.0, 100.0])


def test_egress_series_bins_may_start_before_the_link_existed():
    """Link built at t=10, 100 Gbit from 10 to 11 on 100 Gbps; bins of 1 s from 9.5.

    Before the link existed nothing was sent and the capacity reads as the initial one.
    """
    clock = VirtualClock(start=10.0)
    link = Link(clock, 100.0)
    link.transfer(100 * GBIT, lambda: None)
    clock.run()
    t, egress, capacity = link.egress_series(12.0, 1.0, t_start=9.5)
    np.testing.assert_allclose(t, [9.5, 10.5, 11.5])
    np.testing.assert_allclose(egress, [50.0, 50.0, 0.0], atol=1e-9)
    np.testing.assert_allclose(capacity, [100.0, 100.0, 100.0], atol=1e-9)


def test_egress_series_integrates_to_bytes_sent_and_stays_under_capacity():
    """Many overlapping flows with changing capacity: the series conserves bytes and <= capacity."""
    rng = np.random.default_rng(7)
    n = 60
    flows = [(float(s), float(b), float(p)) for s, b, p in zip(
        rng.uniform(0, 20, n), rng.uniform(0.1, 40, n) * GBIT,
        np.where(rng.random(n) < 0.5, 0.0, rng.uniform(0.1, 3, n)), strict=True)]
    schedule = [(3.0, 40.0), (7.5, 0.0), (9.0, 100.0), (15.2, 25.0)]
    done, link, _ = run(dict(capacity_gbps=100.0, connections=2, per_connection_gbps=30.0,
                             capacity_schedule=schedule), flows)
    assert not any(math.isnan(d) for d in done)
    total = sum(b for _, b, _ in flows)
    assert link.bytes_sent == pytest.approx(total, rel=1e-9)
    _, egress, capacity = link.egress_series(200.0, 0.1)
    assert egress.sum() * 0.1 * GBIT == pytest.approx(total, rel=1e-9)
    assert np.all(egress <= capacity * (1 + 1e-9) + 1e-9)
    t, rate, cap = link.change_points()
    assert np.all(rate <= cap * (1 + 1e-12))
    assert np.all(np.diff(t) > 0)


@pytest.mark.parametrize("rtt_s", [0.0, 0.01])
def test_zero_byte_transfer_completes_after_half_rtt(rtt_s):
    done, link, _ = run(dict(capacity_gbps=100.0, rtt_s=rtt_s), [(2.0, 0.0, 0.0)])
    assert done[0] == approx(2.0 + rtt_s / 2)
    assert link.bytes_sent == 0.0


@pytest.mark.parametrize("t0_s", [0.0, 1e7])
def test_all_flows_at_once_are_work_conserving_with_few_events(t0_s):
    """300 uncapped flows of awkward sizes from t0: the last ends at total/capacity, and the
    event count stays linear (no storm of tiny events from rounding crumbs, which appear when
    the clock reads large times)."""
    rng = np.random.default_rng(3)
    sizes = rng.uniform(1e3, 1e9, 300) * (1 + 1e-13 * rng.random(300))
    done, _, clock = run(dict(capacity_gbps=37.3), [(t0_s, float(b), 0.0) for b in sizes],
                         start_s=t0_s)
    # Times near 1e7 s resolve to ~2e-9 s: allow a few ulps there.
    tol_s = 64 * math.ulp(t0_s) if t0_s else 0.0
    assert max(done) - t0_s == pytest.approx(sizes.sum() / (37.3 * GBIT), rel=1e-9, abs=tol_s)
    # 300 starts + 300 on_done callbacks + 1 shared start event + 300 completions.
    assert clock.events_run <= 3 * len(sizes) + 1


def test_transfer_from_on_done_and_active_flows():
    """A flow started from another's on_done callback runs; active_flows counts flows in flight."""
    clock = VirtualClock(start=100.0)
    link = Link(clock, 8.0)
    finished: list[float] = []
    first = link.transfer(1 * GBIT, lambda: second.append(link.transfer(
        1 * GBIT, lambda: finished.append(clock.now()))))
    second: list[Flow] = []
    assert link.active_flows == 1
    clock.run(until=100.2)  # first done at 100.125 (1 Gbit at 8 Gbps)
    assert first.done and link.active_flows == 1
    clock.run()
    assert finished == [approx(100.25)] and link.active_flows == 0


def test_from_config_converts_rtt_ms_and_reads_the_schedule():
    """10 Gbit at 2 x 2.5 Gbps: 5 Gbit by t=1, then the link drops to 2.5 Gbps -> 2 s more,
    + 10 ms (half of the 20 ms RTT)."""
    cfg = OmegaConf.structured(LinkConfig(name="wan", capacity_gbps=10.0, rtt_ms=20.0,
                                          connections=2, per_connection_gbps=2.5,
                                          capacity_schedule=[[1.0, 2.5]]))
    clock = VirtualClock()
    link = Link.from_config(clock, cfg)
    done: list[float] = []
    link.transfer(10 * GBIT, lambda: done.append(clock.now()))
    clock.run()
    assert link.name == "wan" and done == [approx(3.01)]


@pytest.mark.parametrize(("kwargs", "field"), [
    (dict(capacity_gbps=-1.0), "capacity_gbps"),
    (dict(capacity_gbps=float("nan")), "capacity_gbps"),
    (dict(capacity_gbps=10.0, connections=0), "connections"),
    (dict(capacity_gbps=10.0, connections=2.5), "connections"),
    (dict(capacity_gbps=10.0, connections=True), "connections"),
    (dict(capacity_gbps=10.0, capacity_schedule=[5.0]), "capacity_schedule[0]"),
    (dict(capacity_gbps=10.0, loss_rate=1.0), "loss_rate"),
    (dict(capacity_gbps=10.0, loss_rate=-0.1), "loss_rate"),
    (dict(capacity_gbps=10.0, rtt_s=-0.001), "rtt_s"),
    (dict(capacity_gbps=10.0, per_connection_gbps=0.0), "per_connection_gbps"),
    (dict(capacity_gbps=10.0, mss_bytes=0), "mss_bytes"),
    (dict(capacity_gbps=10.0, capacity_schedule=[(1.0,)]), "capacity_schedule[0]"),
    (dict(capacity_gbps=10.0, capacity_schedule=[(1.0, -5.0)]), "capacity_schedule[0]"),
    (dict(capacity_gbps=10.0, capacity_schedule=[(2.0, 5.0), (1.0, 5.0)]),
     "capacity_schedule[1]"),
])
def test_bad_link_parameters_name_the_field(kwargs, field):
    with pytest.raises(InputError, match=r"link\." + field.replace("[", r"\[").replace("]", r"\]")):
        Link(VirtualClock(), **kwargs)


@pytest.mark.parametrize(("call", "field"), [
    (lambda link: link.transfer(-1.0, lambda: None), "nbytes"),
    (lambda link: link.transfer(float("inf"), lambda: None), "nbytes"),
    (lambda link: link.transfer(1.0, lambda: None, produce_s=-1.0), "produce_s"),
    (lambda link: link.set_capacity(-3.0), "capacity_gbps"),
    (lambda link: link.egress_series(10.0, 0.0), "bin_s"),
    (lambda link: link.egress_series(-1.0, 1.0), "t_end"),
])
def test_bad_calls_name_the_field(call, field):
    link = Link(VirtualClock(), 10.0)
    with pytest.raises(InputError, match=field) as err:
        call(link)
    assert "got" in str(err.value)


def test_backlog_counts_produced_but_unsent_bytes():
    """8 MB produced over 1 s on a 16 Mbit/s (2 MB/s) link: at 1 s, 8 MB made, 2 MB sent, 6 MB wait (3 s)."""
    clock = VirtualClock()
    link = Link(clock, 0.016)
    link.transfer(8e6, lambda: None, produce_s=1.0)
    seen = {}
    clock.call_at(0.5, lambda: seen.__setitem__(0.5, (link.backlog_bytes, link.backlog_s())))
    clock.call_at(1.0, lambda: seen.__setitem__(1.0, (link.backlog_bytes, link.backlog_s())))
    clock.run()
    assert seen[0.5][0] == pytest.approx(3e6)
    assert seen[1.0][0] == pytest.approx(6e6)
    assert seen[1.0][1] == pytest.approx(3.0)
    assert link.backlog_bytes == 0.0


def test_loss_spike_lowers_the_flow_cap_mid_transfer():
    """8 MB on a fast link with 1 connection; at 0.1 s loss 1% at 10 ms RTT caps it at the Mathis rate."""
    clock = VirtualClock()
    link = Link(clock, 100.0, rtt_s=0.010, mss_bytes=1460)
    done = []
    link.transfer(8e6 * 100, lambda: done.append(clock.now()))  # 800 MB: 64 ms at 100 Gbps
    clock.call_at(0.032, lambda: link.set_conditions(loss_rate=0.01))
    clock.run()
    mathis_bps = 1460 * 8 / (0.010 * math.sqrt(2 * 0.01 / 3))
    sent_before = 100e9 / 8 * 0.032
    expected = 0.032 + (8e8 - sent_before) * 8 / mathis_bps + 0.005
    assert done[0] == pytest.approx(expected, rel=1e-9)


def test_cancelled_flows_free_the_link_and_never_complete():
    clock = VirtualClock()
    link = Link(clock, 0.008)  # 1 MB/s
    done = []
    a = link.transfer(1e6, lambda: done.append("a"))
    link.transfer(1e6, lambda: done.append(("b", clock.now())))
    clock.call_at(0.5, lambda: link.cancel(a))
    clock.run()
    # b had 0.25 MB by 0.5 s, then the whole link: 0.75 MB more at 1 MB/s
    assert done == [("b", pytest.approx(1.25))]


@pytest.mark.parametrize(("override", "message"), [
    ("link.rtt_ms=-5", "link.rtt_ms must be a finite number >= 0, got -5.0"),  # was "link.rtt_s ... got -0.005"
    ("deployment.local.rdma_gbps=0", "deployment.local.rdma_gbps must be > 0, got 0.0"),  # was link.per_connection_gbps
])
def test_a_bad_link_setting_is_named_by_its_own_key(compose_cfg, override, message):
    from harness.deploy.build import build

    with pytest.raises(InputError) as err:
        build(compose_cfg([override, "workload.num_requests=5"]), VirtualClock())
    assert str(err.value) == message


def test_reproduce_moves_the_production_end_and_the_flow_follows():
    """10 MB produced over 10 s on an 80 Mbit/s (10 MB/s) link: the flow keeps pace with production.
    At 4 s (4 MB produced and sent) production is to end at 5 s instead: the other 6 MB come in that
    second, at 6 MB/s (under the link's 10), so the flow ends at 5 s, not 10 s, and never runs ahead
    of what is produced."""
    clock = VirtualClock()
    link = Link(clock, 0.08)
    done: list[float] = []
    flow = link.transfer(10e6, lambda: done.append(clock.now()), produce_s=10.0)
    seen: dict[str, float] = {}
    clock.call_at(4.0, lambda: link.reproduce(flow, 5.0))
    clock.call_at(4.5, lambda: seen.update(sent=flow.sent_bytes, backlog=link.backlog_bytes))
    clock.run()
    assert done == [approx(5.0)]
    assert seen["sent"] == pytest.approx(7e6) and seen["backlog"] == pytest.approx(0.0, abs=1e-3)


def test_reproduce_on_a_slow_link_leaves_the_catch_up_to_the_link():
    """The same flow on an 8 Mbit/s (1 MB/s) link: moving the production end does not make the link
    faster, the flow still ends when its 10 MB have crossed at 1 MB/s (10 s), with a backlog between."""
    clock = VirtualClock()
    link = Link(clock, 0.008)
    done: list[float] = []
    flow = link.transfer(10e6, lambda: done.append(clock.now()), produce_s=10.0)
    seen: dict[str, float] = {}
    clock.call_at(4.0, lambda: link.reproduce(flow, 5.0))
    clock.call_at(5.0, lambda: seen.update(backlog=link.backlog_bytes))
    clock.run()
    assert done == [approx(10.0)]
    assert seen["backlog"] == pytest.approx(5e6)  # all 10 MB produced, 5 MB sent
