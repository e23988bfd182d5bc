"""KV transfer management of a deployment: the KV each request ships and when.

A prefill's KV streams to the decode side while it is computed (layer-wise pipelining), or, with a
store-and-forward hand-off (harness/deploy/handoff.py), is sent whole once the prefill and its save have
ended: over RDMA inside the local cluster, over the cross-DC link from PrfaaS, held in transfer-cache
blocks until it lands. A request may first fetch a longer cached prefix from the other cluster (cross-cluster cache
transfer). Mixed into `Deployment` (harness/deploy/deployment.py), whose state it reads.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from harness.deploy.router.base import PRFAAS
from harness.deploy.state import DeploymentState

if TYPE_CHECKING:
    from harness.deploy.job import Job
    from harness.deploy.prefill import PrefillInstance


class KvTransfers(DeploymentState):
    def _fetch_then_prefill(self, job: Job, source: str, tokens: int, instance: PrefillInstance) -> None:
        """Cross-cluster cache transfer: move the longer prefix (KV + state) to the computing cluster."""
        profile = self.profiles[source]
        nbytes = float(profile.kv_bytes(tokens)) - float(profile.kv_bytes(job.cached_tokens)) + (
            float(profile.kv_bytes(0)) if job.cached_tokens > 0 else 0.0)
        link = self.cross_link if source == PRFAAS else self.reverse_link
        if link is None:
            instance.submit(job)
            return
        job.fetched_tokens = tokens - job.cached_tokens
        job.fetch_bytes = nbytes

        def landed() -> None:
            if job.abandoned:
                return
            job.flows.clear()
            job.cached_tokens = tokens
            instance.submit(job)

        job.flows.append(link.transfer(nbytes, landed))

    def _kv_to_send(self, job: Job, profile) -> float:
        """KV the decode side lacks: everything past the local cluster's cached prefix, plus state."""
        full = float(profile.kv_bytes(job.request.input_tokens))
        cached_local = job.cached_local_tokens
        if cached_local <= 0:
            return full
        return full - float(profile.kv_bytes(cached_local)) + float(profile.kv_bytes(0))

    def _on_prefill_start(self, job: Job, duration_s: float) -> None:
        route = job.route
        link = self.cross_link if route == PRFAAS else self.rdma_link
        profile = self.profiles[route]
        cached_local = job.cached_local_tokens  # _kv_to_send, written out
        full = float(profile.kv_bytes(job.request.input_tokens))
        job.kv_bytes = kv_bytes = full if cached_local <= 0 else (
            full - float(profile.kv_bytes(cached_local)) + float(profile.kv_bytes(0)))
        handoff = self.handoff
        if handoff is not None:  # the bytes on the link beyond the KV (a saved file's header and bookkeeping)
            job.kv_bytes = kv_bytes = kv_bytes + handoff.extra_bytes(job.request.input_tokens - max(cached_local, 0))
        if link is None:
            return
        job.transfer_pending = True
        pool = self.pools.get(route)
        if pool is not None:
            evicted = pool.reserve_transfer(kv_bytes)
            if evicted:
                self._note_evictions(evicted)
        if handoff is not None and handoff.store_and_forward:
            return  # sent when the prefill and the save end (_on_prefill_done)
        job.kv_sent_s = self.clock.now()
        job.flows.append(link.transfer(kv_bytes, partial(self._on_transfer_done, job), produce_s=duration_s))

    def _on_prefill_done(self, job: Job) -> None:
        job.prefill_pending = False
        pool = self.pools.get(job.route)
        request = job.request
        if pool is not None and self.prefix_cache and request.hash_ids:
            pool.mark_ready(request.hash_ids, request.input_tokens)  # computed, even if abandoned
        if job.abandoned:
            self._check_draining()
            return
        if not job.transfer_pending:
            self._kv_ready(job)
        elif not job.flows:  # store-and-forward: the saved KV leaves now, whole
            link = self.cross_link if job.route == PRFAAS else self.rdma_link
            assert link is not None  # transfer_pending is set only where there is a link
            job.kv_sent_s = self.clock.now()
            job.flows.append(link.transfer(job.kv_bytes, partial(self._on_transfer_done, job)))
        if self.draining:
            self._check_draining()

    def _on_transfer_done(self, job: Job) -> None:
        if job.abandoned:
            return
        job.flows.clear()
        job.transfer_pending = False
        job.kv_done_s = self.clock.now()
        pool = self.pools.get(job.route)
        if pool is not None:
            pool.release_transfer(job.kv_bytes)
        if not job.prefill_pending:
            self._kv_ready(job)
