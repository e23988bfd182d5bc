"""Events per second of the fluid link model with a steady number of concurrent flows.

Each completed transfer starts a new one from its `on_done`, so the link always carries
`--flows` transfers (default 50), half of them layer-wise pipelined, on a 100 Gbps link whose
capacity changes every few seconds. Prints a rate; this is a measurement, not a test.

    .venv/bin/python benchmarks/bench_link.py [--flows 50] [--transfers 200000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from harness.clock import VirtualClock
from harness.deploy.link import Link


def bench(n_flows: int, n_transfers: int, seed: int = 0) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    # KV sizes of 0.2-2.3 GiB, as for 1K-128K-token prompts; production over 0.4-7.4 s.
    sizes_bytes = rng.uniform(0.2, 2.3, n_transfers) * 2**30
    produce_s = np.where(rng.random(n_transfers) < 0.5, 0.0, rng.uniform(0.4, 7.4, n_transfers))
    clock = VirtualClock()
    # Capacity changes every 5 s over the expected span (total Gbit / ~80 Gbps).
    span_s = sizes_bytes.sum() * 8 / 1e9 / 80.0
    times_s = np.arange(5.0, span_s, 5.0)
    schedule = list(zip(times_s.tolist(), rng.uniform(60.0, 100.0, len(times_s)).tolist(),
                        strict=True))
    link = Link(clock, 100.0, rtt_s=0.005, connections=8, per_connection_gbps=25.0,
                capacity_schedule=schedule)
    # Count the link's own recomputations (clock events also include on_done callbacks).
    link_events = 0
    update = link._update

    def counted_update() -> None:
        nonlocal link_events
        link_events += 1
        update()

    link._update = counted_update  # type: ignore[method-assign]
    started = 0
    last_done_s = 0.0

    def start_next() -> None:
        nonlocal started, last_done_s
        last_done_s = clock.now()
        if started < n_transfers:
            i = started
            started += 1
            link.transfer(float(sizes_bytes[i]), start_next, produce_s=float(produce_s[i]))

    for _ in range(n_flows):
        start_next()
    t0 = time.perf_counter()
    clock.run()
    wall_s = time.perf_counter() - t0
    return {"wall_s": wall_s, "events": clock.events_run,
            "events_per_s": clock.events_run / wall_s, "link_events_per_s": link_events / wall_s,
            "transfers_per_s": n_transfers / wall_s, "sim_s": last_done_s,
            "mean_egress_gbps": link.bytes_sent * 8 / 1e9 / last_done_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flows", type=int, default=50)
    parser.add_argument("--transfers", type=int, default=200_000)
    args = parser.parse_args()
    r = bench(args.flows, args.transfers)
    print(f"{args.flows} concurrent flows, {args.transfers} transfers, {r['wall_s']:.2f} s wall: "
          f"{r['events_per_s']:,.0f} clock events/s ({r['link_events_per_s']:,.0f} link "
          f"recomputations/s), {r['transfers_per_s']:,.0f} transfers/s; "
          f"{r['sim_s']:,.0f} s simulated, mean egress {r['mean_egress_gbps']:.1f} Gbps")


if __name__ == "__main__":
    main()
