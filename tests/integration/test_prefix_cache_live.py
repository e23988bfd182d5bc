"""Prefix caching from prompt content: agentic sessions whose context grows turn by turn hit the
emulator's cache over HTTP as they do in sim mode, where the cache sees the trace's hash_ids.

The load generator turns hash_ids into token ids (completions) or words (chat), the server turns
those back into blocks and hashes them; if either side lost the prefix structure, the live hits
would differ from the sim hits.

Which blocks a turn finds cached also depends on when the earlier turns' prefills ended, so the live
run must keep the trace's timing: the time scale is 10 (50 ms of event-loop lag is 0.5 s emulated,
beside turns ~8 s apart), and a live run the harness itself marks invalid (its measured lag or send
lateness past the configured bounds, on a machine too busy to keep the schedule) is run again, up
to three times; the last one is held to the same equality whatever its flag.
"""

from __future__ import annotations

import pytest

from harness.runs.http import run_live
from harness.sim import run_sim


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_live_cache_hits_match_sim(api, compose_cfg):
    cfg = compose_cfg(["workload=agentic", "workload.num_requests=40", "loadgen.rate_rps=4",
                       "server.time_scale=10", f"target.api={api}"])
    sim = run_sim(cfg)
    for _ in range(3):
        live = run_live(cfg)
        if live.meta["loadgen"]["valid"]:
            break
    s = sim.requests.set_index("request_id")
    lv = live.requests.set_index("request_id")
    assert s["cached_tokens"].sum() > 0.3 * s["input_tokens"].sum()  # the workload really shares prefixes
    assert lv["usage_reported"].all()
    assert (lv["input_tokens"] == s["input_tokens"]).all()
    assert (lv["cached_tokens"] == s["cached_tokens"]).all()
