"""llama-server's slot choice and ubatch split, and the decode passes a step costs by them.

Read from llama.cpp's server (`server_context::get_available_slot`, `update_slots`) and batch
splitter (`llama_batch_allocr::split_equal`) in the llama-cpp-python 0.3.36 sdist:

- Slot choice (`SlotTable.pick`): among idle slots holding a cached prompt, the one whose longest
  common prefix with the new prompt is the largest fraction of the new prompt, if that fraction
  exceeds `similarity` (--slot-prompt-similarity, default 0.1; the first such slot on ties); else the
  least recently used idle slot (released longest ago; slots never used count as oldest, and among
  equals the one with the highest index, as the engine's `<=` scan picks it).
- Prompt cache (`SlotTable.saved_tokens` after each pick): with its host-memory prompt cache on
  (`--cache-ram`, 8,192 MiB by default) llama-server copies a slot's KV into it when a task takes the
  slot by least recently used (or by similarity keeping under half of the slot's tokens:
  `get_available_slot`, `prompt_save`), and then, with `--cache-idle-slots` (on by default), every idle
  slot whose tokens the cache does not hold yet (`process_single_task`, `SERVER_TASK_TYPE_COMPLETION`);
  on the server's one thread, between two steps. So each launch copies the tokens of the slots released
  since the launch before (a released slot holds its prompt + its output tokens - 1), except a slot
  the new task reuses by similarity.
- Prefix reuse (`SlotTable(prompt_cache=True)`, `reused_tokens` after each pick): a task reuses only
  what the slot it takes holds (the longest common prefix with the slot's tokens), after one restore
  from the host cache: when the slot was taken by least recently used, or by similarity keeping under
  half of the slot's tokens, the server saves the slot (`prompt_save`) and then loads the host entry with
  the best common prefix (`server_prompt_cache::load`: an entry whose common prefix is under a quarter of
  its own tokens is skipped, and it must beat the slot's own fraction kept and fraction of the new prompt,
  both strictly, scanned oldest first) into the slot, MOVING it: the entry leaves the cache. A prefix held
  only by busy slots, or restored into one, is therefore not found: at high load requests sharing a prompt
  miss it while every copy is checked out. Entries are evicted oldest first past `host_tokens`
  (--cache-ram over the KV bytes per token); at least one prompt token is always computed.
- A step's batch: one token for each decoding slot in slot order, then each prompt's chunk in slot
  order. With per-slot KV (kv_unified off) the batch is split into ubatches by `split_equal(n_ubatch,
  sequential=true)`: a ubatch takes the first sequence with tokens left, then every later one in
  batch order whose id is the last taken + 1, and the same number of tokens from each (as many as all
  have, up to n_ubatch in all). So decoding slots {0, 1, 2} are one ubatch, {0, 2} two; a prompt in
  the slot next to a decoding run puts its first token in that run's ubatch.

`decode_cost` charges each ubatch holding a decoding sequence the profile's decode step of that many
sequences (`decode_step_s(n, context)`, calibrated on n streams in adjacent slots, one ubatch each);
prompt chunks are charged by the caller (the aggregated instance's separate-passes form). A ubatch's
context is the sum of its decoders' contexts: although llama.cpp pads the KV cells a ubatch's
attention reads to the longest stream (`get_n_kv`), streams of 128 + 1,400 tokens in slots 0, 1 took
8.3 ms a step and 800 + 800 8.5 ms (engine CPU), as the sum says, not the padded span;
one 1,408-token stream beside three of 128 took 9.5 / 9.7 ms a step, four of 448 (the same sum, a
third of the span) 9.1 / 9.6 ms (engine timings, two probe rounds): a span term fitted 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

SIMILARITY = 0.1  # llama-server's --slot-prompt-similarity default
UBATCH_TOKENS = 512  # llama.cpp's n_ubatch default (-ub)


def common_prefix_tokens(a: Sequence[int], a_tokens: int, b: Sequence[int], b_tokens: int, block_tokens: int) -> int:
    """Tokens two prompts built from block hash ids share at their start: whole equal blocks, at most
    either prompt's length."""
    j = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        j += 1
    return min(j * block_tokens, a_tokens, b_tokens)


