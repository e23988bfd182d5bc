"""An aggregated engine instance: prefill and decode on the same slots, continuous batching.

This is how a single-node engine such as llama.cpp's `llama-server` serves: at most `slots`
requests are admitted (the rest wait FIFO); every engine step runs one decode token for each
admitted request that has its first token, plus prompt tokens of admitted requests still
prefilling, up to `chunk_tokens` tokens in the step (the engine's batch, n_batch; null: whole
prompts). Prompt chunks go to requests in admission order. A step's time comes from the profile:

    step_s = base + sum over prefilling requests of [T(c + k) - T(c)]

where a request has `c` prompt tokens already in its KV (cached prefix or earlier chunks) and `k`
in this step, `T` is the prefill curve, and `base` is the larger of `T(0)` (the fixed per-pass
cost) and the decode step `decode_step_s(b, context)` of the `b` decoding requests (`T(0)` when
none decodes); with decoding requests in the step the prompt sum is multiplied by
`mixed_prompt_factor` (>= 1: an engine may process a prompt slower beside decodes than alone, as
llama-server does). A step without prompt work is the decode step alone.

With `separate_passes` the step's passes are not shared: the decoding requests run as their own pass
and each prompt chunk as its own, so

    step_s = decode_step_s(b, context) [b > 0] + sum over prefilling requests of [f * (T(c + k) - T(c)) + T(0)]

(`f` the `mixed_prompt_factor` when b > 0, else 1). This is llama-server with its default per-slot
KV (kv_unified off): it splits a batch into ubatches of consecutive slots with equal token counts,
so the decode tokens and each prompt mostly run as separate ubatches, each with its own fixed cost.
With `slot_layout` (on top of separate passes) each admitted request holds an engine slot chosen by
llama-server's rule, and the decode term is not one step of the b decoders but one decode step per
ubatch the engine's splitter forms from the step's batch (runs of consecutive slots; a prompt in the
slot after a decoding run lends it its first token), each with the contexts of its own decoders
(`slot_layout.decode_cost`): two decoders in slots 0 and 2 cost
decode_step_s(1, .) twice, in slots 0 and 1 decode_step_s(2, .) once.
Alone a prompt costs T(c + k) - T(c) + T(0) either way. A lone
request's time to first token is therefore exactly `prefill_s(new, cached)` (plus `wake_s` below).

With `slot_layout` and `cache_save_token_s` > 0 a step that admits requests first spends
`cache_save_token_s` x the tokens the engine copies into its host-memory prompt cache at those
launches (the slots released since the previous launch: `slot_layout.SlotTable.saved_tokens`): llama-server
does that on its one thread between two steps, so the new request's prompt and every decoding
sequence wait for it.

With `tile_tokens` > 0 and `tile_fill` f > 0 a prompt chunk's last ubatch pays for a whole tile of rows: the
engine computes attention over query tiles of `tile_tokens` rows and pads a partial last tile with empty rows
(llama.cpp's CPU flash attention, `ggml_compute_forward_flash_attn_ext_tiled`: GGML_FA_TILE_Q = 64 rows,
used for ubatches of at least 64 rows), so k tokens cost their marginal work plus f x the marginal work of
the empty rows: `m(c, k) + f * (m(c, k') - m(c, k))`, k' = k with its last ubatch (`ubatch_tokens`) rounded
up to whole tiles (`padded_tokens`). Prompts whose lengths are whole tiles (the usual probe grid) pay nothing
more; 0 (default): not modelled.

With `slot_layout` and `slot_prompt_cache` a request's cached prefix is what the engine finds in the slot it
takes, as llama-server finds it (`slot_layout.SlotTable`, prompt_cache): the slot's own prompt, or an entry of
the host-memory prompt cache restored into it, which leaves that cache; not the deployment's block pool, which
finds any prefix computed before. While every copy of a shared prompt sits in a busy slot, a request that
shares it computes it again.

A request arriving at an instance that sat idle for at least `wake_after_s` waits `wake_s` more
before its first step (an engine woken from idle runs its first pass slower than a busy one).

A request's first token comes out of the step that finishes its prompt; each later token, one
step. Between membership changes (no request prefilling, none admissible) the batch is fixed, so
a whole run of decode steps is one timer (step time at the run's mean context); an arrival that
can be admitted cuts it at the next step boundary.

A request can leave early (`cancel`, its client went away): queued, it leaves the queue; admitted, its
slot is free at once and the engine steps without it from the end of the step in flight (a run of
decode steps is cut there; a step that was computing nothing but its prompt stops at once and the
engine plans its next step now, as an engine drops an aborted request between two steps).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence

from harness.clock import Clock, Timer
from harness.deploy.job import Job
from harness.deploy.slot_layout import SIMILARITY, UBATCH_TOKENS, SlotTable, decode_cost

_EPS = 1e-9


def padded_tokens(tokens: int, tile: int, ubatch: int) -> int:
    """The rows an engine computes for `tokens` prompt tokens in ubatches of `ubatch`, each ubatch of at
    least `tile` rows in whole tiles of `tile` rows (a partial last tile padded; a ubatch of fewer rows is
    not tiled): 130 -> 192 and 520 (512 + 8) -> 520 at tile 64, ubatch 512."""
    if tile <= 0 or tokens <= 0:
        return tokens
    last = tokens % ubatch or min(tokens, ubatch)
    if last < tile or last % tile == 0:
        return tokens
    return tokens + tile - last % tile


class _Seq:
    """An admitted request: prompt tokens left to compute, context in KV, tokens emitted."""

    __slots__ = ("context", "emitted", "job", "prefill_left", "slot")

    def __init__(self, job: Job, slot: int = -1) -> None:
        self.job = job
        self.slot = slot  # the engine slot it holds (slot_layout; -1: not tracked)
        self.prefill_left = job.request.input_tokens - job.cached_tokens
        self.context = job.cached_tokens
        self.emitted = 0


class AggregatedInstance:
    def __init__(self, name: str, clock: Clock, profile, *, slots: int, chunk_tokens: int | None,
                 admit: Callable[[Job], None], on_first_token: Callable[[Job], None],
                 on_done: Callable[[Job], None], prefix_attention: float = 1.0, wake_s: float = 0.0,
                 wake_after_s: float = 0.0, mixed_prompt_factor: float = 1.0,
                 separate_passes: bool = False, slot_layout: bool = False, slot_similarity: float = SIMILARITY,
                 ubatch_tokens: int = UBATCH_TOKENS, block_tokens: int = 512, cache_save_token_s: float = 0.0,
                 slot_order: Sequence[int] | None = None, tile_tokens: int = 0, tile_fill: float = 0.0,
                 slot_prompt_cache: bool = False, host_cache_tokens: float | None = None) -> None:
        self.name = name
        self.clock = clock
        self.profile = profile
        self.bs_max = slots  # what the time series calls decode slots
        self.chunk_tokens = chunk_tokens
        self.prefix_attention = prefix_attention
        self.wake_s, self.wake_after_s = wake_s, wake_after_s
        self.mixed_prompt_factor = mixed_prompt_factor  # prompt work beside decodes costs this much more
        self.separate_passes = separate_passes  # decodes and each prompt chunk: passes of their own
        # slot_layout: requests hold engine slots chosen by the engine's rule; decodes cost by ubatch
        self.slots = (SlotTable(slots, similarity=slot_similarity, block_tokens=block_tokens, order=slot_order,
                                prompt_cache=slot_prompt_cache, host_tokens=host_cache_tokens)
                      if slot_layout else None)
        self.ubatch_tokens = ubatch_tokens
        self.cache_save_token_s = cache_save_token_s  # slot_layout: a launch copies released slots' KV (serial)
        self.tile_tokens, self.tile_fill = tile_tokens, tile_fill  # a partial attention tile costs f of a full one
        self._idle_since = -math.inf  # when the instance last ran out of work (-inf: never busy yet)
        self._admit_hook = admit  # the deployment looks the prefix cache up at admission
        self.on_first_token = on_first_token
        self.on_done = on_done
        self.queue: deque[Job] = deque()
        self.running: list[_Seq] = []
        self._t0 = float(profile.prefill_s(0, 0))
        self._timer: Timer | None = None
        self._seg_start = 0.0  # the current segment: `_seg_steps` steps of `_seg_dt` from `_seg_start`
        self._seg_dt = 0.0
        self._seg_steps = 0
        self._seg_chunks: list[tuple[_Seq, int]] = []  # prompt tokens per request in a prefill step
        self.steps = 0
        self.busy_s = 0.0

    @property
    def load(self) -> int:
        return len(self.running) + len(self.queue)

    # -- arrival ------------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        job.prefill_instance = job.decode_instance = self.name
        self.queue.append(job)
        if self._timer is None:  # idle: start at once (after any other arrival at this instant), or after
            now = self.clock.now()  # waking up when it sat idle long enough to go cold
            wake = self.wake_s if self.wake_s and now - self._idle_since >= self.wake_after_s else 0.0
            self._timer = self.clock.call_at(now + wake, self._plan)
            self._seg_steps = 0
        elif len(self.running) < self.bs_max and self._seg_steps > 1:
            self._cut()

    def _cut(self) -> None:
        """End the current run of decode steps at the next step boundary (a request can join)."""
        now = self.clock.now()
        k = max(1, math.ceil((now - self._seg_start) / self._seg_dt - _EPS))
        if k >= self._seg_steps or self._timer is None:
            return
        self._timer.cancel()
        self._seg_steps = k
        self._timer = self.clock.call_at(self._seg_start + k * self._seg_dt, self._end_segment)

    # -- stepping -----------------------------------------------------------------------------
    def _marginal(self, context: int, tokens: int) -> float:
        """Prompt work of `tokens` tokens on `context` tokens in KV (`_work`), plus `tile_fill` x the work of
        the empty rows padding its last attention tile (`padded_tokens`; nothing when off)."""
        work = self._work(context, tokens)
        if self.tile_fill and self.tile_tokens:
            padded = padded_tokens(tokens, self.tile_tokens, self.ubatch_tokens)
            if padded > tokens:
                work += self.tile_fill * (self._work(context, padded) - work)
        return work

    def _work(self, context: int, tokens: int) -> float:
        """The cost model charges T(c + k) - T(c); `prefix_attention` < 1 charges only that share of what
        this exceeds a fresh prompt's T(k) - T(0) by (the attention over the prefix), as measured on an engine."""
        full = self.profile.prefill_s(tokens, context) - self._t0
        if context == 0 or self.prefix_attention == 1.0:
            return full
        fresh = self.profile.prefill_s(tokens, 0) - self._t0
        return fresh + self.prefix_attention * (full - fresh)

    def _plan(self) -> None:
        """Admit what fits, then start the next segment (one prefill step, or a run of decode steps)."""
        now = self.clock.now()
        launch = 0.0  # the engine's own work launching the admitted requests, before the step (prompt cache)
        while self.queue and len(self.running) < self.bs_max:
            job = self.queue.popleft()
            self._admit_hook(job)
            job.prefill_start_s = now
            slot = -1
            if self.slots is not None:
                slot = self.slots.pick(job.request.hash_ids, job.request.input_tokens)
                launch += self.cache_save_token_s * self.slots.saved_tokens
                if self.slots.prompt_cache:  # the engine reuses what this slot holds (after a host-cache restore)
                    job.cached_tokens = job.cached_local_tokens = self.slots.reused_tokens
            self.running.append(_Seq(job, slot))
        if not self.running:
            self._timer = None
            self._idle_since = now
            return
        decoders = [s for s in self.running if s.prefill_left == 0]
        context = sum(s.context for s in decoders)
        prefilling = [s for s in self.running if s.prefill_left > 0]
        if prefilling:
            if self.slots is not None:
                base = 0.0  # the decode ubatches, once the step's prompt chunks are known (below)
            elif self.separate_passes:
                base = self.profile.decode_step_s(len(decoders), context) if decoders else 0.0
            else:
                base = max(self._t0, self.profile.decode_step_s(len(decoders), context)) if decoders else self._t0
            budget = math.inf if self.chunk_tokens is None else max(1, self.chunk_tokens - len(decoders))
            chunks, work = [], 0.0
            for seq in prefilling:
                if budget <= 0:
                    break
                k = int(min(seq.prefill_left, budget))
                budget -= k
                chunks.append((seq, k))
                work += self._marginal(seq.context, k)
            self._seg_chunks = chunks
            if decoders and self.mixed_prompt_factor != 1.0:
                work *= self.mixed_prompt_factor
            if self.separate_passes:
                work += len(chunks) * self._t0
            if self.slots is not None:
                base = decode_cost([(s.slot, s.context) for s in decoders], [(q.slot, k) for q, k in chunks],
                                   self.profile.decode_step_s, self.ubatch_tokens)
            self._start(now, launch + base + work, 1)
            return
        self._seg_chunks = []
        steps = min(s.job.request.output_tokens - s.emitted for s in decoders)
        # Context grows by one token per decoder per step: the run's mean context (exact for a
        # step linear in context).
        mid = context + len(decoders) * (steps - 1) / 2.0
        if self.slots is not None:
            dt = decode_cost([(s.slot, s.context + (steps - 1) / 2.0) for s in decoders], [],
                             self.profile.decode_step_s, self.ubatch_tokens)
        else:
            dt = self.profile.decode_step_s(len(decoders), mid)
        self._start(now, dt, steps)

    def _start(self, now: float, dt: float, steps: int) -> None:
        self._seg_start, self._seg_dt, self._seg_steps = now, dt, steps
        self._timer = self.clock.call_at(now + steps * dt, self._end_segment)

    def _end_segment(self) -> None:
        now = self.clock.now()
        steps = self._seg_steps
        self.steps += steps
        self.busy_s += steps * self._seg_dt
        self._timer = None
        done: list[Job] = []
        for seq in self.running:
            if seq.prefill_left == 0 and seq.emitted >= 1:
                seq.emitted += steps
                seq.context += steps
        for seq, k in self._seg_chunks:
            seq.prefill_left -= k
            seq.context += k
            if seq.prefill_left == 0:
                seq.emitted = 1
                job = seq.job
                job.first_token_s = job.prefill_end_s = job.kv_ready_s = now
                self.on_first_token(job)
        self._seg_chunks = []
        keep, released = [], []
        for seq in self.running:
            if seq.emitted >= seq.job.request.output_tokens:
                seq.job.finish_s = now
                done.append(seq.job)
                if self.slots is not None:
                    released.append((seq.slot, seq.context))
            else:
                keep.append(seq)
        self.running = keep
        if self.slots is not None:
            for slot, held in sorted(released):  # the engine releases in slot order
                self.slots.release(slot, held)
        self._plan()
        for job in done:
            self.on_done(job)

    # -- live mode ----------------------------------------------------------------------------
    def tokens_done(self, job: Job, now: float) -> int:
        for seq in self.running:
            if seq.job is job:
                if seq.emitted == 0 or self._seg_chunks or self._seg_dt <= 0:
                    return seq.emitted
                k = math.floor((now - self._seg_start) / self._seg_dt + _EPS)
                return min(job.request.output_tokens, seq.emitted + max(0, min(k, self._seg_steps)))
        return 0

    def cancel(self, job: Job) -> bool:
        """Take a request out now, queued or admitted; False if it is not here. No callback runs for it."""
        if job in self.queue:
            self.queue.remove(job)
            return True
        seq = next((s for s in self.running if s.job is job), None)
        if seq is None:
            return False
        self.running.remove(seq)
        if self.slots is not None:
            self.slots.release(seq.slot, seq.context)
        chunks = self._seg_chunks
        if chunks:
            self._seg_chunks = chunks = [(s, k) for s, k in chunks if s is not seq]
        now = self.clock.now()
        # Anyone else still in the step in flight: a prompt chunk, or a decoder (one with its first token).
        others = bool(chunks) or any(s.prefill_left == 0 and s.emitted >= 1 for s in self.running)
        if self._timer is not None and not others:  # the step served only this request: stop it now
            self._timer.cancel()
            self._timer = None
            self.busy_s += now - self._seg_start  # the part of the step it ran
            self._seg_chunks = []
            self._plan()
        elif self._seg_steps > 1:
            self._cut()
        return True

    def drop_all(self) -> list[Job]:
        """Everything admitted or queued (for the deployment's close)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        jobs = [s.job for s in self.running] + list(self.queue)
        if self.slots is not None:
            for seq in self.running:
                self.slots.release(seq.slot)
        self.running, self.queue = [], deque()
        return jobs
