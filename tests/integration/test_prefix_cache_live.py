"""Prefix caching from prompt content: agentic sessions whose context grows turn by turn hit the
emulator's cache over HTTP as they do in sim mode, where the cache sees the trace's hash_ids.

The load generator turns hash_ids into token ids (completions) or words (chat), the server turns
those back into blocks and hashes them; if either side lost the prefix structure, the live hits
would differ from the sim hits.

Which blocks a turn finds cached also depends on when it arrives: a predecessor's prefill still
running, or already done. The live emulator's timeline is exact once its arrivals are known
(ScheduledLoopClock), but the arrivals are the host's: a busy machine delivers a request later
than its schedule. So the live run is compared with the same sim run on the arrivals the live
emulator saw (each moved 1 ns earlier: a request that arrived while a timer was overdue was given
that timer's time and handled before it), request by request and exactly, whatever the host did;
and the sim on the trace's own schedule is checked to share prefixes at all.
"""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

import harness.runs.sim as sim_mode
from harness.runs.http import run_live
from harness.runs.offer import make_offer
from harness.runs.sim import run_sim


def _sim_on_the_live_arrivals(cfg, live: pd.DataFrame, monkeypatch) -> tuple[pd.DataFrame, set[int]]:
    """run_sim(cfg) with each request arriving when the live emulator received it (server_arrival_s),
    in the emulator's order; and the requests whose order that cannot tell: several received at one
    instant that share their first block (which of them computes the shared prefix and which reuses it
    depends on an order the emulator does not record)."""
    offer = make_offer(cfg)
    by_id = {r.request_id: r for r in offer.requests}
    arrived = live.sort_values(["server_arrival_s", "sent_s"])  # equal arrivals: in the order they were sent
    t0 = float(arrived["server_arrival_s"].iloc[0])
    requests = [dataclasses.replace(by_id[rid], arrival_s=max(0.0, float(t) - t0 - 1e-9))
                for rid, t in zip(arrived.index, arrived["server_arrival_s"], strict=True)]
    unordered: set[int] = set()
    for _, tied in arrived.groupby("server_arrival_s"):
        first_blocks = pd.Series([by_id[rid].hash_ids[0] for rid in tied.index], index=tied.index)
        unordered |= set(first_blocks.index[first_blocks.duplicated(keep=False)])
    with monkeypatch.context() as patch:
        patch.setattr(sim_mode, "make_offer", lambda cfg, stream=False: dataclasses.replace(offer, requests=requests))
        replay = run_sim(cfg)
    return replay.requests.set_index("request_id"), unordered


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_live_cache_hits_match_sim(api, compose_cfg, monkeypatch):
    cfg = compose_cfg(["workload=agentic", "workload.num_requests=40", "loadgen.rate_rps=4",
                       "server.time_scale=10", f"target.api={api}"])
    s = run_sim(cfg).requests.set_index("request_id")
    assert s["cached_tokens"].sum() > 0.3 * s["input_tokens"].sum()  # the workload really shares prefixes
    lv = run_live(cfg).requests.set_index("request_id")
    assert lv["usage_reported"].all()
    assert (lv["input_tokens"] == s["input_tokens"]).all()
    replay, unordered = _sim_on_the_live_arrivals(cfg, lv, monkeypatch)
    assert sorted(replay.index) == sorted(lv.index) and (replay["cached_tokens"] > 0).any()
    checked = lv.index.difference(sorted(unordered))  # all of them but on a tie of shared prefixes (rare)
    differ = lv.loc[checked, "cached_tokens"].compare(replay.loc[checked, "cached_tokens"])
    assert differ.empty, differ
