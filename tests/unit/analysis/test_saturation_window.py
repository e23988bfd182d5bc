"""Closed-loop capacity counted in mean requests: a busy pool's rate must not depend on the order in
which the loop handed it light and heavy requests (harness/analysis/saturation.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.analysis import metrics as m
from harness.analysis.saturation import closed_loop_capacity
from harness.runs.closed_loop import starvation


def _frame(prfaas_order: np.ndarray, occupancy: np.ndarray, local_occupancy: float | np.ndarray = 0.1) -> pd.DataFrame:
    """A closed loop with two routes. `prfaas`: one server, FIFO, busy from t=0 with its requests in
    `prfaas_order` (each `occupancy` long); `local`: as many requests, each done 0.1 s after the last,
    far ahead (never the bottleneck), on two instances that each work `local_occupancy` of every 0.2 s.
    The queue is deep: the remote pool is never idle."""
    n = len(prfaas_order)
    ends = np.cumsum(occupancy[prfaas_order])
    prfaas = pd.DataFrame({"request_id": 2 * prfaas_order + 1, "route": "prfaas", "prefill_instance": "r0",
                           "prefill_start_s": ends - occupancy[prfaas_order], "prefill_end_s": ends,
                           "finish_s": ends + 1.0})
    local_end = 0.1 * np.arange(1, n + 1)
    local_instance = np.where(np.arange(n) % 2 == 0, "l0", "l1")  # two instances, each half idle
    local = pd.DataFrame({"request_id": 2 * np.arange(n), "route": "local", "prefill_instance": local_instance,
                          "prefill_start_s": local_end - local_occupancy, "prefill_end_s": local_end,
                          "finish_s": local_end})
    df = pd.concat([local, prfaas], ignore_index=True).sort_values("request_id", ignore_index=True)
    # the loop keeps refilling until near the end of the remote queue: sends spread over the run
    df["arrival_s"] = np.linspace(0.0, float(ends[-1]) * 0.95, len(df))
    return df.assign(error=None, ttft_s=1.0)


def test_a_busy_pool_reads_the_same_rate_whatever_order_its_light_and_heavy_requests_came_in():
    n = 400
    light = np.arange(n) % 3 == 0  # a third light (a cached prefix), the rest heavy
    occupancy = np.where(light, 0.2, 1.4)
    in_order = np.arange(n)
    # The held turns: the light requests of the middle half go to the back of the queue (they waited
    # for the turn they continue while the loop sent later, heavier requests).
    held = np.array([i for i in in_order if light[i] and n // 4 <= i < 3 * n // 4])
    reordered = np.concatenate([np.setdiff1d(in_order, held), held])
    a = m.steady_throughput_rps(_frame(in_order, occupancy), 0.2, closed_loop=True)
    b = m.steady_throughput_rps(_frame(reordered, occupancy), 0.2, closed_loop=True)
    # one server busy throughout: 1 / mean occupancy requests of prfaas per s, half the workload
    expected = 1.0 / occupancy.mean() / 0.5
    assert a == pytest.approx(expected, rel=0.02)
    assert b == pytest.approx(expected, rel=0.02)
    # counted one per completion, the reordered window holds fewer light requests and reads low
    plain = m.steady_throughput_rps(_frame(reordered, occupancy).drop(columns=["prefill_start_s", "prefill_end_s"]),
                                    0.2, closed_loop=True)
    assert plain < 0.93 * expected


def test_each_route_reports_its_own_window_and_the_slowest_sets_the_rate():
    n = 400
    occupancy = np.where(np.arange(n) % 3 == 0, 0.2, 1.4)
    cap = closed_loop_capacity(_frame(np.arange(n), occupancy), 0.2)
    by_route = {r.route: r for r in cap.routes}
    assert set(by_route) == {"local", "prfaas"}
    assert by_route["local"].rate_rps > 2 * by_route["prfaas"].rate_rps
    assert cap.rate_rps == by_route["prfaas"].rate_rps
    # the remote window is late in the run, the local one early; window() picks each
    assert cap.window("prfaas")[0] > cap.window("local")[1]
    assert cap.window("nope") == (cap.start_s, cap.end_s)


def test_pool_utilisation_is_read_over_each_pools_own_window():
    """A pool busy in its route's window and idle after it (the run's drain) is not starved."""
    ts = pd.DataFrame({"t_s": np.arange(100.0), "util_prefill_local": 0.3,
                       "util_prefill_prfaas": np.where(np.arange(100.0) < 50, 1.0, 0.0), "util_decode": 0.8})
    plan = {"utilisation": {"pd_p": 0.98, "prfaas": 1.0, "pd_d": 0.9}}
    windows = {"pd_p": (0.0, 100.0), "prfaas": (10.0, 50.0), "pd_d": (0.0, 100.0)}
    out = starvation(ts, plan, windows)
    assert out["saturation_util_prfaas"] == pytest.approx(1.0)
    assert out["saturation_warning"] == ""
    whole = dict.fromkeys(windows, (0.0, 100.0))
    assert starvation(ts, plan, whole)["saturation_warning"].startswith("starved:")


def test_a_route_whose_pool_was_not_busy_counts_one_per_completion():
    """Mean-request counting holds for a pool busy throughout its window; a route whose pool idled
    follows the loop's pace, and weighing its completions by a mix it did not limit would misread it.
    Here the local pool is 10% busy and its early requests are heavy: counted in mean requests its
    window's lighter mix would read it 2x low and make it the bottleneck."""
    n = 400
    occupancy = np.where(np.arange(n) % 3 == 0, 0.2, 1.4)
    local_occupancy = np.where(np.arange(n) < n // 5, 0.1, 0.01)
    cap = closed_loop_capacity(_frame(np.arange(n), occupancy, local_occupancy), 0.2)
    local = {r.route: r for r in cap.routes}["local"]
    assert local.pool_busy < 0.2 and not local.mean_requests
    assert local.rate_rps == pytest.approx(10.0 / 0.5, rel=0.02)  # 10 local completions per s, half the mix
    assert {r.route: r for r in cap.routes}["prfaas"].mean_requests


def test_the_summary_names_the_route_that_set_the_rate_and_how_it_was_counted():
    from omegaconf import OmegaConf

    from harness.runs.closed_loop import saturation_meta

    n = 400
    df = _frame(np.arange(n), np.where(np.arange(n) % 3 == 0, 0.2, 1.4))
    cfg = OmegaConf.create({"loadgen": {"saturation_in_flight": None, "saturation_headroom": None},
                            "analysis": {"warmup_fraction": 0.2}})
    meta = saturation_meta(cfg, df, pd.DataFrame(), None, 42)
    assert meta["route"] == "prfaas" and meta["counted_in"] == "mean requests"
    assert meta["in_flight"] == 42 and meta["in_flight_source"].startswith("planner")
    assert meta["window_end_s"] > meta["window_start_s"]


SATURATION_KEYS = {"in_flight", "in_flight_source", "util_pd_p", "util_prfaas", "util_pd_d", "route", "counted_in",
                   "window_start_s", "window_end_s", "warning"}  # README "Saturation runs", without `saturation_`


def _loop(n: int, in_flight: int, route: str | None = "local") -> pd.DataFrame:
    """A closed loop of n requests, `in_flight` sent at t=0, each completion (1 s apart, FIFO) sending the
    next: the loop is full until it runs out of requests, after the (n - in_flight)-th completion."""
    finish = np.arange(1, n + 1, dtype=float)
    arrival = np.concatenate([np.zeros(min(in_flight, n)), finish[: max(n - in_flight, 0)]])
    df = pd.DataFrame({"request_id": np.arange(n), "arrival_s": arrival, "finish_s": finish, "error": None,
                       "ttft_s": 0.5})
    return df if route is None else df.assign(route=route)


def _cfg(warmup: float = 0.2):
    from omegaconf import OmegaConf

    return OmegaConf.create({"loadgen": {"saturation_in_flight": None, "saturation_headroom": None},
                             "analysis": {"warmup_fraction": warmup}})


def test_too_few_requests_for_the_in_flight_count_is_no_window_and_says_so():
    """200 requests at 176 in flight (contract26 finding 4): the loop runs out after 24 completions, before
    the first 20% (40) have completed. The window was reported inverted (start 40 > end 24), the steady
    rate fell back to an open-loop read, and the warning blamed too few in flight."""
    from harness.runs.closed_loop import saturation_meta

    df = _loop(200, 176)
    cap = closed_loop_capacity(df, 0.2)
    assert cap.ran_out and np.isnan(cap.start_s) and np.isnan(cap.end_s)
    assert np.isnan(m.steady_throughput_rps(df, 0.2, closed_loop=True))
    ts = pd.DataFrame({"t_s": np.arange(200.0), "util_prefill_local": 0.5, "util_decode": 0.5})
    plan = {"utilisation": {"pd_p": 1.0, "pd_d": 0.5}}
    meta = saturation_meta(_cfg(), df, ts, plan, 176)
    assert set(meta) == SATURATION_KEYS
    assert np.isnan(meta["window_start_s"]) and np.isnan(meta["window_end_s"])
    assert meta["route"] is None and meta["counted_in"] is None
    warning = meta["warning"]
    assert warning.startswith("too few requests: 200 at 176 in flight") and "workload.num_requests" in warning
    assert "well above 221" in warning and "starved" not in warning


def test_enough_requests_keep_the_window_and_a_single_route_names_itself():
    """A single-route deployment (homogeneous_pd: every request `local`) used to get no saturation_route /
    saturation_counted_in at all: the one route counts its completions."""
    from harness.runs.closed_loop import saturation_meta

    df = _loop(400, 40)
    cap = closed_loop_capacity(df, 0.2)
    assert not cap.ran_out
    assert m.steady_throughput_rps(df, 0.2, closed_loop=True) == pytest.approx(1.0, rel=0.01)
    meta = saturation_meta(_cfg(), df, pd.DataFrame(), None, 40)
    assert set(meta) == SATURATION_KEYS
    assert (meta["route"], meta["counted_in"], meta["warning"]) == ("local", "completions", "")
    assert meta["window_start_s"] == 81.0 and meta["window_end_s"] == 320.0  # completions 81 and 320 of 400
    no_route = saturation_meta(_cfg(), _loop(400, 40, route=None), pd.DataFrame(), None, 40)
    assert set(no_route) == SATURATION_KEYS and (no_route["route"], no_route["counted_in"]) == (None, "completions")
