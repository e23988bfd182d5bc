"""A link's efficiency (goodput over the set rate) and FIFO sharing, with closed-form finish times.

The testbed's case: four 9.45 MB transfers started together on a 200 Mbit/s tbf-shaped veth, which
carries 1448 payload bytes per 1514-byte frame. FIFO: one after another at the payload rate; fair: all
together at the end.
"""

from __future__ import annotations

import pytest

from harness.clock import VirtualClock
from harness.deploy.fair_share import fifo_fill
from harness.deploy.link import Link
from harness.errors import InputError

EFF = 1448 / 1514
MB = 9.45e6
PAYLOAD_RATE = 0.2e9 / 8 * EFF  # bytes/s


def _four(sharing, efficiency=EFF, cancel=None):
    clock = VirtualClock()
    link = Link(clock, 0.2, efficiency=efficiency, sharing=sharing)
    done = {}
    flows = [link.transfer(MB, lambda i=i: done.__setitem__(i, clock.now())) for i in range(4)]
    if cancel is not None:
        at, which = cancel
        clock.call_at(at, lambda: link.cancel(flows[which]))
    clock.run()
    return link, done


def test_fifo_serves_the_transfers_one_after_another_at_the_payload_rate():
    _, done = _four("fifo")
    one = MB / PAYLOAD_RATE  # 0.395 s
    assert [done[i] for i in range(4)] == pytest.approx([one, 2 * one, 3 * one, 4 * one])


def test_fair_sharing_ends_them_together():
    _, done = _four("fair")
    assert [done[i] for i in range(4)] == pytest.approx([4 * MB / PAYLOAD_RATE] * 4)


def test_fair_at_full_efficiency_is_as_before():
    _, done = _four("fair", efficiency=1.0)
    assert [done[i] for i in range(4)] == pytest.approx([4 * MB / 25e6] * 4)  # 1.512 s


@pytest.mark.parametrize("sharing", ["fifo", "fair"])
def test_the_counters_count_wire_bytes_and_egress_stays_at_the_set_rate(sharing):
    link, done = _four(sharing)
    assert link.bytes_sent == pytest.approx(4 * MB / EFF)
    _, gbps, cap = link.egress_series(1.6, 0.4)
    assert list(gbps[:3]) == pytest.approx([0.2, 0.2, 0.2])  # the wire is full while anything is queued
    assert (gbps <= cap).all()
    assert gbps[3] * 0.4 == pytest.approx(0.2 * (done[3] - 1.2))  # the last bin: busy until the last ends


def test_cancelling_the_head_of_the_queue_starts_the_next_at_once():
    """The first is cancelled at 0.2 s: the second takes the link then and ends 0.395 s later."""
    _, done = _four("fifo", cancel=(0.2, 0))
    one = MB / PAYLOAD_RATE
    assert 0 not in done
    assert [done[i] for i in (1, 2, 3)] == pytest.approx([0.2 + one, 0.2 + 2 * one, 0.2 + 3 * one])


def test_cancelling_a_waiting_transfer_moves_only_those_behind_it():
    _, done = _four("fifo", cancel=(0.1, 1))
    one = MB / PAYLOAD_RATE
    assert [done[i] for i in (0, 2, 3)] == pytest.approx([one, 2 * one, 3 * one])


def test_fifo_fill_gives_each_its_cap_of_what_the_earlier_left():
    assert fifo_fill(10.0, [4.0, 100.0, 3.0]) == ([4.0, 6.0, 0.0], 10.0)
    assert fifo_fill(10.0, [2.0, 3.0]) == ([2.0, 3.0], 5.0)
    assert fifo_fill(0.0, [1.0]) == ([0.0], 0.0)


def test_a_producing_head_leaves_the_rest_to_the_next():
    """Layer-wise: the head's KV is produced over 1 s (9.45 MB/s), so it takes only that; the second
    takes the remaining 13.5 MB/s of payload."""
    clock = VirtualClock()
    link = Link(clock, 0.2, efficiency=EFF, sharing="fifo")
    done = {}
    link.transfer(MB, lambda: done.__setitem__(0, clock.now()), produce_s=1.0)
    link.transfer(MB, lambda: done.__setitem__(1, clock.now()))
    clock.run()
    assert done[0] == pytest.approx(1.0)
    assert done[1] == pytest.approx(MB / (PAYLOAD_RATE - MB))


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"sharing": "wfq"}, r"link\.sharing must be one of fair, fifo"),
    ({"efficiency": 0.0}, r"link\.efficiency must be a finite number > 0"),
    ({"efficiency": 1.2}, r"link\.efficiency must be in \(0, 1\]"),
])
def test_bad_link_options_name_the_field(kwargs, message):
    with pytest.raises(InputError, match=message):
        Link(VirtualClock(), 0.2, **kwargs)
