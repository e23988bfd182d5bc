"""The closed-loop capacity run (`loadgen.rate_rps=inf`, the quick estimate; `max` searches:
harness/runs/capacity.py), without a hidden knob: how many requests it keeps in flight, how it offers
them, and whether every pool the planner expects to be the bottleneck was in fact kept busy.

`loadgen.rate_rps=inf` measures capacity with a closed loop. Too few requests in flight and the
bottleneck pool idles (capacity reads low); far too many and the run is mostly fill and drain. The
in-flight count is sized from the planner by Little's law: at Lambda_max a request spends about
E[T_prefill] + L_out x T_decode in the system without queueing, so Lambda_max times that many are
busy; `loadgen.saturation_headroom` (default 2) times it leaves a queue in front of the bottleneck.
`loadgen.saturation_in_flight` set to a number overrides it (the summary says which was used).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from harness.errors import InputError, require
from harness.workload.turns import TurnOrder, predecessors

DEFAULT_HEADROOM = 2.0
URL_DEFAULT_IN_FLIGHT = 256  # an external engine: the planner does not know it
STARVED_UTIL = 0.9  # a bottleneck pool less busy than this in the steady window was starved
BOTTLENECK_UTIL = 0.95  # planner utilisation at Lambda_max from which a pool counts as a bottleneck
_POOLS = {"pd_p": "util_prefill_local", "prfaas": "util_prefill_prfaas", "pd_d": "util_decode"}


def little_in_flight(plan: dict[str, Any], headroom: float = DEFAULT_HEADROOM) -> int:
    """headroom x Lambda_max x (E[T_prefill] + L_out x T_decode), at least one per prefill instance
    plus every decode slot the planner's Lambda needs."""
    require(headroom >= 1.0, f"loadgen.saturation_headroom must be >= 1, got {headroom}")
    lam = float(plan["lambda_max_rps"])
    p = float(plan.get("offload_fraction") or 0.0)
    t_long = plan.get("t_prefill_long_s") or 0.0
    t_short = plan.get("t_prefill_short_s") or 0.0
    t_prefill = p * float(t_long) + (1.0 - p) * float(t_short)
    t_decode = float(plan["t_decode_s"]) * float(plan["mean_output_tokens"])
    busy = lam * (t_prefill + t_decode)
    floor = int(plan.get("n_prfaas") or 0) + int(plan.get("n_prefill") or 0) + 1
    return max(floor, math.ceil(headroom * busy))


def saturation_in_flight(cfg: Any, plan: dict[str, Any] | None = None) -> int:
    """The in-flight count of a saturation run: `loadgen.saturation_in_flight` if given, else sized
    from the planner's answer for this deployment and workload (planned here if not passed)."""
    lg = cfg.loadgen
    given = lg.get("saturation_in_flight")
    if given is not None:
        require(int(given) >= 1, f"loadgen.saturation_in_flight must be >= 1 (or null: sized from the planner), "
                                 f"got {given}")
        return int(given)
    if cfg.get("mode") == "url":
        return URL_DEFAULT_IN_FLIGHT
    if plan is None:
        from harness.deploy.build import make_plan

        try:
            plan = make_plan(cfg)
        except InputError as err:
            raise InputError(f"loadgen.saturation_in_flight is null (size it from the planner) but the planner "
                             f"has no answer for this deployment ({err}); set loadgen.saturation_in_flight=N") from err
    headroom = lg.get("saturation_headroom")
    return little_in_flight(plan, DEFAULT_HEADROOM if headroom is None else float(headroom))


