"""The decode side of a deployment: a landing buffer for KV that waits for a slot, and FIFO dispatch.

KV that has landed waits for a decode slot in the decode side's free KV memory (`landed_bytes`); when
that is full the KV stays where it was computed and its prefill instance starts nothing new, so
decode pushes back on prefill. Waiting requests go, in order, to the decode instance with the fewest
requests that can take the head of the line. Mixed into `Deployment`, whose state it reads.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

from harness.deploy.decode import DecodeInstance
from harness.deploy.state import DeploymentState

if TYPE_CHECKING:
    from harness.deploy.job import Job


_reserved = attrgetter("reserved")  # a decode instance's requests admitted or joining


class DecodePool(DeploymentState):
    def _kv_ready(self, job: Job) -> None:
        job.kv_ready_s = self.clock.now()
        if self.blocked or not self._landing_fits(job):
            self.blocked.append(job)  # landing buffer full: the KV stays on its prefill instance, which holds
            self._prefill_of(job, hold=True)
            return
        self._land(job)
        self._dispatch()

    # Landing buffer: KV waiting for a decode slot occupies the decode side's free KV memory; when that
    # is full the KV stays where it was computed and its prefill instance starts nothing new.
    def _landing_fits(self, job: Job) -> bool:
        decode = self.decode
        if not decode:
            return True
        free = 0.0  # summed in the order `sum` did
        for d in decode:
            capacity = d.kv_capacity_bytes
            if capacity is None:
                return True
            free += capacity - d.kv_bytes_used
        need = job.decode_kv_bytes  # kv_need, cached on the job once computed
        return self.landed_bytes + (decode[0].kv_need(job) if need is None else need) <= free

    def _land(self, job: Job) -> None:
        need = job.decode_kv_bytes
        self.landed_bytes += (self.decode[0].kv_need(job) if need is None else need) if self.decode else 0.0
        self.waiting.append(job)

    def _prefill_of(self, job: Job, hold: bool) -> None:
        for instance in self.prefill.get(job.route or "", []):
            if instance.name == job.prefill_instance:
                instance.hold() if hold else instance.release()
                return

    def _dispatch(self) -> None:
        """FIFO into the decode instance with the fewest requests that can take the head of the line."""
        while self.blocked and self._landing_fits(self.blocked[0]):
            job = self.blocked.popleft()
            self._land(job)
            self._prefill_of(job, hold=False)
        waiting, decode = self.waiting, self.decode
        while waiting and decode:
            job = waiting[0]
            best = min(decode, key=_reserved)
            if not best.can_admit(job):  # the emptiest is full or short of KV memory: look further
                candidates = [d for d in decode if d.can_admit(job)]
                if not candidates:
                    return
                best = min(candidates, key=_reserved)
            waiting.popleft()
            need = job.decode_kv_bytes
            landed = self.landed_bytes - (best.kv_need(job) if need is None else need)
            self.landed_bytes = landed if landed > 0.0 else 0.0  # max(0.0, landed)
            handoff = self.handoff
            if handoff is None:
                best.admit(job)
            else:  # the KV is restored into the slot before the first token
                job.kv_restore_s = restore = handoff.restore_s(job.request.input_tokens)
                best.admit(job, restore)

    def _on_first_token(self, job: Job) -> None:
        if self.on_first_token is not None:
            self.on_first_token(job)

    def _on_decode_done(self, job: Job) -> None:
        self._finish(job)
        if self.draining:
            self._check_draining()
        if self.blocked or self.waiting:  # else _dispatch has nothing to do
            self._dispatch()

    def tokens_done(self, job: Job) -> int:
        """Output tokens produced so far (for streaming in live mode)."""
        if job.finish_s == job.finish_s:  # finished (not NaN)
            return job.request.output_tokens if job.error is None else 0
        for instance in [*self.decode, *(d.instance for d in self.draining)]:
            if instance.name == job.decode_instance and isinstance(instance, DecodeInstance):
                return instance.tokens_done(job, self.clock.now())
        return 0
