"""Saturation sizing (Little's law from the plan), conversation order in the closed loop, and the
closed-loop steady window (completion index, per-route counting)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.analysis import metrics as m
from harness.runs.closed_loop import little_in_flight, predecessors, starvation
from harness.workload.request import Request


def _plan(**kw):
    plan = {"lambda_max_rps": 2.0, "offload_fraction": 0.5, "t_prefill_long_s": 4.0, "t_prefill_short_s": 2.0,
            "t_decode_s": 0.025, "mean_output_tokens": 1000, "n_prfaas": 4, "n_prefill": 3}
    return plan | kw


def test_little_in_flight_is_headroom_times_lambda_times_time_in_system():
    # 2 req/s x (0.5 x 4 + 0.5 x 2 + 1000 x 0.025 = 28 s) = 56 busy; x2 = 112
    assert little_in_flight(_plan(), 2.0) == 112
    assert little_in_flight(_plan(), 1.0) == 56
    assert little_in_flight(_plan(lambda_max_rps=4.0), 2.0) == 224  # twice the rate, twice in flight


def test_predecessors_link_a_turn_to_the_prompt_it_continues_not_to_a_shared_system_prompt():
    block = 4
    reqs = [
        Request(0, 0.0, 8, 1, hash_ids=(0, 1)),  # conversation A turn 1 (system block 0)
        Request(1, 0.0, 8, 1, hash_ids=(0, 2)),  # conversation B turn 1
        Request(2, 0.0, 16, 1, hash_ids=(0, 1, 3, 4)),  # A turn 2: continues request 0
        Request(3, 0.0, 4, 1, hash_ids=(0,)),  # the system prompt alone
        Request(4, 0.0, 12, 1, hash_ids=(0, 2, 5)),  # B turn 2: continues request 1
        Request(5, 0.0, 8, 1, hash_ids=(0, 6)),  # C: shares only the system block
        Request(6, 0.0, 8, 1, hash_ids=(0, 7)),  # D: likewise
    ]
    pred = predecessors(reqs, block)
    assert pred[2] == 0 and pred[4] == 1
    # The system-prompt-only request 3 is continued by the first later request holding it (request 4, whose
    # longer match with request 1 wins); C and D, which share only that block, wait for nobody.
    assert 5 not in pred and 6 not in pred


def test_sessions_chain_in_order():
    reqs = [Request(i, 0.0, 10, 1, session_id=i % 2, turn=i // 2) for i in range(6)]
    assert predecessors(reqs) == {2: 0, 3: 1, 4: 2, 5: 3}


_WHOLE = dict.fromkeys(("pd_p", "prfaas", "pd_d"), (0.0, 10.0))


def test_starvation_warns_only_when_no_bottleneck_pool_is_busy():
    ts = pd.DataFrame({"t_s": np.arange(10.0), "util_prefill_local": 0.5, "util_prefill_prfaas": 1.0,
                       "util_decode": 0.7})
    plan = {"utilisation": {"pd_p": 1.0, "prfaas": 1.0, "pd_d": 0.8}}
    assert starvation(ts, plan, _WHOLE)["saturation_warning"] == ""
    ts["util_prefill_prfaas"] = 0.6
    out = starvation(ts, plan, _WHOLE)
    assert out["saturation_warning"].startswith("starved: pd_p 50% busy, prfaas 60% busy")
    assert out["saturation_util_pd_d"] == pytest.approx(0.7)


def test_closed_loop_throughput_counts_the_short_route_at_the_workloads_mix():
    """Half the sends go to each route; in the window the slow route completed far fewer than its share:
    the rate at the workload's mix is its completions over its share, not the total."""
    n = 1000
    send = np.arange(n) * 0.1
    route = np.where(np.arange(n) % 2 == 0, "local", "prfaas")
    # local finishes 1 s after send; prfaas lags further and further (a growing queue)
    finish = np.where(route == "local", send + 1.0, send + 1.0 + 0.1 * np.arange(n))
    df = pd.DataFrame({"arrival_s": send, "finish_s": finish, "route": route, "ttft_s": 1.0, "error": None})
    plain = m.steady_throughput_rps(df.drop(columns="route"), 0.2, closed_loop=True)
    mixed = m.steady_throughput_rps(df, 0.2, closed_loop=True)
    assert mixed < 0.8 * plain
    uniform = df.assign(finish_s=send + 1.0)
    assert m.steady_throughput_rps(uniform, 0.2, closed_loop=True) == pytest.approx(10.0, rel=0.01)
