"""An emulated PD deployment: a local PD cluster, an optional remote PrfaaS cluster, the links
between them, a hybrid prefix cache pool per cluster and a router, all on one injected clock.

A request's path: look up both clusters' pools (the global KV cache manager's view: l_pd,
l_prfaas) -> route -> optionally fetch a longer prefix across clusters -> a cache-affine or
least-loaded prefill instance -> KV streamed to the local decode side while the prefill runs
(layer-wise pipelining; over RDMA inside the cluster, over the cross-DC link from PrfaaS), or sent
whole after the prefill and a save (store-and-forward, `handoff`), held in transfer-cache blocks until
it lands -> a FIFO wait for a decode slot -> (a restore) -> decode. Every submitted
request ends in exactly one record, completed or failed with a reason (also one `cancel`led on the way).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from harness.clock import Clock
from harness.deploy.cache_pool import HybridCachePool, Lookup
from harness.deploy.cancel import Cancellation
from harness.deploy.decode import DecodeInstance
from harness.deploy.decode_pool import DecodePool
from harness.deploy.handoff import Handoff
from harness.deploy.job import Job
from harness.deploy.link import Link
from harness.deploy.outage import OutageHandling
from harness.deploy.prefill import PrefillInstance
from harness.deploy.roles import Drain, RoleChanges
from harness.deploy.router.base import LOCAL, PRFAAS, RoutedRequest
from harness.deploy.transfers import KvTransfers
from harness.deploy.view import DeploymentView, LeastLoaded
from harness.workload.request import Request

_NO_CACHE = Lookup(0, 0, 0, 0, None)


class Deployment(KvTransfers, DecodePool, OutageHandling, RoleChanges, Cancellation):
    """The whole deployment. Its parts live in their own modules, mixed in here: KV transfers
    (transfers.py), the decode pool and landing buffer (decode_pool.py), PrfaaS outages (outage.py),
    role changes (roles.py) and cancelling a request (cancel.py); routing, the prefix-cache lookups and
    the records are here."""

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
        reverse_link: Link | None = None,
        rdma_link: Link | None = None,
        block_tokens: int = 512,
        cache_capacity_tokens: int | None = None,
        prefix_cache: bool = True,
        exact_state_match: bool = True,
        max_batch_tokens: int | None = None,
        decode_step_s: float | None = None,
        mode: str = "sim",
        handoff: Handoff | None = None,
    ) -> None:
        self.name = name
        self.handoff = handoff  # None: layer-wise, no save/restore costs, no hand-off columns (handoff.py)
        self.mode = mode
        self.clock = clock
        self.router = router
        self.profiles = {LOCAL: local_profile, PRFAAS: prfaas_profile}
        self.cross_link = cross_link
        self.reverse_link = reverse_link
        self.rdma_link = rdma_link
        self.block_tokens = block_tokens
        self.prefix_cache = prefix_cache
        self.max_batch_tokens = max_batch_tokens
        self.decode_step_s = decode_step_s
        self.pools = {
            cluster: HybridCachePool(block_tokens=block_tokens, kv_bytes_per_token=prof.kv_bytes_per_token,
                                     state_bytes=prof.state_bytes, capacity_tokens=cache_capacity_tokens,
                                     exact_state_match=exact_state_match)
            for cluster, prof in self.profiles.items() if prof is not None
        }
        self.least_loaded: dict[str, LeastLoaded] = {}  # filled once the instances exist
        self.prefill: dict[str, list[PrefillInstance]] = {
            LOCAL: [self._new_prefill(f"pdp{i}", LOCAL) for i in range(n_prefill)],
            PRFAAS: [self._new_prefill(f"prfaas{i}", PRFAAS) for i in range(n_prfaas)],
        }
        self.decode = [self._new_decode(f"pdd{i}") for i in range(n_decode)]
        self.least_loaded = {cluster: LeastLoaded(instances) for cluster, instances in self.prefill.items()}
        for cluster, instances in self.prefill.items():
            for instance in instances:
                instance.on_change = self.least_loaded[cluster].push
        self._instance_seq = max(n_prefill, n_decode)
        self.draining: list[Drain] = []
        self.roles_log: list[tuple[float, int, int]] = [(clock.now(), n_prefill, n_decode)]
        self.waiting: deque[Job] = deque()
        self.blocked: deque[Job] = deque()  # KV ready but the landing buffer (decode-side memory) is full
        self.landed_bytes = 0.0  # KV landed on the decode side, waiting for a slot
        self.in_flight: dict[int, Job] = {}
        self.records: list[dict] = []
        self.keep_records = True  # False: records go to on_record only (a long-running server's sink)
        self.evictions: list[tuple[float, int]] = []  # (time, blocks evicted), for the time series
        self.on_record: Callable[[dict], None] | None = None
        self.on_first_token: Callable[[Job], None] | None = None
        self.observers: list[Callable[[Job], None]] = []  # see every routed request (the rebalancer)
        self.rebalancer = None
        self.prfaas_reachable = True
        self.held: list[Job] = []  # waiting for the PrfaaS cluster to come back (no local prefill)
        self._saved_capacity: dict[str, float] = {}
        self._view = DeploymentView(self)  # lazy: every field is read from the live state, so one serves all

    def _new_prefill(self, name: str, cluster: str) -> PrefillInstance:
        handoff = self.handoff
        save_s = None if handoff is None else (lambda job: handoff.save_s(job.request.input_tokens))
        instance = PrefillInstance(name, self.clock, self.profiles[cluster], self._on_prefill_start,
                                   self._on_prefill_done, self.max_batch_tokens, save_s)
        if cluster in self.least_loaded:  # a role switch after construction
            instance.on_change = self.least_loaded[cluster].push
        return instance

    def _new_decode(self, name: str) -> DecodeInstance:
        return DecodeInstance(name, self.clock, self.profiles[LOCAL], self._on_first_token, self._on_decode_done,
                              self.decode_step_s)

    # -- arrival and routing ------------------------------------------------------------------
    def _lookup(self, cluster: str, request: Request) -> Lookup:
        pool = self.pools.get(cluster)
        if pool is None or not self.prefix_cache or not request.hash_ids:
            return _NO_CACHE
        return pool.lookup(request.hash_ids, request.input_tokens)

    def view(self) -> DeploymentView:
        return self._view

    def submit(self, request: Request) -> Job:
        job = Job(request)
        self.in_flight[request.request_id] = job
        self._route(job)
        return job

    def _route(self, job: Job) -> None:
        request = job.request
        local = prfaas = _NO_CACHE  # _lookup of each cluster, inlined
        if self.prefix_cache and request.hash_ids:
            pools = self.pools
            pool = pools.get(LOCAL)
            if pool is not None:
                local = pool.lookup(request.hash_ids, request.input_tokens)
            pool = pools.get(PRFAAS)
            if pool is not None:
                prfaas = pool.lookup(request.hash_ids, request.input_tokens)
        route = self.router.route(RoutedRequest(request.input_tokens, local.usable_tokens, prfaas.usable_tokens),
                                  self._view)
        cluster = route.cluster
        if cluster == PRFAAS and not self.prfaas_reachable:
            self.held.append(job)  # nowhere else to prefill it: retry when PrfaaS is back
            return
        instances = self.prefill[cluster]
        if not instances:
            self._fail(job, f"router chose {cluster!r}, which has no prefill instances")
            return
        for decode in self.decode:
            if decode.fits_ever(job):
                break
        else:
            self._fail(job, "KV of input+output exceeds every decode instance's memory")
            return
        look = local if cluster == LOCAL else prfaas
        job.route = cluster
        job.cached_tokens = look.usable_tokens
        job.cache_hit_tokens = look.hit_tokens
        job.cached_local_tokens = local.usable_tokens
        if look.pending_owner is None:  # _choose_instance's answer when no instance computes the prefix
            least = self.least_loaded[cluster].least_loaded()
            assert least is not None  # the cluster has prefill instances (checked above)
            instance = least
        else:
            instance = self._choose_instance(cluster, look, request.input_tokens)
            if instance.name != look.pending_owner:
                job.cached_tokens = look.ready_tokens  # elsewhere only the computed part of the prefix helps
        for observe in self.observers:
            observe(job)
        if look is not _NO_CACHE:
            pool = self.pools[cluster]
            pool.record(look, request.input_tokens)
            evicted = pool.insert(request.hash_ids, request.input_tokens, instance.name, look.hit_blocks)
            if evicted:
                self._note_evictions(evicted)
        source = route.fetch_prefix_from
        if source is not None and (local if source == LOCAL else prfaas).ready_tokens > look.usable_tokens:
            self._fetch_then_prefill(job, source, (local if source == LOCAL else prfaas).ready_tokens, instance)
        else:
            instance.submit(job)

    def _choose_instance(self, cluster: str, look: Lookup, input_tokens: int = 0) -> PrefillInstance:
        """Earliest finish: the instance computing the matched prefix (it skips the pending part too)
        unless the least-loaded one, skipping only the computed part, would finish sooner."""
        least = self.least_loaded[cluster].least_loaded()
        assert least is not None  # _route checked that the cluster has prefill instances
        if look.pending_owner is not None:
            for instance in self.prefill[cluster]:
                if instance.name == look.pending_owner:
                    if instance is least:
                        return instance
                    profile, total = self.profiles[cluster], input_tokens
                    owner_done = instance.backlog_s() + profile.prefill_s(max(total - look.usable_tokens, 0),
                                                                          look.usable_tokens)
                    other_done = least.backlog_s() + profile.prefill_s(max(total - look.ready_tokens, 0),
                                                                       look.ready_tokens)
                    return instance if owner_done <= other_done else least
        return least

    def _note_evictions(self, n: int) -> None:
        if n:
            self.evictions.append((self.clock.now(), n))

    # -- records ------------------------------------------------------------------------------
    def _finish(self, job: Job) -> None:
        self.in_flight.pop(job.request.request_id, None)
        record = job.record(self.name, self.mode, self.handoff is not None)
        if self.keep_records:
            self.records.append(record)
        if self.on_record is not None:
            self.on_record(record)

    def _fail(self, job: Job, reason: str) -> None:
        job.error = reason
        self._finish(job)

    def close(self, reason: str = "run ended before the request completed", interrupted: bool = False) -> None:
        """Record every request still in flight as failed (nothing sent goes unrecorded); `interrupted`:
        the run was stopped, so they are cut off, not failed (their rows say `interrupted`)."""
        now = self.clock.now()
        for job in list(self.in_flight.values()):
            job.interrupted = interrupted
            if interrupted:  # cut off now (a run that ended by itself records no end: its files as before)
                job.ended_s = now
            self._fail(job, reason)
