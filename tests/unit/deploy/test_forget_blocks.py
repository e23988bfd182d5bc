"""An unbounded pool that forgets blocks answers exactly as one that keeps them, for fresh block ids."""

from __future__ import annotations

import pytest

from harness.deploy.cache_pool import HybridCachePool
from harness.errors import InputError


def _pool(**kw) -> HybridCachePool:
    return HybridCachePool(block_tokens=4, kv_bytes_per_token=2.0, state_bytes=3.0, **kw)


def test_forgetful_pool_matches_for_never_shared_ids():
    keep, forget = _pool(), _pool()
    forget.forget_blocks()
    first = 0
    for tokens in (3, 4, 9, 17, 1, 40):
        ids = list(range(first, first + -(-tokens // 4)))
        first += len(ids)
        for pool in (keep, forget):
            look = pool.lookup(ids, tokens)
            pool.record(look, tokens)
            assert pool.insert(ids, tokens, "p0") == 0
            pool.reserve_transfer(100.0)
            pool.mark_ready(ids, tokens)
            pool.release_transfer(100.0)
        assert keep.lookup(ids[:1], 4) != forget.lookup(ids[:1], 4)  # keep has them: a real difference
        assert forget.lookup(ids, tokens).hit_blocks == 0
    for name in ("used_bytes", "lookups", "lookup_tokens", "hit_tokens", "usable_tokens", "evictions",
                 "peak_transfer_bytes"):
        assert getattr(keep, name) == getattr(forget, name), name
    assert len(forget) == 0 and len(keep) > 0


def test_forget_blocks_needs_an_unbounded_pool():
    with pytest.raises(InputError, match="unbounded"):
        _pool(capacity_tokens=100).forget_blocks()