KEEP_MIN = 0.25  # server_prompt_cache::load: "don't trash large prompts" (entries sharing less are skipped)


class _Entry:
    """A host prompt-cache entry: a slot's prompt (hash ids, tokens), the tokens it held, its content version."""

    __slots__ = ("held", "ids", "tokens", "version")

    def __init__(self, ids: tuple[int, ...], tokens: int, held: int, version: int) -> None:
        self.ids, self.tokens, self.held, self.version = ids, tokens, held, version


class SlotTable:
    """Which slot each admitted request holds, chosen as llama-server chooses it."""

    def __init__(self, slots: int, *, similarity: float = SIMILARITY, block_tokens: int = 512,
                 order: Sequence[int] | None = None, prompt_cache: bool = False,
                 host_tokens: float | None = None) -> None:
        self.prompt_cache = prompt_cache  # prefix reuse from the slot and its host cache only (module doc)
        self.host_tokens = math.inf if host_tokens is None else float(host_tokens)
        self.host: list[_Entry] = []  # the host prompt cache, oldest first
        self.version = [0] * slots  # the content each slot holds (a new one per task), to skip saving it twice
        self._versions = 0
        self.reused_tokens = 0  # prompt_cache: the prefix the last pick's task finds in its slot
        self.restores = 0  # prompt_cache: tasks that took a host entry into their slot
        self.similarity = similarity
        self.block_tokens = block_tokens
        self.busy = [False] * slots
        self.last_used = [-1] * slots  # release order (-1: never released)
        if order is not None:  # an engine's slots released in this order before (least recent first)
            for rank, s in enumerate(order):
                self.last_used[s] = rank - len(order) - 1
        self.cached: list[tuple[tuple[int, ...], int]] = [((), 0)] * slots  # the prompt a slot holds
        self.held = [0] * slots  # tokens a slot holds (prompt + output - 1 once released)
        self.unsaved = [0] * slots  # tokens an idle slot holds that the prompt cache does not yet
        self.saved_tokens = 0  # what the last pick copied into the prompt cache (see the module doc)
        self._releases = 0

    def pick(self, hash_ids: Sequence[int], input_tokens: int) -> int:
        """Take an idle slot for a prompt (the caller admits only while one is idle)."""
        best, best_f = -1, 0.0
        if self.similarity > 0.0 and hash_ids and input_tokens > 0:
            for s, (ids, tokens) in enumerate(self.cached):
                if self.busy[s] or tokens == 0:
                    continue
                f = common_prefix_tokens(ids, tokens, hash_ids, input_tokens, self.block_tokens) / input_tokens
                if f > best_f and f > self.similarity:
                    best, best_f = s, f
        if best < 0:
            oldest = None
            for s in range(len(self.busy)):
                if not self.busy[s] and (oldest is None or self.last_used[s] <= oldest):
                    best, oldest = s, self.last_used[s]
        if best < 0:
            raise RuntimeError("no idle slot")  # the instance admits only while slots are free
        kept = best_f * input_tokens  # similarity: the prefix reused; the engine saves the slot if it keeps < half
        reused = best_f > 0.0 and kept >= 0.5 * self.held[best]
        self.saved_tokens = sum(self.unsaved[s] for s in range(len(self.busy))
                                if not self.busy[s] and not (s == best and reused))
        for s in range(len(self.busy)):
            if not self.busy[s]:
                self.unsaved[s] = 0
        if self.prompt_cache:
            self.reused_tokens = self._reuse(best, hash_ids, input_tokens, update=not reused)
        self.busy[best] = True
        self.cached[best] = (tuple(hash_ids), int(input_tokens))
        if self.prompt_cache:
            self._versions += 1
            self.version[best] = self._versions
            for s in range(len(self.busy)):  # --cache-idle-slots: every idle slot saved after the launch
                if not self.busy[s]:
                    self._save(s)
        return best

    # -- the host prompt cache (prompt_cache) ----------------------------------------------------
    def _save(self, slot: int) -> None:
        """`prompt_save` -> `server_prompt_cache::alloc`: skip a slot holding nothing or what an entry holds
        already; make room by evicting the oldest entries; an entry over the whole limit is not kept."""
        held = self.held[slot]
        if held <= 0 or held > self.host_tokens or any(e.version == self.version[slot] for e in self.host):
            return
        while self.host and sum(e.held for e in self.host) + held > self.host_tokens:
            self.host.pop(0)
        ids, tokens = self.cached[slot]
        self.host.append(_Entry(ids, tokens, held, self.version[slot]))

    def _reuse(self, slot: int, hash_ids: Sequence[int], input_tokens: int, *, update: bool) -> int:
        """The prefix a task taking `slot` finds there (`update`: after saving the slot and loading the best
        host entry into it, `server_prompt_cache::load`), at most all but one of its prompt tokens."""
        ids, tokens = self.cached[slot]
        lcp = common_prefix_tokens(ids, tokens, hash_ids, input_tokens, self.block_tokens) if tokens else 0
        if update:
            self._save(slot)
            held = self.held[slot]
            f_keep = lcp / held if held > 0 else -1.0
            f_sim = lcp / input_tokens
            best = None
            for entry in self.host:
                cur = common_prefix_tokens(entry.ids, entry.tokens, hash_ids, input_tokens, self.block_tokens)
                keep = cur / entry.held
                if keep < KEEP_MIN:
                    continue
                if f_keep < keep and f_sim < cur / input_tokens:
                    f_keep, f_sim, best, lcp = keep, cur / input_tokens, entry, cur
            if best is not None:  # moved into the slot: the cache no longer holds it
                self.host.remove(best)
                self.restores += 1
        return max(0, min(lcp, input_tokens - 1))

    def release(self, slot: int, held_tokens: int = 0) -> None:
        """The slot's request ended holding `held_tokens` tokens (prompt + output - 1)."""
        self.busy[slot] = False
        self.last_used[slot] = self._releases
        self._releases += 1
        self.held[slot] = self.unsaved[slot] = int(held_tokens)


