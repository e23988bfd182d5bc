"""The planner's uncached lengths come from the emulator's cache settings and the router's cache view."""

from __future__ import annotations

import numpy as np
import pytest

from harness.deploy.cache_pool import HybridCachePool
from harness.errors import InputError
from harness.planner.inputs import shared_inputs
from harness.planner.lengths import planned_lengths
from harness.workload import PrefixReplay, build_workload
from harness.workload.prefix import usable_prefix_tokens

TRACE = {"_target_": "harness.workload.trace_workload.TraceWorkload", "name": "tiny_conversation",
         "path": "traces/mooncake_conversation_trace.jsonl.gz", "num_requests": 600, "block_tokens": 512}


@pytest.mark.parametrize("state_bytes", [0.0, 1e6])
def test_the_replay_counts_hits_as_the_emulators_pool(state_bytes):
    """One unbounded pool and the planner's replay agree request by request (dense and hybrid)."""
    requests = build_workload(TRACE)
    pool = HybridCachePool(block_tokens=512, kv_bytes_per_token=1.0, state_bytes=state_bytes)
    usable = []
    for r in requests:
        look = pool.lookup(r.hash_ids, r.input_tokens)
        usable.append(look.usable_tokens)
        pool.insert(r.hash_ids, r.input_tokens, "pdp0", look.hit_blocks)
        pool.mark_ready(r.hash_ids, r.input_tokens)
    replayed = usable_prefix_tokens(requests, 512, PrefixReplay(state_match=state_bytes > 0))
    assert replayed.tolist() == usable
    assert sum(usable) > 0


@pytest.fixture(scope="module")
def lengths(variant):
    def _lengths(overrides=(), updates=None):
        cfg = variant(["deployment=prfaas_pd", "model=qwen35_397b", *overrides], updates)
        inputs = shared_inputs(cfg.deployment, cfg.model, cfg.planner)
        return planned_lengths(TRACE, cfg.cache, cfg.deployment, inputs)

    return _lengths


def _mean(planned) -> float:
    return float(np.dot(planned.values, planned.weights))


def test_each_cache_input_reaches_the_lengths(lengths):
    base = lengths()
    whole = [r.input_tokens for r in build_workload(TRACE)]
    assert base.notes == () and _mean(base) < np.mean(whole)
    assert _mean(lengths(updates={"cache.enabled": False})) == pytest.approx(np.mean(whole))
    assert _mean(lengths(updates={"deployment.router.cache_aware": False})) == pytest.approx(np.mean(whole))
    assert _mean(lengths(updates={"cache.exact_state_match": False})) < _mean(base)  # qwen3.5: a hybrid
    small = lengths(updates={"cache.capacity_tokens": 100_000})
    assert _mean(small) > _mean(base) and small.replay.capacity_blocks == 2 * (100_000 // 512)
    assert small.notes[0].startswith("cache.capacity_tokens=100000: planned as one LRU of 390 blocks")


def test_the_local_view_is_noted_and_the_global_one_is_not(lengths):
    local = lengths(updates={"deployment.router.cache_view": "local"})
    assert len(local.notes) == 1 and local.notes[0].startswith("deployment.router.cache_view=local: ")
    assert lengths(["deployment=homogeneous_pd"]).notes == ()  # one cluster: one pool, nothing to miss
    no_fetch = lengths(["deployment=prfaas_dynamic"], {"deployment.router.cache_transfer": False}).notes
    assert no_fetch[0].startswith("deployment.router.cache_transfer=false: the router matches the local pool only")
    scarce = lengths(["deployment=prfaas_dynamic"]).notes  # bandwidth-aware: local while the link is scarce
    assert scarce[0].startswith("deployment.router.bandwidth_aware=true: while the link is scarce")


def test_an_unknown_cache_view_is_an_input_error(lengths):
    with pytest.raises(InputError, match=r"deployment.router.cache_view must be one of global, local, got 'both'"):
        lengths(updates={"deployment.router.cache_view": "both"})
