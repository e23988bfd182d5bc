"""An emulated PD deployment: a local PD cluster, an optional remote PrfaaS cluster, the links
between them, a hybrid prefix cache pool per cluster and a router, all on one injected clock.

A request's path: look up both clusters' pools (the global KV cache manager's view: l_pd,
l_prfaas) -> route -> optionally fetch a longer prefix across clusters -> a cache-affine or
least-loaded prefill instance -> KV streamed to the local decode side while the prefill runs
(layer-wise pipelining; over RDMA inside the cluster, over the cross-DC link from PrfaaS), held in
transfer-cache blocks until it lands -> a FIFO wait for a decode slot -> decode. Every submitted
request ends in exactly one record, completed or failed with a reason.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from harness.clock import Clock
from harness.deploy.cache_pool import HybridCachePool, Lookup
from harness.deploy.decode import DecodeInstance
from harness.deploy.job import Job
from harness.deploy.link import Link
from harness.deploy.prefill import PrefillInstance
from harness.deploy.router.base import LOCAL, PRFAAS, RoutedRequest
from harness.workload.request import Request

_NO_CACHE = Lookup(0, 0, 0, 0, None)


def _reserved(instance: DecodeInstance) -> int:
    return instance.reserved


class _LeastLoaded:
    """The prefill instances of one cluster, ordered by when each will be free (lazy heap).

    `least_loaded` picks by `backlog_s()`, which is `free_at - now`, so the earliest `free_at` wins;
    an instance re-enters the heap each time its free_at moves, and stale entries are dropped when
    they surface. O(log n) per request instead of a scan: deployments of 10,000 GPUs stay fast.
    """

    def __init__(self, instances: list[PrefillInstance]) -> None:
        self.instances = instances
        self._heap: list[tuple[float, int, int, PrefillInstance]] = []
        self._seq = itertools.count()
        for instance in instances:
            self.push(instance)

    def push(self, instance: PrefillInstance) -> None:
        heapq.heappush(self._heap, (instance.free_at, next(self._seq), instance.version, instance))
        if len(self._heap) > 8 * len(self.instances) + 64:
            self._heap = [(i.free_at, next(self._seq), i.version, i) for i in self.instances]
            heapq.heapify(self._heap)

    def least_loaded(self) -> PrefillInstance | None:
        heap, active = self._heap, self.instances
        while heap:
            _, _, version, instance = heap[0]
            if version == instance.version and instance in active:
                return instance
            heapq.heappop(heap)
        for instance in active:  # everything was stale (instances added since): rebuild
            self.push(instance)
        return heap[0][3] if heap else None


class _View:
    """A `ClusterView` of a running deployment, each field computed only if the router reads it
    (the link backlog walks every flow in flight)."""

    __slots__ = ("_d",)

    def __init__(self, deployment: Deployment) -> None:
        self._d = deployment

    @property
    def has_prfaas(self) -> bool:
        return bool(self._d.prefill[PRFAAS]) and self._d.prfaas_reachable

    @property
    def has_local_prefill(self) -> bool:
        return bool(self._d.prefill[LOCAL])

    @property
    def link_capacity_gbps(self) -> float:
        link = self._d.cross_link
        return link.capacity_gbps if link is not None else 0.0

    @property
    def egress_utilisation(self) -> float:
        link = self._d.cross_link
        capacity = self.link_capacity_gbps
        return link.rate_gbps / capacity if link is not None and capacity > 0 else 1.0

    @property
    def link_backlog_s(self) -> float:
        link = self._d.cross_link
        return link.backlog_s() if link is not None else 0.0

    @property
    def now_s(self) -> float:
        return self._d.clock.now()

    def _backlog(self, cluster: str) -> float:
        instance = self._d.least_loaded[cluster].least_loaded()
        return instance.backlog_s() if instance is not None else float("inf")

    @property
    def prfaas_backlog_s(self) -> float:
        return self._backlog(PRFAAS)

    @property
    def local_backlog_s(self) -> float:
        return self._backlog(LOCAL)


@dataclass
class _Drain:
    """An instance changing role: it takes no new work, finishes what it holds, then switches."""

    instance: PrefillInstance | DecodeInstance
    new_role: str  # "prefill" | "decode"
    delay_s: float
    switching: bool = False

    @property
    def idle(self) -> bool:
        inst = self.instance
        if isinstance(inst, PrefillInstance):
            return not inst.running and not inst.queue
        return inst.reserved == 0


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
        reverse_link: Link | None = None,
        rdma_link: Link | None = None,
        block_tokens: int = 512,
        cache_capacity_tokens: int | None = None,
        prefix_cache: bool = True,
        exact_state_match: bool = True,
        max_batch_tokens: int | None = None,
        decode_step_s: float | None = None,
        mode: str = "sim",
    ) -> None:
        self.name = name
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
        self.prefill: dict[str, list[PrefillInstance]] = {
            LOCAL: [self._new_prefill(f"pdp{i}", LOCAL) for i in range(n_prefill)],
            PRFAAS: [self._new_prefill(f"prfaas{i}", PRFAAS) for i in range(n_prfaas)],
        }
        self.decode = [self._new_decode(f"pdd{i}") for i in range(n_decode)]
        self.least_loaded = {cluster: _LeastLoaded(instances) for cluster, instances in self.prefill.items()}
        for cluster, instances in self.prefill.items():
            for instance in instances:
                instance.on_change = self.least_loaded[cluster].push
        self._instance_seq = max(n_prefill, n_decode)
        self.draining: list[_Drain] = []
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

    def _new_prefill(self, name: str, cluster: str) -> PrefillInstance:
        instance = PrefillInstance(name, self.clock, self.profiles[cluster], self._on_prefill_start,
                                   self._on_prefill_done, self.max_batch_tokens)
        if hasattr(self, "least_loaded"):  # a role switch after construction
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

    def view(self) -> _View:
        return _View(self)

    def submit(self, request: Request) -> Job:
        job = Job(request)
        self.in_flight[request.request_id] = job
        self._route(job)
        return job

    def _route(self, job: Job) -> None:
        request = job.request
        looks = {LOCAL: self._lookup(LOCAL, request), PRFAAS: self._lookup(PRFAAS, request)}
        routed = RoutedRequest(request.input_tokens, looks[LOCAL].usable_tokens, looks[PRFAAS].usable_tokens)
        route = self.router.route(routed, self.view())
        cluster = route.cluster
        if cluster == PRFAAS and not self.prfaas_reachable:
            self.held.append(job)  # nowhere else to prefill it: retry when PrfaaS is back
            return
        instances = self.prefill[cluster]
        if not instances:
            self._fail(job, f"router chose {cluster!r}, which has no prefill instances")
            return
        if not any(d.fits_ever(job) for d in self.decode):
            self._fail(job, "KV of input+output exceeds every decode instance's memory")
            return
        look = looks[cluster]
        job.route = cluster
        job.cached_tokens = look.usable_tokens
        job.cache_hit_tokens = look.hit_tokens
        job.cached_local_tokens = looks[LOCAL].usable_tokens
        instance = self._choose_instance(cluster, look, request.input_tokens)
        if look.pending_owner is not None and instance.name != look.pending_owner:
            job.cached_tokens = look.ready_tokens  # elsewhere only the computed part of the prefix helps
        for observe in self.observers:
            observe(job)
        if look is not _NO_CACHE:
            pool = self.pools[cluster]
            pool.record(look, request.input_tokens)
            self._note_evictions(pool.insert(request.hash_ids, request.input_tokens, instance.name))
        source = route.fetch_prefix_from
        if source is not None and looks[source].ready_tokens > look.usable_tokens:
            self._fetch_then_prefill(job, source, looks[source].ready_tokens, instance)
        else:
            instance.submit(job)

    def _choose_instance(self, cluster: str, look: Lookup, input_tokens: int = 0) -> PrefillInstance:
        """Earliest finish: the instance computing the matched prefix (it skips the pending part too)
        unless the least-loaded one, skipping only the computed part, would finish sooner."""
        least = self.least_loaded[cluster].least_loaded()
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

    def _note_evictions(self, n: int) -> None:
        if n:
            self.evictions.append((self.clock.now(), n))

    # -- prefill and KV transfer --------------------------------------------------------------
    def _kv_to_send(self, job: Job, profile) -> float:
        """KV the decode side lacks: everything past the local cluster's cached prefix, plus state."""
        full = float(profile.kv_bytes(job.request.input_tokens))
        cached_local = job.cached_local_tokens
        if cached_local <= 0:
            return full
        return full - float(profile.kv_bytes(cached_local)) + float(profile.kv_bytes(0))

    def _on_prefill_start(self, job: Job, duration_s: float) -> None:
        profile = self.profiles[job.route]
        link = self.cross_link if job.route == PRFAAS else self.rdma_link
        job.kv_bytes = self._kv_to_send(job, profile)
        if link is None:
            return
        job.transfer_pending = True
        pool = self.pools.get(job.route)
        if pool is not None:
            self._note_evictions(pool.reserve_transfer(job.kv_bytes))
        job.flows.append(link.transfer(job.kv_bytes, lambda: self._on_transfer_done(job), produce_s=duration_s))

    def _on_prefill_done(self, job: Job) -> None:
        job.prefill_pending = False
        pool = self.pools.get(job.route)
        if pool is not None and self.prefix_cache and job.request.hash_ids:
            pool.mark_ready(job.request.hash_ids, job.request.input_tokens)  # computed, even if abandoned
        if job.abandoned:
            self._check_draining()
            return
        if not job.transfer_pending:
            self._kv_ready(job)
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

    # -- decode -------------------------------------------------------------------------------
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
        if not self.decode or any(d.kv_capacity_bytes is None for d in self.decode):
            return True
        free = sum(d.kv_capacity_bytes - d.kv_bytes_used for d in self.decode)
        return self.landed_bytes + self.decode[0].kv_need(job) <= free

    def _land(self, job: Job) -> None:
        self.landed_bytes += self.decode[0].kv_need(job) if self.decode else 0.0
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
        while self.waiting and self.decode:
            job = self.waiting[0]
            best = min(self.decode, key=_reserved)
            if not best.can_admit(job):  # the emptiest is full or short of KV memory: look further
                candidates = [d for d in self.decode if d.can_admit(job)]
                if not candidates:
                    return
                best = min(candidates, key=_reserved)
            self.waiting.popleft()
            self.landed_bytes = max(0.0, self.landed_bytes - best.kv_need(job))
            best.admit(job)

    def _on_first_token(self, job: Job) -> None:
        if self.on_first_token is not None:
            self.on_first_token(job)

    def _on_decode_done(self, job: Job) -> None:
        self._finish(job)
        self._check_draining()
        self._dispatch()

    def tokens_done(self, job: Job) -> int:
        """Output tokens produced so far (for streaming in live mode)."""
        if job.finish_s == job.finish_s:  # finished (not NaN)
            return job.request.output_tokens if job.error is None else 0
        for instance in [*self.decode, *(d.instance for d in self.draining)]:
            if instance.name == job.decode_instance and isinstance(instance, DecodeInstance):
                return instance.tokens_done(job, self.clock.now())
        return 0

    # -- faults -------------------------------------------------------------------------------
    def set_prfaas_reachable(self, reachable: bool) -> None:
        """A PrfaaS outage: the cross-DC path goes down; work stuck behind it is re-prefilled locally.

        The remote cluster keeps computing what it had (its cache fills), but nothing it makes can
        reach the decode side, so every request routed there whose KV has not landed starts over in
        the local PD cluster (or waits, when there is no local prefill, as in naive heterogeneous).
        When it comes back, held requests are routed again.
        """
        if reachable == self.prfaas_reachable:
            return
        self.prfaas_reachable = reachable
        links = {"cross": self.cross_link, "reverse": self.reverse_link}
        for key, link in links.items():
            if link is None:
                continue
            if not reachable:
                self._saved_capacity[key] = link.capacity_gbps
                link.set_capacity(0.0)
            else:
                link.set_capacity(self._saved_capacity.pop(key, link.capacity_gbps))
        if not reachable:
            for job in list(self.in_flight.values()):
                stuck = job.route == PRFAAS and job.kv_ready_s != job.kv_ready_s  # KV not landed (NaN)
                fetching = bool(job.flows) and job.prefill_pending and job.prefill_start_s != job.prefill_start_s
                if stuck or fetching:
                    self._restart(job)
        else:
            held, self.held = self.held, []
            for job in held:
                self._route(job)
        if self.rebalancer is not None:
            self.rebalancer.nudge()

    def _restart(self, job: Job) -> None:
        """Abandon a request's current attempt and route it again (the router now sees no PrfaaS)."""
        job.abandoned = True
        for link in (self.cross_link, self.reverse_link, self.rdma_link):
            if link is not None:
                for flow in job.flows:
                    link.cancel(flow)
        for instance in self.prefill[PRFAAS] + self.prefill[LOCAL]:
            instance.withdraw(job)
        pool = self.pools.get(job.route)
        if pool is not None and job.transfer_pending:
            pool.release_transfer(job.kv_bytes)
        retry = Job(job.request, attempt=job.attempt + 1)
        self.in_flight[job.request.request_id] = retry
        self._route(retry)

    # -- role changes (the long-term rebalancer) ----------------------------------------------
    def convert(self, n_prefill: int, n_decode: int, switch_delay_s: float) -> None:
        """Move local instances between prefill and decode: drain, wait `switch_delay_s`, switch."""
        to_decode = len(self.prefill[LOCAL]) - n_prefill
        to_prefill = len(self.decode) - n_decode
        for _ in range(max(0, to_decode)):
            instance = self.least_loaded[LOCAL].least_loaded()
            self.prefill[LOCAL].remove(instance)
            self._start_drain(instance, "decode", switch_delay_s)
        for _ in range(max(0, to_prefill)):
            instance = min(self.decode, key=lambda d: d.reserved)
            self.decode.remove(instance)
            self._start_drain(instance, "prefill", switch_delay_s)
        self._log_roles()
        self._check_draining()

    def _start_drain(self, instance, new_role: str, delay_s: float) -> None:
        self.draining.append(_Drain(instance, new_role, delay_s))

    def _check_draining(self) -> None:
        for drain in self.draining:
            if drain.switching or not drain.idle:
                continue
            drain.switching = True
            self.clock.call_at(self.clock.now() + drain.delay_s, lambda d=drain: self._switch(d))

    def _switch(self, drain: _Drain) -> None:
        self.draining.remove(drain)
        self._instance_seq += 1
        if drain.new_role == "decode":
            self.decode.append(self._new_decode(f"pdd{self._instance_seq}"))
            self._dispatch()
        else:
            self.prefill[LOCAL].append(self._new_prefill(f"pdp{self._instance_seq}", LOCAL))
        self._log_roles()

    def _log_roles(self) -> None:
        self.roles_log.append((self.clock.now(), len(self.prefill[LOCAL]), len(self.decode)))

    # -- records ------------------------------------------------------------------------------
    def _finish(self, job: Job) -> None:
        self.in_flight.pop(job.request.request_id, None)
        record = job.record(self.name, self.mode)
        if self.keep_records:
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
