"""Hybrid prefix cache pool: block-level KV prefix matching, exact-match linear state, LRU, transfer cache."""

from __future__ import annotations

import pytest

from harness.deploy.cache_pool import HybridCachePool

BT = 4  # tokens per block, small so cases can be read by hand


def _pool(state_bytes=0.0, capacity_tokens=None, exact=True):
    return HybridCachePool(block_tokens=BT, kv_bytes_per_token=1.0, state_bytes=state_bytes,
                           capacity_tokens=capacity_tokens, exact_state_match=exact)


def _ready(pool, ids, tokens, owner="i0"):
    pool.insert(ids, tokens, owner)
    pool.mark_ready(ids, tokens)


def test_dense_model_reuses_every_matched_leading_block():
    pool = _pool()
    _ready(pool, [1, 2, 3], 12)
    look = pool.lookup([1, 2, 9, 3], 16)
    assert (look.hit_blocks, look.hit_tokens, look.usable_tokens, look.ready_tokens) == (2, 8, 8, 8)
    assert pool.lookup([7, 1, 2], 12).hit_blocks == 0  # a prefix hit stops at the first missing block


def test_hybrid_reuses_only_up_to_a_stored_state():
    """Request A (3 full blocks) stores its state after block 3; B matching 2 blocks cannot use them."""
    pool = _pool(state_bytes=10.0)
    _ready(pool, [1, 2, 3], 12)
    partial = pool.lookup([1, 2, 8, 9], 16)
    assert (partial.hit_tokens, partial.usable_tokens) == (8, 0)
    extend = pool.lookup([1, 2, 3, 4], 16)
    assert (extend.hit_tokens, extend.usable_tokens) == (12, 12)
    assert _pool(state_bytes=10.0, exact=False).needs_state is False


def test_state_is_checkpointed_at_the_last_complete_block():
    """A 10-token prompt (blocks 4+4+2) keeps its state after block 2; the partial block 3 is not a checkpoint."""
    pool = _pool(state_bytes=1.0)
    _ready(pool, [1, 2, 3], 10)
    assert pool.lookup([1, 2, 5], 12).usable_tokens == 8
    assert pool.lookup([1, 2, 3, 6], 16).usable_tokens == 8


def test_usable_hit_leaves_at_least_one_token_to_compute():
    pool = _pool()
    _ready(pool, [1, 2], 8)
    look = pool.lookup([1, 2], 8)
    assert (look.hit_tokens, look.usable_tokens) == (8, 7)


def test_blocks_in_flight_name_their_owner_and_are_not_ready():
    pool = _pool()
    pool.insert([1, 2], 8, "pdp3")
    look = pool.lookup([1, 2, 3], 12)
    assert look.pending_owner == "pdp3" and look.usable_tokens == 8 and look.ready_tokens == 0
    pool.mark_ready([1, 2], 8)
    look = pool.lookup([1, 2, 3], 12)
    assert look.pending_owner is None and look.ready_tokens == 8


def test_lru_evicts_least_recently_used_blocks():
    """Capacity 2 blocks: A, B, touch A, C -> B is evicted."""
    pool = _pool(capacity_tokens=2 * BT)
    _ready(pool, [10], 4)
    _ready(pool, [20], 4)
    _ready(pool, [10], 4)
    _ready(pool, [30], 4)
    assert pool.lookup([10], 4).hit_blocks == 1
    assert pool.lookup([20], 4).hit_blocks == 0
    assert pool.lookup([30], 4).hit_blocks == 1
    assert pool.evictions == 1


def test_transfer_cache_blocks_push_prefix_blocks_out_until_released():
    pool = _pool(capacity_tokens=3 * BT)
    _ready(pool, [1, 2, 3], 12)
    assert pool.reserve_transfer(2 * BT) == 2  # room for the transfer: two oldest prefix blocks go
    assert pool.lookup([1, 2, 3], 12).hit_blocks == 0
    assert pool.lookup([3], 4).hit_blocks == 1
    pool.release_transfer(2 * BT)
    assert pool.transfer_bytes == 0 and pool.peak_transfer_bytes == 2 * BT


def test_linear_states_take_pool_space():
    """A 2-block state in a 4-block pool leaves room for two KV blocks."""
    pool = _pool(state_bytes=2 * BT, capacity_tokens=4 * BT)
    _ready(pool, [1, 2], 8)
    assert pool.evictions == 0 and pool.used_bytes == pytest.approx(4 * BT)
    _ready(pool, [3], 4)
    assert pool.evictions >= 1


def test_insert_skipping_the_blocks_a_lookup_found_leaves_the_same_pool():
    """`present` (the lookup's hit_blocks) only saves work: an unbounded pool ends the same either way,
    blocks new to it entered once, owned by the inserting instance and not ready."""
    skip, full = _pool(state_bytes=2.0), _pool(state_bytes=2.0)
    for pool in (skip, full):
        _ready(pool, [1, 2, 3], 12, owner="a")
    ids = [1, 2, 3, 4, 5, 4]  # a repeated new block counts once
    look = skip.lookup(ids, 24)
    assert look.hit_blocks == 3
    assert skip.insert(ids, 24, "b", present=look.hit_blocks) == full.insert(ids, 24, "b") == 0
    assert skip.used_bytes == full.used_bytes == 3 * BT + 2.0 + 2 * BT + 2.0
    assert len(skip) == len(full)
    after = skip.lookup([1, 2, 3, 4, 5], 20)
    assert after == full.lookup([1, 2, 3, 4, 5], 20)
    assert after.hit_blocks == 5 and after.pending_owner == "b" and after.ready_tokens == 3 * BT


def test_forgetful_pool_finds_nothing_and_still_counts_bytes():
    pool = _pool(state_bytes=2.0)
    pool.forget_blocks()
    assert pool.insert([1, 2, 3], 12, "a") == 0
    pool.mark_ready([1, 2, 3], 12)
    assert pool.used_bytes == 3 * BT + 2.0 and len(pool) == 0
    assert pool.lookup([1, 2, 3], 12).hit_blocks == 0
