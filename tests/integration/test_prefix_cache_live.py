"""Prefix caching from prompt content: agentic sessions whose context grows turn by turn hit the
emulator's cache over HTTP as they do in sim mode, where the cache sees the trace's hash_ids.

The load generator turns hash_ids into token ids (completions) or words (chat), the server turns
those back into blocks and hashes them; if either side lost the prefix structure, the live hits
would differ from the sim hits.
"""

from __future__ import annotations

import pytest

from harness.runs.http import run_live
from harness.sim import run_sim


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_live_cache_hits_match_sim(api, compose_cfg):
    cfg = compose_cfg(["workload=agentic", "workload.num_requests=40", "loadgen.rate_rps=4",
                       "server.time_scale=20", f"target.api={api}"])
    sim, live = run_sim(cfg), run_live(cfg)
    s = sim.requests.set_index("request_id")
    lv = live.requests.set_index("request_id")
    assert s["cached_tokens"].sum() > 0.3 * s["input_tokens"].sum()  # the workload really shares prefixes
    assert lv["usage_reported"].all()
    assert (lv["input_tokens"] == s["input_tokens"]).all()
    assert (lv["cached_tokens"] == s["cached_tokens"]).all()
