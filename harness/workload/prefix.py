"""Block-level prefix cache on `hash_ids`, as prefix caching engines (vLLM, SGLang, Mooncake) do.

A request hits the longest run of its *leading* blocks already cached (a prefix hit stops at the
first missing block, even if later blocks are present). The emulator keeps one per cluster and
`harness-trace stats` replays traces through it, so both count hits the same way.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np

from harness.errors import InputError
from harness.workload.request import Request


class PrefixCache:
    """LRU over blocks, or unbounded when `capacity_blocks` is None.

    Counters: `requests` (match calls), `lookups` (blocks asked for), `hits` (leading blocks
    found, so hits / lookups is the block hit ratio) and `evictions`.
    """

    __slots__ = ("capacity_blocks", "_blocks", "requests", "lookups", "hits", "evictions")

    def __init__(self, capacity_blocks: int | None = None) -> None:
        if capacity_blocks is not None and (isinstance(capacity_blocks, bool) or int(capacity_blocks) != capacity_blocks
                                            or capacity_blocks < 1):
            raise InputError(f"PrefixCache capacity_blocks must be null (unbounded) or an integer >= 1, "
                             f"got {capacity_blocks!r}")
        self.capacity_blocks = None if capacity_blocks is None else int(capacity_blocks)
        # Implementation note: an unbounded cache never evicts, so recency is irrelevant and a set
        # is enough; the LRU needs OrderedDict's O(1) move_to_end / popitem(last=False).
        self._blocks: OrderedDict[int, None] | set[int] = set() if capacity_blocks is None else OrderedDict()
        self.requests = self.lookups = self.hits = self.evictions = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def __contains__(self, block_id: int) -> bool:
        return block_id in self._blocks

    def match(self, hash_ids: Sequence[int]) -> int:
        """Number of leading blocks present (contiguous from the first). Does not touch recency."""
        blocks = self._blocks
        matched = len(hash_ids)
        for i, h in enumerate(hash_ids):
            if h not in blocks:
                matched = i
                break
        self.requests += 1
        self.lookups += len(hash_ids)
        self.hits += matched
        return matched

    def insert(self, hash_ids: Iterable[int]) -> None:
        """Insert or touch every block of a request, in order, so its last block is the most recent."""
        blocks = self._blocks
        if isinstance(blocks, set):
            blocks.update(hash_ids)
            return
        capacity = cast(int, self.capacity_blocks)  # an OrderedDict of blocks exactly when bounded
        for h in hash_ids:
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
                if len(blocks) > capacity:
                    blocks.popitem(last=False)
                    self.evictions += 1

    def clear(self) -> None:
        self._blocks.clear()


def hit_tokens(matched_blocks: int, input_tokens: int, block_tokens: int) -> int:
    """Cached tokens of a prompt: whole matched blocks, capped at the prompt (the last block may be partial)."""
    return min(matched_blocks * block_tokens, input_tokens)


def replay_hits(requests: Sequence[Request], block_tokens: int, capacity_blocks: int | None = None) -> np.ndarray:
    """Hit tokens of each request when the requests pass, in order, through one prefix cache.

    Each request is looked up, then all of its blocks are inserted or touched (the convention of the
    sample traces' published hit rates, traces/README.md).
    """
    cache = PrefixCache(capacity_blocks)
    out = np.empty(len(requests), dtype=np.int64)
    for i, r in enumerate(requests):
        ids = r.hash_ids
        out[i] = hit_tokens(cache.match(ids), r.input_tokens, block_tokens)
        cache.insert(ids)
    return out


def uncached_input_tokens(requests: Sequence[Request], block_tokens: int,
                          capacity_blocks: int | None = None) -> np.ndarray:
    """Incremental (uncached) prompt length of each request: what a prefill actually computes."""
    inputs = np.fromiter((r.input_tokens for r in requests), dtype=np.int64, count=len(requests))
    uncached: np.ndarray = inputs - replay_hits(requests, block_tokens, capacity_blocks)
    return uncached


@dataclass(frozen=True)
class PrefixReplay:
    """How the planner replays a workload's prefixes: the caches the emulator runs with, as one cache.

    `enabled=False`: no prefix cache, every prompt is computed whole. `capacity_blocks`: an LRU of that
    many blocks (None: unbounded). `state_match`: a hybrid model's prefix is usable only up to a block at
    which some request stored its linear-attention state (its last complete block), as the emulator's
    pool (harness/deploy/cache_pool.py) counts it. Either way a prefill computes at least one token.
    """

    enabled: bool = True
    capacity_blocks: int | None = None
    state_match: bool = False


class ReplayPool:
    """One cluster's pool as the planner replays it (`PrefixReplay`): `usable` then `insert`, request by request."""

    __slots__ = ("replay", "block_tokens", "_cache", "_states")

    def __init__(self, replay: PrefixReplay, block_tokens: int) -> None:
        self.replay, self.block_tokens = replay, block_tokens
        self._cache = PrefixCache(replay.capacity_blocks) if replay.enabled else None
        self._states: set[int] = set()  # blocks at which a state was stored (state_match only)

    def usable(self, request: Request) -> int:
        """Prompt tokens the prefill can skip; at least one token is left to compute."""
        if self._cache is None:
            return 0
        ids = request.hash_ids
        matched = self._cache.match(ids)
        if self.replay.state_match:
            matched = next((k + 1 for k in range(matched - 1, -1, -1) if ids[k] in self._states), 0)
        return max(0, min(matched * self.block_tokens, request.input_tokens - 1))

    def insert(self, request: Request) -> None:
        if self._cache is None:
            return
        ids = request.hash_ids
        if self.replay.state_match:
            complete = min(len(ids), request.input_tokens // self.block_tokens)
            if complete >= 1:
                self._states.add(ids[complete - 1])
        self._cache.insert(ids)


def usable_prefix_tokens(requests: Sequence[Request], block_tokens: int, replay: PrefixReplay) -> np.ndarray:
    """Tokens each request can skip when the requests pass, in order, through one prefix cache."""
    out = np.zeros(len(requests), dtype=np.int64)
    if not replay.enabled:
        return out
    pool = ReplayPool(replay, block_tokens)
    for i, r in enumerate(requests):
        out[i] = pool.usable(r)
        pool.insert(r)
    return out


def replayed_input_tokens(requests: Sequence[Request], block_tokens: int, replay: PrefixReplay) -> np.ndarray:
    """What each prefill computes under `replay` (the planner's uncached length L)."""
    inputs = np.fromiter((r.input_tokens for r in requests), dtype=np.int64, count=len(requests))
    computed: np.ndarray = inputs - usable_prefix_tokens(requests, block_tokens, replay)
    return computed