def saturation_meta(cfg: Any, frame: pd.DataFrame, timeseries: pd.DataFrame, plan: dict[str, Any] | None,
                    in_flight: int) -> dict[str, Any]:
    """What a saturation run reports (summary keys `saturation_*`, every one in every run: null when it does
    not apply): the in-flight count, where it came from, each pool's utilisation over the steady window its
    capacity was read in, the route that set the rate and how it was counted, the loop's window, and a
    warning (a starved bottleneck, or too few requests for the in-flight count: no window at all)."""
    from harness.analysis.saturation import closed_loop_capacity

    given = cfg.loadgen.get("saturation_in_flight")
    headroom = cfg.loadgen.get("saturation_headroom")
    source = "given" if given is not None else f"planner (Little's law x {headroom or DEFAULT_HEADROOM:g})"
    if given is None and cfg.get("mode") == "url":
        source = f"default for url targets ({URL_DEFAULT_IN_FLIGHT})"
    warmup = float(cfg.analysis.get("warmup_fraction", 0.0) or 0.0)
    capacity = closed_loop_capacity(frame, warmup)
    # Each prefill pool over its route's window (the one its count came from), decode over the loop's.
    windows = {"pd_p": capacity.window("local"), "prfaas": capacity.window("prfaas"), "pd_d": capacity.window()}
    route, counted_in = capacity.counted_by()  # the route that set the rate, and how its completions counted
    meta: dict[str, Any] = {"in_flight": in_flight, "in_flight_source": source,
                            "window_start_s": capacity.start_s, "window_end_s": capacity.end_s,
                            "route": route, "counted_in": counted_in}
    meta.update({f"util_{pool}": math.nan for pool in _POOLS})  # a url target's pools are not seen
    meta.update({k.removeprefix("saturation_"): v for k, v in starvation(timeseries, plan, windows).items()})
    meta.setdefault("warning", "")
    if capacity.ran_out:  # the loop was never full after the warm-up: more requests, not more in flight
        need = math.floor(in_flight / (1.0 - warmup)) + 1 if warmup < 1.0 else math.inf
        meta["warning"] = (
            f"too few requests: {len(frame)} at {in_flight} in flight ran out before the first {warmup:.0%} had "
            f"completed, so there is no steady window and steady_throughput_rps is NaN; raise "
            f"workload.num_requests well above {need} (in flight / (1 - analysis.warmup_fraction); a few times "
            f"the in-flight count) or lower loadgen.saturation_in_flight")
    return meta


def starvation(timeseries: pd.DataFrame, plan: dict[str, Any] | None,
               windows: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """Each pool's mean utilisation over its window (pool -> (start_s, end_s); the whole run when a
    window is missing or empty) and a warning naming every pool the planner expects to be a
    bottleneck (utilisation >= 0.95 at Lambda_max) that was less than 90% busy."""
    out: dict[str, Any] = {}
    if timeseries is None or timeseries.empty or "t_s" not in timeseries.columns:
        return out
    t = timeseries["t_s"].to_numpy(dtype=float)
    expected = (plan or {}).get("utilisation") or {}
    bottlenecks: list[tuple[str, float]] = []
    for pool, column in _POOLS.items():
        if column not in timeseries.columns:
            continue
        planned = expected.get(pool)
        if plan is not None and planned is None:  # the pool gets no traffic (or does not exist)
            out[f"saturation_util_{pool}"] = math.nan
            continue
        start_s, end_s = windows.get(pool, (math.nan, math.nan))
        win = timeseries[(t >= start_s) & (t < end_s)] if end_s > start_s else timeseries
        values = win[column].to_numpy(dtype=float, na_value=np.nan)
        util = float(np.nanmean(values)) if np.isfinite(values).any() else math.nan
        out[f"saturation_util_{pool}"] = util
        if planned is not None and planned >= BOTTLENECK_UTIL and math.isfinite(util):
            bottlenecks.append((pool, util))
    # Starved: no pool the planner expects to be a bottleneck was kept busy. (One busy bottleneck and
    # an idle other one is the workload's mix at this threshold, not the loop's doing.)
    starved = bool(bottlenecks) and max(u for _, u in bottlenecks) < STARVED_UTIL
    out["saturation_warning"] = (
        f"starved: {', '.join(f'{p} {u:.0%} busy' for p, u in bottlenecks)} (bottlenecks at the planner's "
        f"Lambda_max); raise loadgen.saturation_in_flight" if starved else "")
    return out


def offer_saturation(clock, deployment, requests: list, in_flight: int, stop_s: float | None) -> None:
    """Closed loop for a saturation run: `in_flight` requests kept in flight, each completion sends
    the next, in trace order, but never a turn before the turn it continues has completed (a user
    sends the next turn after the answer; harness/workload/turns.py). A request that must wait goes,
    ahead of later ones, when its predecessor completes."""
    import dataclasses

    order = TurnOrder(requests, predecessors(requests, int(getattr(deployment, "block_tokens", 512) or 512)))

    def send() -> None:
        if stop_s is not None and clock.now() > stop_s:
            return
        request = order.next()
        if request is not None:
            deployment.submit(dataclasses.replace(request, arrival_s=clock.now()))

    previous = deployment.on_record

    def on_record(record: dict) -> None:
        if previous is not None:
            previous(record)
        order.ended(int(record["request_id"]))
        send()

    deployment.on_record = on_record
    for _ in range(in_flight):
        clock.call_at(0.0, send)
