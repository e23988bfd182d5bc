"""Cancelling a request: it leaves the deployment wherever it is and frees what it held.

A real engine aborts a request whose client disconnected (vLLM, SGLang, llama.cpp's server): it leaves
the waiting queue, its prefill or decode stops and its KV blocks are freed. `cancel` does that here:

- held for a PrfaaS outage, or waiting for a prefill instance: it leaves the list or queue (the
  instance's load, which least-loaded routing reads, drops with it);
- fetching a prefix, or streaming its KV to the decode side: its link flows are cancelled (the link's
  other flows share the bandwidth from now) and its transfer-cache bytes released;
- prefilling: the instance stops it now and starts its next request (in a batched pass the others go
  on and the pass ends sooner: `PrefillInstance.abort`; their KV streams, produced as the pass goes,
  are re-timed to that end: `Link.reproduce`);
- its KV held on its prefill instance because the landing buffer was full, or landed and waiting for a
  decode slot: it leaves the line, the instance's hold or the landed bytes are released;
- decoding: its slot and KV memory are free at once, and the batch steps without it from the end of
  the step in flight (`DecodeInstance.remove`).

Then the waiting lines move (a slot or landing space may have freed) and the request ends in its one
record, failed with the given reason, stamped up to the cancellation (a prefill it was in ends then;
`finish_s` stays empty: it did not finish; `ended_s` says when it left, where the time series end the
slot or queue place it held). The attempt is marked `abandoned`, the flag a PrfaaS
outage's superseded attempt carries, so no callback already scheduled for it acts on it.

One rule for the prefix cache, in every deployment (PD and PrfaaS-PD here, aggregated in
`AggregatedDeployment.cancel`): a cancelled request leaves the prefix blocks it entered in the cache
pool (at routing in PD, at admission to a slot in an aggregated engine) marked computed, as a finished
prefill would, whether it was cancelled before, during or after its prefill. The pool does not know
which request entered a block, and requests routed behind it to the same instance were charged for
that prefix as cached; an engine keeps the part of an aborted prompt it computed (llama-server's slot
holds it), and the rest is counted as if computed: the cache is optimistic by that prompt. A request
cancelled before it entered anything (queued in an aggregated engine) marks nothing.

Sim runs never cancel: nothing here runs in them. Mixed into `Deployment`, whose state it reads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.deploy.decode import DecodeInstance
from harness.deploy.prefill import PrefillInstance
from harness.deploy.state import DeploymentState

if TYPE_CHECKING:
    from harness.deploy.job import Job

CANCELLED = "cancelled"


class Cancellation(DeploymentState):
    def cancel(self, job: Job, reason: str = CANCELLED) -> bool:
        """End a request now, wherever it is, with `reason` as its error; False if it had ended.

        `job` is what `submit` returned; after a PrfaaS outage the request may be on a later attempt,
        which is the one cancelled."""
        current = self.in_flight.get(job.request.request_id)
        if current is None or current.request is not job.request:
            return False
        job = current
        now = self.clock.now()
        job.abandoned = True  # callbacks already scheduled for it (a fetch or KV landing) do nothing
        if job in self.held:
            self.held.remove(job)
        else:
            self._cancel_flows(job)
            self._leave_prefill(job, now)
            self._leave_decode(job)
        job.ended_s = now
        self._fail(job, reason)
        if self.draining:
            self._check_draining()
        self._dispatch()
        return True

    def _cancel_flows(self, job: Job) -> None:
        for link in (self.cross_link, self.reverse_link, self.rdma_link):
            if link is not None:
                for flow in job.flows:
                    link.cancel(flow)
        job.flows.clear()
        if job.transfer_pending:
            job.transfer_pending = False
            pool = self.pools.get(job.route)
            if pool is not None:
                pool.release_transfer(job.kv_bytes)

    def _leave_prefill(self, job: Job, now: float) -> None:
        if not job.prefill_pending:
            return
        job.prefill_pending = False
        name = job.prefill_instance  # empty while it fetches a prefix (not on an instance yet)
        for instance in self._all_prefill() if name else ():
            if instance.name == name:
                if not instance.withdraw(job) and instance.abort(job):
                    job.prefill_end_s = now  # it occupied the instance until now
                    self._retime_kv(instance)
                break
        request = job.request
        pool = self.pools.get(job.route)
        if pool is not None and self.prefix_cache and request.hash_ids:
            pool.mark_ready(request.hash_ids, request.input_tokens)  # see the module's note

    def _retime_kv(self, instance: PrefillInstance) -> None:
        """The pass of the requests left on `instance` ends sooner (`abort`): their KV, streamed out as
        it is computed, is produced by then, so their transfers finish sooner too."""
        end = instance.pass_end_s
        for other in instance.running:
            for flow in other.flows:
                flow._link.reproduce(flow, end)

    def _all_prefill(self) -> list[PrefillInstance]:
        instances = [i for cluster in self.prefill.values() for i in cluster]
        instances += [d.instance for d in self.draining if isinstance(d.instance, PrefillInstance)]
        return instances

    def _leave_decode(self, job: Job) -> None:
        if job in self.blocked:  # its KV held on its prefill instance: the instance may start again
            self.blocked.remove(job)
            self._prefill_of(job, hold=False)
            return
        if job in self.waiting:  # landed, waiting for a slot: its landed bytes are free
            self.waiting.remove(job)
            need = job.decode_kv_bytes
            if self.decode and need is None:
                need = self.decode[0].kv_need(job)
            landed = self.landed_bytes - (need or 0.0)
            self.landed_bytes = landed if landed > 0.0 else 0.0
            return
        if job.decode_instance:
            instances = [*self.decode, *(d.instance for d in self.draining)]
            for instance in instances:
                if isinstance(instance, DecodeInstance) and instance.remove(job):
                    return
