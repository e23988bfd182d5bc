"""A saturation run's closed loop never sends a turn before the turn it continues has completed
(README, "Saturation runs"; harness/runs/closed_loop.py `offer_saturation`), checked on its records.

Both kinds of continuation: a session's next turn (the agentic workload: the test pairs the turns
itself, from each request's session and turn), and a prompt that extends an earlier one (the Mooncake
conversation trace, prefix-chained hash ids and no sessions: the pairs are `predecessors`', whose
linking rule is checked by hand in tests/unit/deploy/test_capacity.py). The in-flight count is many
times the distance in trace order between most pairs, so a loop that only sent in trace order would
send those turns together; each test checks that first (the rule had something to hold back).
"""

from __future__ import annotations

from harness.runs.closed_loop import predecessors
from harness.runs.sim import run_sim
from harness.workload import build_workload

from .conftest import compose_cfg

IN_FLIGHT = 200


def _run(*overrides: str):
    cfg = compose_cfg("loadgen.rate_rps=inf", f"loadgen.saturation_in_flight={IN_FLIGHT}", *overrides)
    requests = build_workload(cfg.workload)
    frame = run_sim(cfg).requests.set_index("request_id")
    return requests, frame


def _check(pairs: list[tuple[int, int]], frame) -> None:
    """Every (turn, the turn it continues): sent at or after that one finished; and it mattered."""
    close = [(turn, prev) for turn, prev in pairs if turn - prev < IN_FLIGHT]
    assert len(close) >= 0.5 * len(pairs) > 50  # trace order alone would have sent these together
    assert frame["error"].isna().all()
    early = [(turn, prev, frame.at[turn, "arrival_s"], frame.at[prev, "finish_s"]) for turn, prev in pairs
             if not frame.at[turn, "arrival_s"] >= frame.at[prev, "finish_s"]]
    assert not early, f"{len(early)} turns sent before the turn they continue finished, e.g. {early[:3]}"


def test_a_sessions_next_turn_waits_for_the_previous_one():
    requests, frame = _run("deployment=homogeneous_pd", "workload=agentic", "workload.num_requests=1000")
    last: dict[object, tuple[int, int]] = {}  # session -> (turn number, request id) of its latest turn so far
    pairs = []
    for r in requests:
        if r.session_id is None:
            continue
        if r.session_id in last:
            turn, rid = last[r.session_id]
            assert r.turn == turn + 1
            pairs.append((r.request_id, rid))
        last[r.session_id] = (r.turn, r.request_id)
    assert set(frame["session_id"].dropna()) == set(last)  # the run's records are this workload's
    _check(pairs, frame)


def test_a_prompt_that_extends_an_earlier_one_waits_for_it():
    requests, frame = _run("deployment=prfaas_pd", "workload=mooncake_conversation", "workload.num_requests=1500")
    assert all(r.session_id is None for r in requests)  # continuation by shared prefix only
    pairs = sorted(predecessors(requests, 512).items())
    _check(pairs, frame)

