"""PrefixCache: contiguous prefix matching and block-level LRU on hand-made cases."""

from __future__ import annotations

import pytest

from harness.errors import InputError
from harness.workload import PrefixReplay, replayed_input_tokens
from harness.workload.prefix import PrefixCache, hit_tokens, replay_hits, uncached_input_tokens
from harness.workload.request import Request

A, B, C, D = 101, 102, 103, 104


def test_lru_capacity_two_evicts_least_recent():
    """A, B, A, C with room for 2: touching A makes B the least recent, so B goes."""
    cache = PrefixCache(2)
    for block in (A, B, A, C):
        cache.insert([block])
    assert A in cache and C in cache and B not in cache
    assert cache.evictions == 1 and len(cache) == 2


def test_match_counts_only_the_leading_run():
    cache = PrefixCache(None)
    cache.insert([A, B, C])
    assert cache.match([A, B, D, C]) == 2
    assert cache.match([D, A]) == 0
    assert cache.match([A, B, C]) == 3
    assert cache.match([]) == 0
    assert (cache.requests, cache.lookups, cache.hits) == (4, 9, 5)


def test_match_does_not_touch_recency():
    cache = PrefixCache(2)
    cache.insert([A])
    cache.insert([B])
    assert cache.match([A]) == 1
    cache.insert([C])
    assert A not in cache and B in cache


def test_insert_orders_a_request_oldest_block_first():
    """A request longer than the cache keeps its last blocks (the first ones are evicted first)."""
    cache = PrefixCache(2)
    cache.insert([A, B, C])
    assert A not in cache and B in cache and C in cache
    cache.insert([B])
    cache.insert([D])
    assert C not in cache and B in cache


def test_unbounded_cache_never_evicts():
    cache = PrefixCache(None)
    cache.insert(range(10_000))
    assert len(cache) == 10_000 and cache.evictions == 0


def test_hit_tokens_capped_at_prompt():
    assert hit_tokens(3, 1200, 512) == 1200
    assert hit_tokens(2, 1200, 512) == 1024
    assert hit_tokens(0, 1200, 512) == 0


def test_replay_hits_in_order():
    reqs = [Request(0, 0.0, 1200, 1, (A, B, C)), Request(1, 1.0, 1300, 1, (A, B, D)),
            Request(2, 2.0, 1500, 1, (A, B, D)), Request(3, 3.0, 100, 1, (C,))]
    assert replay_hits(reqs, 512).tolist() == [0, 1024, 1500, 100]
    assert uncached_input_tokens(reqs, 512).tolist() == [1200, 276, 0, 0]
    # With room for 2 blocks: after request 1 the cache holds B, D; A is gone, so no leading hit.
    assert replay_hits(reqs, 512, capacity_blocks=2).tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("capacity", [0, -1, 1.5, True])
def test_bad_capacity(capacity):
    with pytest.raises(InputError, match="capacity_blocks"):
        PrefixCache(capacity)


def test_replayed_lengths_follow_the_emulators_pool():
    """The planner's replay counts hits as a cluster's pool does: at least one token computed, nothing
    with the cache off, and on a hybrid only up to a block where some request stored its state."""
    reqs = [Request(0, 0.0, 1200, 1, (A, B, C)), Request(1, 1.0, 1300, 1, (A, B, D)),
            Request(2, 2.0, 1500, 1, (A, B, D)), Request(3, 3.0, 100, 1, (C,))]
    assert replayed_input_tokens(reqs, 512, PrefixReplay()).tolist() == [1200, 276, 1, 1]
    assert replayed_input_tokens(reqs, 512, PrefixReplay(enabled=False)).tolist() == [1200, 1300, 1500, 100]
    # every prompt here stores its state at its 2nd block (B): requests 1 and 2 may use their prefix up to B
    # only, request 3's C was never a state block
    assert replayed_input_tokens(reqs, 512, PrefixReplay(state_match=True)).tolist() == [1200, 276, 476, 100]
    assert replayed_input_tokens([reqs[0], Request(1, 1.0, 1600, 1, (A, B, C, D))], 512,
                                 PrefixReplay(state_match=True)).tolist() == [1200, 576]
    assert replayed_input_tokens(reqs, 512, PrefixReplay(capacity_blocks=2)).tolist() == [1200, 1300, 1500, 100]
