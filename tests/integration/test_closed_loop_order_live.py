"""A live saturation run keeps sim mode's turn order: its closed loop never sends a turn before the
turn it continues has ended (harness/workload/turns.py; tests/sim/test_closed_loop_order.py for sim).
On the commit before, 88 of this run's 98 continued turns went out before their previous turn ended."""

from __future__ import annotations

from harness.runs.http import run_live
from harness.workload import build_workload

RUN = ["deployment=homogeneous_pd", "loadgen.rate_rps=inf", "loadgen.saturation_in_flight=40", "workload=agentic",
       "workload.num_requests=120", "server.time_scale=20", "analysis.figures=false"]


def test_a_live_saturation_run_sends_a_sessions_next_turn_after_the_previous_one_ended(compose_cfg):
    cfg = compose_cfg(RUN)
    requests = build_workload(cfg.workload)
    previous: dict[object, int] = {}  # session -> its latest turn so far (request id)
    pairs = []
    for r in requests:
        if r.session_id in previous:
            pairs.append((r.request_id, previous[r.session_id]))
        previous[r.session_id] = r.request_id
    sent = run_live(cfg).requests.set_index("request_id")
    assert sent["error"].isna().all() and len(sent) == len(requests)
    close = [(turn, prev) for turn, prev in pairs if turn - prev < 40]
    assert len(close) > 50  # 40 in flight in trace order alone would send these together
    early = [(turn, prev) for turn, prev in pairs if not sent.at[turn, "arrival_s"] >= sent.at[prev, "finish_s"]]
    assert not early, f"{len(early)} turns sent before the turn they continue ended, e.g. {early[:3]}"
