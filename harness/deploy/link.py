"""Fluid (flow-level) model of a network link carrying KV-cache transfers.

One `Link` stands for the cross-datacenter Ethernet link between a PrfaaS prefill cluster and
a local PD cluster, or for intra-cluster RDMA. Packets are not simulated: each transfer is a
fluid flow whose rate is piecewise constant between events.

Semantics (Gbps are 1e9 bit/s; sizes are bytes; times are seconds on the link's clock):

- Sharing is max-min fair (water-filling) among the flows in progress. Each flow is capped at
  `connections * per_connection_rate`, where the per-connection rate is the smaller of
  `per_connection_gbps` (None: no cap) and, when `loss_rate` p > 0 and `rtt_s` > 0, the Mathis
  TCP ceiling `MSS*8 / (RTT * sqrt(2p/3))` bit/s. The aggregate never exceeds the current
  capacity. Loss lowers a flow's throughput; enough parallel connections still fill the link.
- Layer-wise pipelining: with `produce_s` > 0 a flow's bytes are produced at a uniform rate
  over `produce_s` seconds from its start (the prefill runs while its KV streams out layer by
  layer). While producing, a flow's cap is also `nbytes / produce_s`, so it can never have sent
  more than was produced; a flow that fell behind catches up after production ends, at its
  fair share. A lone flow on a fast link finishes when production ends; on a slow link later.
- Completion: when a flow's last byte is sent, its `on_done` runs a further one-way
  propagation delay `rtt_s / 2` later (always through the clock, never re-entrantly). A
  zero-byte transfer completes `rtt_s / 2` after it starts.
- Capacity: `capacity_schedule` [(t_s, gbps), ...] (absolute clock times, non-decreasing) and
  `set_capacity` change it at any time. Capacity 0 means the link is down: flows stall and
  resume when capacity returns.
- Rates change only at events (flow start, production end, flow completion, capacity change).
  The link keeps a single pending timer for its next event; each event costs O(n log n) for n
  flows in progress. Transfers started at the same instant share one recomputation.
- `egress_series` integrates the recorded piecewise-constant aggregate rate exactly; the
  recorded rate never exceeds the recorded capacity.
- `efficiency` (goodput over the set rate, <= 1): the flows' payload shares `capacity x efficiency`;
  the link's own counters (`rate_gbps`, `bytes_sent`, the egress series) count the bytes on the wire,
  payload / efficiency, as an interface's byte counters do (a shaper's frames carry headers).
- `sharing="fifo"` replaces max-min fairness: the flows in progress are served in the order they
  started, each taking what it can (its cap) of what the earlier ones leave (`fair_share.fifo_fill`);
  a single-queue shaper (tc tbf) does that to a few long flows.

Parts: the sharing math is `harness.deploy.fair_share`, input checks `harness.deploy.link_inputs`,
the rate log and egress series `harness.deploy.rate_log`, a transfer `harness.deploy.link_flow`;
this module holds the link's events.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from harness.clock import Clock, Timer
from harness.deploy import link_inputs
from harness.deploy.fair_share import fifo_fill, per_connection_bps, water_fill
from harness.deploy.link_flow import BYTES_PER_GBIT as _BYTES_PER_GBIT
from harness.deploy.link_flow import Flow
from harness.deploy.link_inputs import number as _number
from harness.deploy.rate_log import RateLog

__all__ = ["Flow", "Link", "RateLog", "per_connection_bps", "water_fill"]

# A flow is done when what remains is below its byte epsilon (see link_flow) or would take less
# than a few ulps of the current time to send. Without the time test, rounding in `now - t_last`
# leaves crumbs that would be scheduled as zero-length events forever.
_TIME_ULPS = 64.0
_INF = math.inf
_ulp, _nextafter = math.ulp, math.nextafter


class Link:
    """A shared link: capacity in Gbps, flows max-min fair, per-flow caps from TCP limits."""

    def __init__(self, clock: Clock, capacity_gbps: float, *, rtt_s: float = 0.0,
                 connections: int = 1, per_connection_gbps: float | None = None,
                 loss_rate: float = 0.0, mss_bytes: int = 1460,
                 capacity_schedule: Sequence[tuple[float, float]] = (),
                 name: str = "link", efficiency: float = 1.0, sharing: str = "fair") -> None:
        self.name = name
        self.efficiency = link_inputs.efficiency(efficiency)
        self.sharing = link_inputs.sharing(sharing)
        self._fifo = self.sharing == "fifo"
        self._clock = clock
        self._capacity_gbps = _number("capacity_gbps", capacity_gbps)
        self.rtt_s = _number("rtt_s", rtt_s)
        self.connections = link_inputs.count("connections", connections)
        self.loss_rate = link_inputs.loss_rate(loss_rate)
        self.mss_bytes = _number("mss_bytes", mss_bytes, strict=True)
        self._per_conn_cap_bps = math.inf
        if per_connection_gbps is not None:
            self._per_conn_cap_bps = _number("per_connection_gbps", per_connection_gbps, strict=True) * 1e9
        self._set_flow_cap()
        self._schedule = link_inputs.capacity_schedule(capacity_schedule)
        self._sched_i = 0

        self._flows: list[Flow] = []
        self._t_last = clock.now()
        self._bytes_base = 0.0  # integral of the recorded aggregate rate up to _t_last
        self._agg = 0.0  # recorded aggregate rate since _t_last, bytes/s
        self._next_produce_end = math.inf
        self._timer: Timer | None = None
        self._timer_when = math.nan
        self._log = RateLog()
        self._update()

    def _set_flow_cap(self) -> None:
        per_conn_bps = per_connection_bps(self._per_conn_cap_bps, self.loss_rate, self.rtt_s,
                                          self.mss_bytes)
        self.flow_cap_gbps = self.connections * per_conn_bps / 1e9  # inf: no per-flow cap
        self._flow_cap = self.connections * per_conn_bps / 8  # bytes/s

    def set_conditions(self, *, rtt_s: float | None = None, loss_rate: float | None = None) -> None:
        """Change RTT and/or loss from now on (an RTT spike, a lossy path): per-flow caps follow."""
        if rtt_s is not None:
            self.rtt_s = _number("rtt_s", rtt_s)
        if loss_rate is not None:
            self.loss_rate = link_inputs.loss_rate(loss_rate)
        self._set_flow_cap()
        self._update()

    def cancel(self, flow: Flow) -> None:
        """Abandon a transfer (its destination is gone): its bytes stop, its on_done never runs."""
        if flow.finish_s is not None or flow not in self._flows:
            return
        self._advance(self._clock.now())
        self._flows.remove(flow)
        flow.finish_s = self._clock.now()
        flow._rate = 0.0
        self._update()

    def reproduce(self, flow: Flow, produce_end_s: float) -> None:
        """Its source now finishes producing at `produce_end_s` (a batched prefill pass shortened by a
        cancel): what is left to produce comes at a uniform rate from now until then."""
        if flow.finish_s is not None or flow not in self._flows:
            return
        now = self._clock.now()
        if now >= flow.produce_end_s:
            return  # all of it is produced already
        self._advance(now)
        produced = flow._produce_rate * (now - flow._produce_t0)
        if produce_end_s > now:
            rate = (flow.nbytes - produced) / (produce_end_s - now)
            flow._produce_rate = rate
            flow._produce_t0 = now - produced / rate if rate > 0 else now  # produced(t) = rate * (t - t0)
        flow.produce_end_s = produce_end_s if produce_end_s > now else now
        self._update()

    @classmethod
    def from_config(cls, clock: Clock, cfg: Any) -> Link:
        """Build from a `link` config node (`harness.config.deployment.LinkConfig`; RTT in ms)."""
        return cls(clock, cfg.capacity_gbps, rtt_s=link_inputs.number("rtt_ms", cfg.rtt_ms) / 1e3,
                   connections=cfg.connections,
                   per_connection_gbps=cfg.per_connection_gbps, loss_rate=cfg.loss_rate,
                   mss_bytes=cfg.mss_bytes, capacity_schedule=cfg.capacity_schedule,
                   name=cfg.name, efficiency=cfg.get("efficiency", 1.0), sharing=cfg.get("sharing", "fair"))

    # -- public interface ---------------------------------------------------------------------

    @property
    def capacity_gbps(self) -> float:
        return self._capacity_gbps

    @property
    def rate_gbps(self) -> float:
        """Current aggregate egress on the wire (what a router watching link utilisation would see)."""
        return self._agg / _BYTES_PER_GBIT / self.efficiency

    @property
    def backlog_bytes(self) -> float:
        """KV produced but not yet sent: the queue a congestion-aware scheduler watches."""
        now = self._clock.now()
        total = 0.0
        for f in self._flows:
            produced = f.nbytes if now >= f.produce_end_s else f._produce_rate * (now - f._produce_t0)
            total += max(0.0, produced - f.sent_bytes)
        return total

    def backlog_s(self) -> float:
        """Seconds the current backlog takes at the current capacity (inf when the link is down)."""
        backlog = self.backlog_bytes
        if backlog <= 0:
            return 0.0
        capacity = self._capacity_gbps * _BYTES_PER_GBIT * self.efficiency
        return backlog / capacity if capacity > 0 else math.inf

    @property
    def active_flows(self) -> int:
        return len(self._flows)

    @property
    def bytes_sent(self) -> float:
        """Bytes that have left the link so far, on the wire (the integral of the aggregate rate)."""
        return (self._bytes_base + self._agg * (self._clock.now() - self._t_last)) / self.efficiency

    def transfer(self, nbytes: float, on_done: Callable[[], None], *,
                 produce_s: float = 0.0) -> Flow:
        """Start sending `nbytes` now; `on_done()` runs when they have arrived."""
        if not (type(nbytes) is float and 0.0 <= nbytes < math.inf):  # a finite float >= 0 is valid as is
            nbytes = _number("transfer.nbytes", nbytes)
        if not (type(produce_s) is float and 0.0 <= produce_s < math.inf):
            produce_s = _number("transfer.produce_s", produce_s)
        now = self._clock.now()
        flow = Flow(self, nbytes, on_done, now, produce_s)
        if nbytes == 0.0:
            flow.finish_s = now
            self._clock.fire_at(now + self.rtt_s / 2, on_done)
            return flow
        self._flows.append(flow)
        # Defer the recomputation to an event at `now`, so a burst of transfers started at
        # the same instant costs one water-filling pass instead of one per transfer. That event
        # also advances the flows to now (the new one at rate 0 gains nothing): what is read in
        # between (`sent_bytes`, `bytes_sent`, `backlog_bytes`) adds `rate * (now - _t_last)` itself.
        self._set_timer(now)
        return flow

    def set_capacity(self, capacity_gbps: float) -> None:
        """Change the capacity from now on (0: link down, flows stall)."""
        self._capacity_gbps = _number("capacity_gbps", capacity_gbps)
        self._update()

    def change_points(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Recorded (t_s, aggregate Gbps, capacity Gbps); each holds until the next t_s."""
        return self._log.change_points()

    def egress_series(self, t_end: float, bin_s: float, *,
                      t_start: float = 0.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Bin start times, mean egress Gbps and mean capacity Gbps per bin of `bin_s`.

        Bins cover [t_start, t_end) (the last one may run past t_end). Means are exact
        integrals of the recorded piecewise-constant rates; after now() the current state is
        assumed to persist. Before the link existed the rate is 0.
        """
        return self._log.egress_series(t_end, bin_s, t_start=t_start)

    # -- event machinery ----------------------------------------------------------------------

    def _on_timer(self) -> None:
        self._timer = None
        self._update()

    def _set_timer(self, when: float) -> None:
        if self._timer is not None:
            if self._timer_when == when:
                return
            self._timer.cancelled = True  # Timer.cancel(), written out (a call per transfer)
        self._timer = self._clock.call_at(when, self._on_timer)
        self._timer_when = when

    def _advance(self, now: float) -> None:
        """Move every flow's sent bytes from _t_last to now at the current rates."""
        dt = now - self._t_last
        if dt <= 0:
            return
        for f in self._flows:
            f._sent += f._rate * dt
        self._bytes_base += self._agg * dt
        self._t_last = now

    def _update(self) -> None:
        """Handle an event: advance, apply capacity changes, retire flows, re-share, re-arm.

        One pass retires finished flows and collects the caps of the rest, one more sets their
        max-min fair rates and finds the next event: one call per event. The sharing is
        `water_fill`'s, the log `RateLog.record`'s and the timer's re-arming, written out here
        with the same float operations in the same order (a few flows per event: the calls were
        a third of the event's time).
        """
        now = self._clock.now()
        dt = now - self._t_last  # _advance, folded into the pass over the flows below
        if dt > 0:
            self._bytes_base += self._agg * dt
            self._t_last = now
        sched = self._schedule
        if sched:
            while self._sched_i < len(sched) and sched[self._sched_i][0] <= now:
                self._capacity_gbps = sched[self._sched_i][1]
                self._sched_i += 1
        time_eps = _TIME_ULPS * _ulp(max(abs(now), 1.0))
        flow_cap = self._flow_cap
        keep: list[Flow] = []
        caps: list[float] = []
        keep_flow, add_cap = keep.append, caps.append  # bound once: hundreds of flows at scale
        advance = dt > 0
        next_produce_end = next_end = _INF
        arrive_s = now + self.rtt_s / 2
        fire_at = self._clock.fire_at
        for f in self._flows:
            if advance:
                f._sent += f._rate * dt
            remaining = f.nbytes - f._sent
            if remaining <= f._eps or remaining <= f._rate * time_eps:
                f.finish_s = now
                f._rate = 0.0
                fire_at(arrive_s, f._on_done)
                continue
            keep_flow(f)
            produce_end = f.produce_end_s
            if now < produce_end:
                produce_rate = f._produce_rate
                cap = produce_rate if produce_rate < flow_cap else flow_cap
                if produce_end < next_produce_end:
                    next_produce_end = produce_end
            else:
                cap = flow_cap
            add_cap(cap)
            # The rate and end time if every flow gets its cap (the usual case: a link faster than
            # the KV is produced); the pass after the sharing corrects them when some flows share.
            f._rate = cap
            if cap > 0:
                t = now + remaining / cap
                if t < next_end:
                    next_end = t
        self._flows = keep
        self._next_produce_end = next_produce_end
        capacity = self._capacity_gbps * _BYTES_PER_GBIT * self.efficiency  # payload (x 1.0: exact)
        if self._fifo:
            agg, nxt = self._share_fifo(keep, caps, capacity, now, next_produce_end)
        else:
            agg, nxt = self._share_fair(keep, caps, capacity, now, next_produce_end, next_end)
        log = self._log  # RateLog.record(now, agg Gbps, capacity Gbps), written out
        rate_gbps, cap_gbps = agg / _BYTES_PER_GBIT, self._capacity_gbps
        if self.efficiency != 1.0:  # payload to wire bytes (the flows' share was capacity x efficiency)
            rate_gbps = min(rate_gbps / self.efficiency, cap_gbps)
        log_t = log._t
        if not log_t:
            log_t.append(now)
            log._rate.append(rate_gbps)
            log._cap.append(cap_gbps)
        elif log_t[-1] == now:
            log._rate[-1], log._cap[-1] = rate_gbps, cap_gbps
        elif log._rate[-1] != rate_gbps or log._cap[-1] != cap_gbps:
            log_t.append(now)
            log._rate.append(rate_gbps)
            log._cap.append(cap_gbps)
        # Arm the one timer: the earliest of nxt (a flow's end or production end) and the next capacity change
        if self._sched_i < len(sched) and sched[self._sched_i][0] < nxt:
            nxt = sched[self._sched_i][0]
        timer = self._timer
        if nxt == _INF:
            if timer is not None:
                timer.cancel()
                self._timer = None
            return
        after = _nextafter(now, _INF)  # never schedule in the past or at now (no progress)
        when = after if after > nxt else nxt  # max(nxt, after)
        if timer is not None:  # _set_timer(when)
            if self._timer_when == when:
                return
            timer.cancel()
        self._timer = self._clock.call_at(when, self._on_timer)
        self._timer_when = when

    def _share_fair(self, keep: list[Flow], caps: list[float], capacity: float, now: float,
                    next_produce_end: float, next_end: float) -> tuple[float, float]:
        """Max-min fair rates (`water_fill`, written out: the caps taken in ascending order, the same values
        in the same order as its sorted indices); sets `_agg`, returns it and the next end or production end."""
        remaining_capacity, left = capacity, len(caps)
        share = 0.0
        for cap in sorted(caps):
            share = remaining_capacity / left
            if cap > share:
                break  # every later cap is at least as large: all of them get `share`
            remaining_capacity -= cap
            left -= 1
        agg = capacity - remaining_capacity
        if left:
            agg += share * left
        self._agg = agg = agg if agg < capacity else capacity  # min(capacity, agg)
        nxt = next_produce_end
        if left:  # some flows share what is left equally: a flow capped above the share gets it
            for f, cap in zip(keep, caps, strict=True):
                rate = share if cap > share else cap
                f._rate = rate
                if rate > 0:
                    t = now + (f.nbytes - f._sent) / rate
                    if t < nxt:
                        nxt = t
        elif next_end < nxt:  # every flow got its cap: the rates and end times set above stand
            nxt = next_end
        return agg, nxt

    def _share_fifo(self, keep: list[Flow], caps: list[float], capacity: float, now: float,
                    next_produce_end: float) -> tuple[float, float]:
        """FIFO rates (`fifo_fill`): in start order each flow takes its cap of what the earlier ones left; sets
        `_agg`, returns it and the next end or production end."""
        rates, agg = fifo_fill(capacity, caps)
        self._agg = agg
        nxt = next_produce_end
        for f, rate in zip(keep, rates, strict=True):
            f._rate = rate
            if rate > 0:
                t = now + (f.nbytes - f._sent) / rate
                if t < nxt:
                    nxt = t
        return agg, nxt
