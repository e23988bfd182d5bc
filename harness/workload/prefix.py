"""Block-level prefix cache on `hash_ids`, as prefix caching engines (vLLM, SGLang, Mooncake) do.

A request hits the longest run of its *leading* blocks already cached (a prefix hit stops at the
first missing block, even if later blocks are present). The emulator keeps one per cluster and
`harness-trace stats` replays traces through it, so both count hits the same way.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
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