def ubatches(batch: Sequence[tuple[int, int]], n_ubatch: int = UBATCH_TOKENS) -> list[list[tuple[int, int]]]:
    """`split_equal(n_ubatch, sequential=true)` of a batch given as (sequence id, tokens) in batch
    order, each sequence once: the ubatches, each a list of (sequence id, tokens in it)."""
    order = [s for s, n in batch if n > 0]
    left = {s: n for s, n in batch if n > 0}
    out: list[list[tuple[int, int]]] = []
    while any(left[s] for s in order):
        taken: list[int] = []
        for s in order:
            if left[s] and (not taken or s == taken[-1] + 1):
                taken.append(s)
        per = max(1, min(*(left[s] for s in taken), n_ubatch // len(taken)))
        for s in taken:
            left[s] -= per
        out.append([(s, per) for s in taken])
    return out


def decode_cost(decoders: Sequence[tuple[int, float]], prompts: Sequence[tuple[int, int]],
                step: Callable[[int, float], float], n_ubatch: int = UBATCH_TOKENS) -> float:
    """What the step's ubatches that hold decoding sequences cost: `decoders` (slot, context tokens),
    `prompts` (slot, prompt tokens this step); `step(n, context)` the decode step of one ubatch of n
    sequences holding `context` tokens of decoding sequences."""
    if not decoders:
        return 0.0
    context = dict(decoders)
    batch = [(s, 1) for s in sorted(context)] + sorted((s, k) for s, k in prompts)
    total = 0.0
    for ub in ubatches(batch, n_ubatch):
        held = [context[s] for s, _ in ub if s in context]
        if held:
            total += step(len(ub), float(sum(held)))
    return total
