"""A prefill instance: a FIFO queue served one forward pass at a time.

A pass takes one request, or with `max_batch_tokens` several queued requests whose new tokens fit
the budget. Its duration comes from the instance profile: for a single request with a cached
prefix, `prefill_s(new, cached)`; a batch pays the fixed per-pass cost once, i.e.
`T(0) + sum(prefill_s(n_i, c_i) - T(0))`. The instance reports its start and end through
callbacks; the deployment moves the KV and the request on.

A request can be taken back: queued (`withdraw`), or running (`abort`, a cancelled request). A lone
request's pass stops at once and the instance starts its next request then (an engine with chunked
prefill drops an aborted request at its next chunk, milliseconds away, which a whole-prompt pass
stands for as "now"). In a batch the other members go on: the pass does all its members' work at one
pace, so the same share of each is left, and the aborted request's part of it (that share of its
`prefill_s - T(0)`) is dropped: the pass ends earlier. A pass's end is a `fire_at` (no handle to
cancel): its callback, when it comes for a pass aborted or shortened, finds the instance busy until
later (or idle) and does nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from harness.clock import Clock
from harness.deploy.job import Job


class PrefillInstance:
    def __init__(
        self,
        name: str,
        clock: Clock,
        profile,
        on_start: Callable[[Job, float], None],
        on_done: Callable[[Job], None],
        max_batch_tokens: int | None = None,
        save_s: Callable[[Job], float] | None = None,
    ) -> None:
        self.name = name
        self.clock = clock
        self.profile = profile
        self.on_start = on_start
        self.on_done = on_done
        self.max_batch_tokens = max_batch_tokens
        self.save_s = save_s  # saving a request's KV after its prefill (harness/deploy/handoff.py): part of its pass
        self.queue: deque[Job] = deque()
        self.running: list[Job] = []
        self._queued_work_s = 0.0
        self._busy_until = 0.0
        self.busy_s = 0.0  # accumulated service time, for utilisation
        self._base_s = profile.prefill_s(0, 0)
        self.holds = 0  # finished requests whose KV has not landed on the decode side (it fills this HBM)
        self.on_change: Callable[[PrefillInstance], None] | None = None  # free_at moved
        self.version = 0  # bumped on every change of free_at the deployment is told about

    @property
    def free_at(self) -> float:
        """When this instance would be done with everything it holds (in the past when idle)."""
        return self._busy_until + self._queued_work_s

    @property
    def pass_end_s(self) -> float:
        """When the pass in progress ends (in the past when idle)."""
        return self._busy_until

    def _changed(self) -> None:
        self.version += 1
        if self.on_change is not None:
            self.on_change(self)

    def service_s(self, job: Job) -> float:
        return self.profile.prefill_s(job.new_tokens, job.cached_tokens)

    def backlog_s(self) -> float:
        """Seconds of work ahead of a request enqueued now (least-loaded routing uses this)."""
        return max(0.0, self.free_at - self.clock.now())

    def submit(self, job: Job) -> None:
        job.prefill_instance = self.name
        cached = job.cached_tokens
        job.prefill_s = work = self.profile.prefill_s(job.request.input_tokens - cached, cached)  # service_s
        if self.save_s is not None:  # the save runs on the instance after the prefill: it lengthens the pass
            job.kv_save_s = save = self.save_s(job)
            job.prefill_s = work = work + save
        self.queue.append(job)
        self._queued_work_s += work
        if not self.running:
            now = self.clock.now()
            if self._busy_until < now:
                self._busy_until = now  # idle until now: work starts now
            self._start_next()
        self.version += 1  # _changed, inlined: once per request
        if self.on_change is not None:
            self.on_change(self)

    def withdraw(self, job: Job) -> bool:
        """Take a queued (not yet running) request back; False if it is not in the queue."""
        try:
            self.queue.remove(job)
        except ValueError:
            return False
        self._queued_work_s = max(0.0, self._queued_work_s - job.prefill_s)
        self._changed()
        return True

    def abort(self, job: Job) -> bool:
        """Stop a running request now (it was cancelled); False if it is not running here.

        No callback runs for it. Alone in its pass, the instance moves on to its next request now;
        in a batch, the pass ends sooner by the aborted request's share of the work left."""
        running = self.running
        if job not in running:
            return False
        now = self.clock.now()
        rest = [j for j in running if j is not job]
        end = self._busy_until
        new_end = now
        if rest:  # every member's work goes at one pace: the same share of each is left, T(0) counted once
            base = self._base_s
            work = base + sum(j.prefill_s - base for j in running)
            left = (end - now) / work if work > 0 else 0.0
            new_end = max(now, end - left * (job.prefill_s - base))
        self.busy_s -= end - new_end  # utilisation: the time it no longer spends
        self._busy_until = new_end
        self.running = rest
        if rest:
            self.clock.fire_at(new_end, self._finish)
        else:
            self._start_next()
        self._changed()
        return True

    def _take_batch(self) -> list[Job]:
        batch = [self.queue.popleft()]
        if self.max_batch_tokens is not None:
            budget = self.max_batch_tokens - batch[0].new_tokens
            while self.queue and self.queue[0].new_tokens <= budget:
                budget -= self.queue[0].new_tokens
                batch.append(self.queue.popleft())
        return batch

    def hold(self) -> None:
        """A finished request's KV cannot land (the decode side is full): start nothing new until released."""
        self.holds += 1

    def release(self) -> None:
        self.holds -= 1
        if self.holds == 0 and not self.running:
            if self._busy_until < self.clock.now():
                self._busy_until = self.clock.now()
            self._start_next()
            self._changed()

    def _start_next(self) -> None:
        queue = self.queue
        if not queue or self.holds > 0:
            return
        now = self.clock.now()
        if self.max_batch_tokens is None:  # one request a pass (the common case): no batch arithmetic
            job = queue.popleft()
            batch = [job]
            duration = work = job.prefill_s
        else:
            batch = self._take_batch()
            work = sum(job.prefill_s for job in batch)
            duration = work - (len(batch) - 1) * self._base_s
        queued = self._queued_work_s - work
        self._queued_work_s = queued if queued > 0.0 else 0.0
        self.running = batch
        self._busy_until = now + duration
        self.busy_s += duration
        on_start = self.on_start
        compute = duration if self.save_s is None else duration - sum(job.kv_save_s for job in batch)
        for job in batch:
            job.prefill_start_s = now
            on_start(job, compute)
        self.clock.fire_at(now + duration, self._finish)
        if len(batch) > 1:
            self._changed()  # a batch pays the fixed cost once: the instance frees up earlier

    def _finish(self) -> None:
        now = self.clock.now()
        if now < self._busy_until:  # the end of a pass since aborted or shortened (see `abort`)
            return
        batch, self.running = self.running, []
        end = now if self.save_s is None else now - sum(job.kv_save_s for job in batch)  # the saves came after
        for job in batch:
            job.prefill_end_s = end
            self.on_done(job)
        if self.queue:  # else _start_next has nothing to start
            self._start_next()
