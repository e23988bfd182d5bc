"""A decode instance: continuous batching up to `bs_max` requests and a KV-memory limit.

The batch advances in lock-step iterations. Between two membership changes (a request joins or
leaves) the step time is constant, so nothing is simulated per token: each request knows the
global step at which it ends, and one timer waits for the earliest such step. A request that
arrives mid-step joins at the next step boundary.

Token accounting: the first output token comes out of the prefill and is emitted when the
request joins the batch; the remaining `output_tokens - 1` come one per decode step.

Context grows as tokens are produced: a sequence holds input + tokens produced so far, so each step
of an n-sequence batch adds n tokens to what the next step reads. Still one event per membership
change: over an interval of K steps to the next finish the step time is taken at the interval's
mean context (context now + n (K - 1) / 2), which makes the interval's total exactly the sum of its
steps for a step linear in the context (linear and memory-bound roofline decode). A join or finish
inside the interval rebases at the step reached, so the error is bounded by one interval's context
growth times the per-token cost of the step.

A request can leave early (`remove`, a cancelled request): its slot and KV memory are free at once;
the step in flight ends at its boundary as timed, and from there the batch steps without it (the step
time recomputed, as after a finish). One admitted but still waiting for its boundary just never joins.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from functools import partial

from harness.clock import Clock, Timer
from harness.deploy.job import Job

_EPS = 1e-9


class DecodeInstance:
    def __init__(
        self,
        name: str,
        clock: Clock,
        profile,
        on_first_token: Callable[[Job], None],
        on_done: Callable[[Job], None],
        step_s: float | None = None,
    ) -> None:
        self.name = name
        self.clock = clock
        self.profile = profile
        self.on_first_token = on_first_token
        self.on_done = on_done
        self.bs_max = int(profile.bs_max)
        self.kv_capacity_bytes = profile.kv_capacity_bytes
        self._fixed_step_s = step_s
        self._ends: list[tuple[int, int, Job]] = []  # (end step, seq, job)
        self._seq = 0
        self._step = 0  # index of the last step boundary we rebased on
        self._step_t = 0.0  # time of that boundary
        self._dt = 0.0  # current step time
        self._context_tokens = 0.0  # context held by the batch at step `_step` (inputs + tokens produced)
        self.reserved = 0  # requests admitted or about to join at the next boundary
        self.kv_bytes_used = 0.0
        self._timer: Timer | None = None

    # -- capacity -----------------------------------------------------------------------------
    def kv_need(self, job: Job) -> float:
        """KV of the whole context at the end of decode (cached on the job: one profile per cluster)."""
        if job.decode_kv_bytes is None:
            req = job.request
            job.decode_kv_bytes = float(self.profile.kv_bytes(req.input_tokens + req.output_tokens))
        return job.decode_kv_bytes

    def can_admit(self, job: Job) -> bool:
        if self.reserved >= self.bs_max:
            return False
        if self.kv_capacity_bytes is None:
            return True
        need = job.decode_kv_bytes
        return self.kv_bytes_used + (self.kv_need(job) if need is None else need) <= self.kv_capacity_bytes

    def fits_ever(self, job: Job) -> bool:
        return self.kv_capacity_bytes is None or self.kv_need(job) <= self.kv_capacity_bytes

    @property
    def running(self) -> int:
        return len(self._ends)

    def tokens_done(self, job: Job, now: float) -> int:
        """Output tokens `job` has produced by `now` (1 on joining, then one per completed step).

        Live mode streams tokens from this; sim mode never needs per-token times.
        """
        if math.isfinite(job.finish_s):
            return job.request.output_tokens
        join = job.join_step
        if join is None:
            return 0
        steps = self._step
        if self._ends and self._dt > 0:
            steps += math.floor((now - self._step_t) / self._dt + _EPS)
        return min(job.request.output_tokens, 1 + max(0, steps - join))

    # -- stepping -----------------------------------------------------------------------------
    def admit(self, job: Job, restore_s: float = 0.0) -> None:
        """Reserve a slot now; the request joins at the next step boundary (after `restore_s`, its KV
        restored into the slot, which it holds meanwhile)."""
        self.reserved += 1
        need = job.decode_kv_bytes
        self.kv_bytes_used += self.kv_need(job) if need is None else need
        job.decode_instance = self.name
        if restore_s > 0.0:
            self.clock.fire_at(self.clock.now() + restore_s, partial(self._enter, job))
            return
        self._enter(job)

    def _enter(self, job: Job) -> None:
        """Join now if the batch is idle, else at the next step boundary (`_join` skips a job cancelled by then)."""
        clock = self.clock
        now = clock.now()
        if not self._ends:  # an idle batch starts at once; else the job joins at the next step boundary
            self._join(job)
            return
        when = self._step_t + math.ceil((now - self._step_t) / self._dt - _EPS) * self._dt
        if when <= now:
            self._join(job)
        else:
            clock.fire_at(when, partial(self._join, job))

    def _join(self, job: Job) -> None:
        if job.abandoned:  # removed (cancelled) while it waited for this boundary
            return
        now = self.clock.now()
        ends = self._ends
        if ends and self._dt > 0:  # the step origin moves to the latest boundary at or before now
            k = math.floor((now - self._step_t) / self._dt + _EPS)
            self._step += k  # k steps done: every running sequence produced k tokens
            self._context_tokens += len(ends) * k
            self._step_t += k * self._dt
        else:
            self._step_t = now
        job.first_token_s = now
        self.on_first_token(job)
        req = job.request
        remaining = req.output_tokens - 1
        if remaining <= 0:
            self._release(job)
            job.finish_s = now
            self.on_done(job)
            return
        job.join_step = step = self._step
        self._context_tokens += req.input_tokens + 1
        heapq.heappush(ends, (step + remaining, self._seq, job))
        self._seq += 1
        self._reschedule()

    def remove(self, job: Job) -> bool:
        """Take a request out now (it was cancelled); False if it is not admitted here.

        Its slot and KV memory are free at once and no callback runs for it. The step in flight ends
        at its boundary with the old step time; the batch is rebased there and the step time
        recomputed without it, as after a finish. The caller marks the job `abandoned`, so an
        admission still waiting for its boundary does not join."""
        if job.decode_instance != self.name or math.isfinite(job.finish_s):
            return False
        ends = self._ends
        if job.join_step is None:  # admitted, joining at the next boundary: it never will
            self._release(job)
            return True
        i = next((i for i, entry in enumerate(ends) if entry[2] is job), -1)
        if i < 0:
            return False
        ends[i] = ends[-1]
        ends.pop()
        heapq.heapify(ends)
        req = job.request
        self._context_tokens -= req.input_tokens + 1 + (self._step - job.join_step)  # its context at `_step`
        self._release(job)
        timer = self._timer
        if timer is not None:
            timer.cancel()
            self._timer = None
        if not ends:
            return True
        now = self.clock.now()
        dt = self._dt
        boundary = self._step_t + math.ceil((now - self._step_t) / dt - _EPS) * dt if dt > 0 else now
        if boundary <= now:
            self._rebase()
        else:  # the step in flight ends as timed; the batch goes on without it from there
            self._timer = self.clock.call_at(boundary, self._rebase)
        return True

    def _rebase(self) -> None:
        """Move the step origin to the boundary at now and time the batch's next end again."""
        self._timer = None
        now = self.clock.now()
        ends = self._ends
        if ends and self._dt > 0:
            k = math.floor((now - self._step_t) / self._dt + _EPS)
            self._step += k
            self._context_tokens += len(ends) * k
            self._step_t += k * self._dt
        self._reschedule()

    def _release(self, job: Job) -> None:
        self.reserved -= 1
        need = job.decode_kv_bytes
        self.kv_bytes_used -= self.kv_need(job) if need is None else need

    def _reschedule(self) -> None:
        timer = self._timer
        if timer is not None:
            timer.cancelled = True  # Timer.cancel(), written out (a call per membership change)
            self._timer = None
        ends = self._ends
        if not ends:
            return
        steps = ends[0][0] - self._step
        if self._fixed_step_s is not None:  # else the step at the interval's mean context
            dt = self._fixed_step_s
        else:
            n = len(ends)
            dt = self.profile.decode_step_s(n, self._context_tokens + n * (steps - 1) / 2.0)
        self._dt = dt
        self._timer = self.clock.call_at(self._step_t + steps * dt, self._complete)

    def _complete(self) -> None:
        self._timer = None
        now = self.clock.now()
        ends = self._ends
        end_step = ends[0][0]
        self._context_tokens += len(ends) * (end_step - self._step)  # the steps done since the origin
        self._step = end_step
        self._step_t = now
        job = heapq.heappop(ends)[2]
        if ends and ends[0][0] <= end_step:  # several end at this step
            finished = [job]
            while ends and ends[0][0] <= end_step:
                finished.append(heapq.heappop(ends)[2])
        else:
            finished = None
        for done in finished or (job,):
            req = done.request
            self._context_tokens -= req.input_tokens + req.output_tokens
            self.reserved -= 1  # _release, written out
            need = done.decode_kv_bytes
            self.kv_bytes_used -= self.kv_need(done) if need is None else need
        self._reschedule()
        on_done = self.on_done
        if finished is None:
            job.finish_s = now
            on_done(job)
            return
        for done in finished:
            done.finish_s = now
            on_done(done)
