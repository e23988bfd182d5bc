"""One cluster's hybrid prefix cache pool (paper section 3.2, Figure 4).

Hybrid models keep two kinds of cache, allocated from one shared pool:
- full-attention KV, block-level: a request reuses the longest run of its leading `hash_ids`
  blocks present in the pool (partial prefix matching);
- linear-attention / SWA recurrent state, request-level: one state per request, valid only at
  the exact length where it was taken. The engine checkpoints it at the prompt's last complete
  block boundary (as vLLM's block-aligned hybrid caching does), so a KV prefix hit is usable for
  compute only up to the longest matched block at which some request stored its state (exact
  cached-length match). Dense models have no such state: every matched block is usable.
Transfer-cache blocks hold a prefill's KV while it crosses to the decode side; they take pool
space until the transfer completes, and prefix blocks are evicted (LRU) to make room.

Blocks are entered when a prefill is scheduled and marked ready when it finishes, so a request
that matches a prefix still being computed is sent to the instance computing it (FIFO there
guarantees the prefix is ready in time); the deployment does that routing.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from harness.errors import require


@dataclass(frozen=True, slots=True)
class Lookup:
    hit_blocks: int  # leading KV blocks present (ready or in flight)
    hit_tokens: int  # block-level KV hit, capped at the prompt
    usable_tokens: int  # what the prefill can skip (state match for hybrids), < input
    ready_tokens: int  # usable and already computed (what another cluster could fetch)
    pending_owner: str | None  # instance computing a matched block not yet ready


class HybridCachePool:
    def __init__(self, *, block_tokens: int, kv_bytes_per_token: float, state_bytes: float,
                 capacity_tokens: int | None = None, exact_state_match: bool = True) -> None:
        require(block_tokens >= 1, f"block_tokens must be >= 1, got {block_tokens}")
        require(capacity_tokens is None or capacity_tokens >= 0,
                f"cache.capacity_tokens must be >= 0 or null (unlimited), got {capacity_tokens}")
        self.block_tokens = block_tokens
        self.block_bytes = max(1.0, block_tokens * float(kv_bytes_per_token))
        self.state_bytes = float(state_bytes)
        self.needs_state = exact_state_match and self.state_bytes > 0
        self.capacity_bytes = math.inf if capacity_tokens is None else capacity_tokens * float(kv_bytes_per_token)
        # key -> [owner, ready, bytes]; key is a block id, or ("s", block id) for a state stored there.
        self._lru: OrderedDict[object, list] = OrderedDict()
        self.used_bytes = 0.0
        self.transfer_bytes = 0.0
        self.peak_transfer_bytes = 0.0
        self.lookups = self.evictions = 0
        self.lookup_tokens = self.hit_tokens = self.usable_tokens = 0
        self._forget = False  # see forget_blocks
        self._miss = Lookup(0, 0, 0, 0, None)  # what a prompt whose first block is absent finds

    # -- reading ------------------------------------------------------------------------------
    def lookup(self, hash_ids: Sequence[int], input_tokens: int) -> Lookup:
        """What this pool holds for a prompt; no side effects (counting is `record`'s job)."""
        lru = self._lru
        if input_tokens >= 0 and (self._forget or len(hash_ids) == 0 or hash_ids[0] not in lru):
            return self._miss  # what the loop below answers when it stops at the first block
        hit = usable = ready = 0
        pending = None
        all_ready = True
        for i, h in enumerate(hash_ids):
            entry = lru.get(h)
            if entry is None:
                break
            hit = i + 1
            if not entry[1]:
                all_ready = False
                pending = entry[0]
            state = lru.get(("s", h)) if self.needs_state else entry
            if state is not None:
                usable = hit
                if all_ready and state[1]:
                    ready = hit
        cap = max(0, input_tokens - 1)  # the prefill always computes at least the last token
        bt = self.block_tokens
        return Lookup(hit, min(hit * bt, input_tokens), min(usable * bt, cap), min(ready * bt, cap), pending)

    def record(self, lookup: Lookup, input_tokens: int) -> None:
        self.lookups += 1
        self.lookup_tokens += input_tokens
        self.hit_tokens += lookup.hit_tokens
        self.usable_tokens += lookup.usable_tokens

    # -- writing ------------------------------------------------------------------------------
    def _state_key(self, hash_ids: Sequence[int], input_tokens: int):
        complete = min(len(hash_ids), input_tokens // self.block_tokens)
        return ("s", hash_ids[complete - 1]) if self.needs_state and complete >= 1 else None

    def insert(self, hash_ids: Sequence[int], input_tokens: int, owner: str, present: int = 0) -> int:
        """Enter (or touch) a scheduled prefill's blocks and its state checkpoint; returns evictions.

        `present`: how many leading blocks a `lookup` just found in the pool (its `hit_blocks`, with no
        insert since); an unbounded pool, which has no recency to touch, skips them."""
        block_bytes = self.block_bytes
        if self._forget:  # nothing is held: every block is new, nothing can be evicted (see forget_blocks)
            self.used_bytes += len(hash_ids) * block_bytes
            if self.needs_state and min(len(hash_ids), input_tokens // self.block_tokens) >= 1:
                self.used_bytes += self.state_bytes
            return 0
        lru = self._lru
        if self.capacity_bytes == math.inf:  # unbounded: no eviction, so recency never matters
            tail = hash_ids[present:] if present else hash_ids
            new = [h for h in dict.fromkeys(tail) if h not in lru]  # in bulk: no per-block calls
            lru.update(zip(new, [[owner, False, block_bytes] for _ in new], strict=True))
            added = len(new)
        else:
            added = 0
            for h in hash_ids:
                if h in lru:
                    lru.move_to_end(h)
                else:
                    lru[h] = [owner, False, block_bytes]
                    added += 1
        self.used_bytes += added * block_bytes
        key = self._state_key(hash_ids, input_tokens)
        if key is not None:
            self._put(key, owner, self.state_bytes)
        before = self.evictions
        self._evict()
        return self.evictions - before

    def _put(self, key, owner: str, nbytes: float) -> None:
        if key in self._lru:
            self._lru.move_to_end(key)
            return
        self._lru[key] = [owner, False, nbytes]
        self.used_bytes += nbytes

    def mark_ready(self, hash_ids: Sequence[int], input_tokens: int) -> None:
        if self._forget:
            return  # nothing is held
        lru = self._lru
        for h in hash_ids:
            entry = lru.get(h)
            if entry is not None:
                entry[1] = True
        key = self._state_key(hash_ids, input_tokens)
        state = lru.get(key) if key is not None else None
        if state is not None:
            state[1] = True

    def reserve_transfer(self, nbytes: float) -> int:
        """Hold transfer-cache blocks for a KV transfer; evicts prefix blocks if the pool is full."""
        self.transfer_bytes += nbytes
        self.peak_transfer_bytes = max(self.peak_transfer_bytes, self.transfer_bytes)
        if self.capacity_bytes == math.inf:
            return 0  # an unbounded pool evicts nothing
        before = self.evictions
        self._evict()
        return self.evictions - before

    def release_transfer(self, nbytes: float) -> None:
        self.transfer_bytes = max(0.0, self.transfer_bytes - nbytes)

    def _evict(self) -> None:
        lru = self._lru
        while lru and self.used_bytes + self.transfer_bytes > self.capacity_bytes:
            _, entry = lru.popitem(last=False)
            self.used_bytes -= entry[2]
            self.evictions += 1

    def __len__(self) -> int:
        return len(self._lru)

    def forget_blocks(self) -> None:
        """Store no blocks from now on: for workloads whose block ids are never shared.

        When every prompt's hash_ids are fresh (SyntheticWorkload: `unique_hash_ids`) and the pool
        is unbounded, no stored block is ever read back (a lookup stops at its first, absent block)
        or evicted, so keeping them is memory that grows with the run and changes no result: the
        same code runs, lookups, counters and `used_bytes` are the same, only `len(pool)` is 0.
        """
        require(self.capacity_bytes == math.inf, "forget_blocks needs an unbounded pool (cache.capacity_tokens=null)")
        self._lru.clear()
        self._forget = True  # lookup, insert and mark_ready take their short paths from now on
