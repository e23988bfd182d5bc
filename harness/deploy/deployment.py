"""An emulated PD deployment: a local PD cluster, an optional remote PrfaaS cluster, the links
between them and a router, all on one injected clock.

A request's path: route (local or PrfaaS) -> least-loaded prefill instance of that cluster ->
KV streamed to the local decode side while the prefill runs (layer-wise pipelining; over RDMA
inside the cluster, over the cross-DC link from PrfaaS) -> when both the prefill and the
transfer are done, a FIFO wait for a decode slot -> decode. Every submitted request ends in
exactly one record, completed or failed with a reason.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from harness.clock import Clock
from harness.deploy.decode import DecodeInstance
from harness.deploy.job import Job
from harness.deploy.link import Link
from harness.deploy.prefill import PrefillInstance
from harness.deploy.router.base import LOCAL, PRFAAS, ClusterView, RoutedRequest
from harness.workload.prefix import PrefixCache
from harness.workload.request import Request


class Deployment:
    def __init__(
        self,
        *,
        name: str,
        clock: Clock,
        router,
        local_profile,
        n_prefill: int,
        n_decode: int,
        prfaas_profile=None,
        n_prfaas: int = 0,
        cross_link: Link | None = None,
        rdma_link: Link | None = None,
        block_tokens: int = 512,
        cache_capacity_blocks: int | None = None,
        prefix_cache: bool = True,
        max_batch_tokens: int | None = None,
        decode_step_s: float | None = None,
        mode: str = "sim",
    ) -> None:
        self.name = name
        self.mode = mode
        self.clock = clock
        self.router = router
        self.local_profile = local_profile
        self.prfaas_profile = prfaas_profile
        self.cross_link = cross_link
        self.rdma_link = rdma_link
        self.block_tokens = block_tokens
        self.prefix_cache = prefix_cache
        self.caches = {LOCAL: PrefixCache(cache_capacity_blocks), PRFAAS: PrefixCache(cache_capacity_blocks)}
        self.prefill = {
            LOCAL: [
                PrefillInstance(f"pdp{i}", clock, local_profile, self._on_prefill_start, self._on_prefill_done,
                                max_batch_tokens)
                for i in range(n_prefill)
            ],
            PRFAAS: [
                PrefillInstance(f"prfaas{i}", clock, prfaas_profile, self._on_prefill_start, self._on_prefill_done,
                                max_batch_tokens)
                for i in range(n_prfaas)
            ],
        }
        self.decode = [
            DecodeInstance(f"pdd{i}", clock, local_profile, self._on_first_token, self._on_decode_done, decode_step_s)
            for i in range(n_decode)
        ]
        self.waiting: deque[Job] = deque()
        self.in_flight: dict[int, Job] = {}
        self.records: list[dict] = []
        self.on_record: Callable[[dict], None] | None = None
        self.on_first_token: Callable[[Job], None] | None = None

    # -- arrival and routing ------------------------------------------------------------------
    def _cached_tokens(self, cluster: str, request: Request) -> int:
        if not self.prefix_cache or not request.hash_ids:
            return 0
        hit = self.caches[cluster].match(request.hash_ids) * self.block_tokens
        # At least one token is always computed: the prefill produces the first output token.
        return max(0, min(hit, request.input_tokens - 1))

    def view(self) -> ClusterView:
        link = self.cross_link
        capacity = link.capacity_gbps if link is not None else 0.0
        rate = link.rate_gbps if link is not None else 0.0
        return ClusterView(
            has_prfaas=bool(self.prefill[PRFAAS]),
            has_local_prefill=bool(self.prefill[LOCAL]),
            egress_utilisation=rate / capacity if capacity > 0 else 1.0,
            link_capacity_gbps=capacity,
            prfaas_backlog_s=min((p.backlog_s() for p in self.prefill[PRFAAS]), default=float("inf")),
            local_backlog_s=min((p.backlog_s() for p in self.prefill[LOCAL]), default=float("inf")),
        )

    def submit(self, request: Request) -> Job:
        job = Job(request)
        self.in_flight[request.request_id] = job
        cached_local = self._cached_tokens(LOCAL, request)
        cached_prfaas = self._cached_tokens(PRFAAS, request)
        routed = RoutedRequest(request.input_tokens, cached_local, cached_prfaas)
        cluster = self.router.route(routed, self.view())
        instances = self.prefill[cluster]
        if not instances:
            self._fail(job, f"router chose {cluster!r}, which has no prefill instances")
            return job
        if not any(d.fits_ever(job) for d in self.decode):
            self._fail(job, "KV of input+output exceeds every decode instance's memory")
            return job
        job.route = cluster
        job.cached_tokens = cached_local if cluster == LOCAL else cached_prfaas
        job.extra["cached_local"] = cached_local
        min(instances, key=PrefillInstance.backlog_s).submit(job)
        return job

    # -- prefill and KV transfer --------------------------------------------------------------
    def _kv_to_send(self, job: Job, profile) -> float:
        """KV the decode side lacks: everything past the local cluster's cached prefix, plus state."""
        request = job.request
        full = float(profile.kv_bytes(request.input_tokens))
        cached_local = job.extra["cached_local"]
        if cached_local <= 0:
            return full
        return full - float(profile.kv_bytes(cached_local)) + float(profile.kv_bytes(0))

    def _on_prefill_start(self, job: Job, duration_s: float) -> None:
        profile = self.prfaas_profile if job.route == PRFAAS else self.local_profile
        link = self.cross_link if job.route == PRFAAS else self.rdma_link
        job.kv_bytes = self._kv_to_send(job, profile)
        if link is None:
            return
        job.transfer_pending = True
        link.transfer(job.kv_bytes, lambda: self._on_transfer_done(job), produce_s=duration_s)

    def _on_prefill_done(self, job: Job) -> None:
        job.prefill_pending = False
        if self.prefix_cache and job.request.hash_ids:
            self.caches[job.route].insert(job.request.hash_ids)
        if not job.transfer_pending:
            self._kv_ready(job)

    def _on_transfer_done(self, job: Job) -> None:
        job.transfer_pending = False
        job.kv_done_s = self.clock.now()
        if not job.prefill_pending:
            self._kv_ready(job)

    # -- decode -------------------------------------------------------------------------------
    def _kv_ready(self, job: Job) -> None:
        job.kv_ready_s = self.clock.now()
        self.waiting.append(job)
        self._dispatch()

    def _dispatch(self) -> None:
        while self.waiting:
            job = self.waiting[0]
            candidates = [d for d in self.decode if d.can_admit(job)]
            if not candidates:
                return
            self.waiting.popleft()
            min(candidates, key=lambda d: d.reserved).admit(job)

    def _on_first_token(self, job: Job) -> None:
        if self.on_first_token is not None:
            self.on_first_token(job)

    def _on_decode_done(self, job: Job) -> None:
        self._finish(job)
        self._dispatch()

    def tokens_done(self, job: Job) -> int:
        """Output tokens produced so far (for streaming in live mode)."""
        if job.finish_s == job.finish_s:  # finished (not NaN)
            return job.request.output_tokens if job.error is None else 0
        for instance in self.decode:
            if instance.name == job.decode_instance:
                return instance.tokens_done(job, self.clock.now())
        return 0

    # -- records ------------------------------------------------------------------------------
    def _finish(self, job: Job) -> None:
        self.in_flight.pop(job.request.request_id, None)
        record = job.record(self.name, self.mode)
        self.records.append(record)
        if self.on_record is not None:
            self.on_record(record)

    def _fail(self, job: Job, reason: str) -> None:
        job.error = reason
        self._finish(job)

    def close(self, reason: str = "run ended before the request completed") -> None:
        """Record every request still in flight as failed (nothing sent goes unrecorded)."""
        for job in list(self.in_flight.values()):
            self._fail(job, reason)
