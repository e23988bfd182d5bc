"""An aggregated deployment: engine instances that each prefill and decode on the same slots.

Not PD-disaggregated: a request stays on one instance from its first prompt token to its last
output token (see `aggregated_instance` for the step model). This is what a single-node engine
such as llama.cpp's `llama-server` does, so the emulator can predict one, and users can set
aggregated serving beside PD and PrfaaS-PD on the same workload.

Each instance keeps its own prefix cache (block-level on the prompt's `hash_ids`, LRU, as the
cluster pools of the PD deployments); an arriving request goes to the instance holding the longest
cached prefix of it, ties to the least loaded. The prefix is looked up when the request is
admitted to a slot (as the engine does), so a request queued behind the one computing its prefix
finds it once it is shareable.

Config (conf/deployment/aggregated.yaml): `name`, `hardware` (its `name` selects
`model.profiles.<name>`), `gpus_per_instance`, `instances`, `slots` (the engine's parallel
sequences, -np), `chunk_tokens` (prompt + decode tokens per engine step, the engine's n_batch;
null: whole prompts in one step), `prefix_shared_after` (when a prompt's KV becomes a prefix other
requests can reuse: `prefill`, as soon as it is computed, which is what llama-server showed (a
request reused a prefix whose owners were all still decoding); or `finish`, when its request ends),
`prefix_attention` (share of the cost model's attention-over-a-cached-prefix term that extending a
cached prefix costs, in [0, 1]; 1: the cost model's `T(c + k) - T(c)`; an engine's own is measured by
the validate_engine calibration), `wake_s` (extra time of the first step after an instance sat idle
for at least `wake_after_s`: an engine woken from idle is slower than one kept busy; measured by the
validate_engine calibration as idle-gapped probes minus back-to-back ones), `mixed_prompt_factor`
(what prompt work costs in a step beside decoding sequences, over what it costs alone, >= 1; 1: the same.
llama-server measured 1.08-1.28 here on a quiet machine: a prompt beside decodes is processed slower than
alone; measured by the validate_engine calibration from prompts sent beside decoding streams).
`separate_passes` (false: a step's prompts and decodes share one pass, its fixed cost T(0) paid once and
the decodes riding in the prompt pass up to T(0); true: the decodes and each prompt chunk are passes of
their own, as llama-server runs them with its per-slot KV; see `aggregated_instance`).
`slot_layout` (needs separate_passes; default false): each request holds an engine slot chosen by
llama-server's rule (prompt similarity above `slot_similarity`, else least recently used) and a step's
decodes cost one decode step per ubatch the engine's splitter forms (runs of consecutive slots; a
prompt's first token joins the run beside it; `ubatch_tokens`, -ub); see `slot_layout`.
`cache_save_token_s` (needs slot_layout; default 0: off): llama-server's host-memory prompt cache copies the
KV of the slots released since its last launch when it launches a request, on its one thread before the next
step; each admission costs this much per token copied (`slot_layout.SlotTable`), measured by the
validate_engine calibration. `slot_order` (needs slot_layout; default null: never-used slots, taken 3, 2,
1, 0): the slots least recently used first, as an engine that served requests before holds them.
`tile_tokens` / `tile_fill` (default 0 / 0: off): an engine that computes attention in query tiles of
`tile_tokens` rows pads a prompt's partial last tile, which costs `tile_fill` of the empty rows' work
(`aggregated_instance.padded_tokens`); measured by the validate_engine calibration from off-tile probes.
`slot_prompt_cache` (needs slot_layout; default false: the block pool below): a request's cached prefix is
what llama-server finds in the slot it takes, its own prompt or a host-memory prompt-cache entry restored into
it (and so taken out of that cache), of at most `host_cache_mib` (--cache-ram; null: unbounded) over the KV
bytes per token (`slot_layout.SlotTable`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from omegaconf import DictConfig, OmegaConf

from harness.clock import Clock
from harness.costmodel import build_profile
from harness.deploy.aggregated_instance import AggregatedInstance
from harness.deploy.cache_pool import HybridCachePool
from harness.deploy.cancel import CANCELLED
from harness.deploy.job import Job
from harness.deploy.slot_layout import SIMILARITY, UBATCH_TOKENS
from harness.errors import InputError, require
from harness.workload.request import Request

if TYPE_CHECKING:
    from harness.deploy.deployment import Deployment

LOCAL = "local"
KEYS = ("name", "builder", "hardware", "gpus_per_instance", "instances", "slots", "chunk_tokens",
        "prefix_shared_after", "prefix_attention", "wake_s", "wake_after_s", "mixed_prompt_factor",
        "separate_passes", "slot_layout", "slot_similarity", "ubatch_tokens", "cache_save_token_s", "slot_order",
        "tile_tokens", "tile_fill", "slot_prompt_cache", "host_cache_mib")
SHARED_AFTER = ("prefill", "finish")


class AggregatedDeployment:
    """The attributes `sim.run_sim` and `build_timeseries` read, plus submit / on_record / close / cancel."""

    def __init__(self, *, name: str, clock: Clock, profile, instances: int, slots: int,
                 chunk_tokens: int | None, block_tokens: int = 512, prefix_cache: bool = True,
                 cache_capacity_tokens: int | None = None, shared_after: str = "prefill",
                 prefix_attention: float = 1.0, mode: str = "sim", wake_s: float = 0.0,
                 wake_after_s: float = 0.0, mixed_prompt_factor: float = 1.0,
                 separate_passes: bool = False, slot_layout: bool = False, slot_similarity: float = SIMILARITY,
                 ubatch_tokens: int = UBATCH_TOKENS, cache_save_token_s: float = 0.0,
                 slot_order: list[int] | None = None, tile_tokens: int = 0, tile_fill: float = 0.0,
                 slot_prompt_cache: bool = False, host_cache_mib: float | None = None) -> None:
        self.name = name
        self.shared_after = shared_after
        self.mode = mode
        self.clock = clock
        self.profile = profile
        self.prefix_cache = prefix_cache
        self.instances = [
            AggregatedInstance(f"agg{i}", clock, profile, slots=slots, chunk_tokens=chunk_tokens,
                               admit=self._on_admit, on_first_token=self._on_first_token, on_done=self._finish,
                               prefix_attention=prefix_attention, wake_s=wake_s, wake_after_s=wake_after_s,
                               mixed_prompt_factor=mixed_prompt_factor, separate_passes=separate_passes,
                               slot_layout=slot_layout, slot_similarity=slot_similarity, ubatch_tokens=ubatch_tokens,
                               block_tokens=block_tokens, cache_save_token_s=cache_save_token_s, slot_order=slot_order,
                               tile_tokens=tile_tokens, tile_fill=tile_fill, slot_prompt_cache=slot_prompt_cache,
                               host_cache_tokens=(None if host_cache_mib is None
                                                  else host_cache_mib * 2**20 / max(profile.kv_bytes_per_token, 1.0)))
            for i in range(instances)]
        self.pools = {inst.name: HybridCachePool(block_tokens=block_tokens,
                                                 kv_bytes_per_token=profile.kv_bytes_per_token,
                                                 state_bytes=profile.state_bytes,
                                                 capacity_tokens=cache_capacity_tokens, exact_state_match=False)
                      for inst in self.instances}
        # What the PD deployments expose and the time series / run loop read.
        self.decode = self.instances
        self.cross_link = self.reverse_link = self.rdma_link = None
        self.rebalancer = None
        self.roles_log: list[tuple[float, int, int]] = [(clock.now(), 0, instances)]
        self.evictions: list[tuple[float, int]] = []
        self.in_flight: dict[int, Job] = {}
        self.records: list[dict] = []
        self.on_record: Callable[[dict], None] | None = None
        self.on_first_token: Callable[[Job], None] | None = None
        self.observers: list[Callable[[Job], None]] = []

    # -- arrival ------------------------------------------------------------------------------
    def _hit(self, instance: AggregatedInstance, request: Request) -> int:
        if not self.prefix_cache or not request.hash_ids:
            return 0
        return self.pools[instance.name].lookup(request.hash_ids, request.input_tokens).ready_tokens

    def submit(self, request: Request) -> Job:
        job = Job(request, route=LOCAL)
        self.in_flight[request.request_id] = job
        if len(self.instances) == 1:
            instance = self.instances[0]
        else:
            instance = max(self.instances, key=lambda i: (self._hit(i, request), -i.load))
        for observe in self.observers:
            observe(job)
        instance.submit(job)
        return job

    def _on_admit(self, job: Job) -> None:
        """A slot takes the request: its cached prefix is what the slot's engine finds now."""
        request = job.request
        if not self.prefix_cache or not request.hash_ids:
            return
        pool = self.pools[job.prefill_instance]
        look = pool.lookup(request.hash_ids, request.input_tokens)
        pool.record(look, request.input_tokens)
        job.cached_tokens = job.cached_local_tokens = look.ready_tokens
        job.cache_hit_tokens = look.hit_tokens
        evicted = pool.insert(request.hash_ids, request.input_tokens, job.prefill_instance)
        if evicted:
            self.evictions.append((self.clock.now(), evicted))

    def _shareable(self, job: Job) -> None:
        request = job.request
        if self.prefix_cache and request.hash_ids and job.error is None:
            self.pools[job.prefill_instance].mark_ready(request.hash_ids, request.input_tokens)

    def _on_first_token(self, job: Job) -> None:
        if self.shared_after == "prefill":
            self._shareable(job)
        if self.on_first_token is not None:
            self.on_first_token(job)

    def tokens_done(self, job: Job) -> int:
        if job.finish_s == job.finish_s:
            return job.request.output_tokens if job.error is None else 0
        for instance in self.instances:
            if instance.name == job.decode_instance:
                return instance.tokens_done(job, self.clock.now())
        return 0

    def cancel(self, job: Job, reason: str = CANCELLED) -> bool:
        """End a request now, queued or admitted, with `reason` as its error; False if it had ended.

        Its instance drops it (`AggregatedInstance.cancel`: its slot is free at once) and it ends in its
        one record, stamped up to now (a prompt it was computing ends now; `finish_s` stays empty). The
        prefix blocks it entered (at admission) are marked computed, as the PD deployments do (the rule
        is `harness.deploy.cancel`'s module note)."""
        if self.in_flight.get(job.request.request_id) is not job:
            return False
        job.abandoned = True
        for instance in self.instances:
            if instance.cancel(job):
                break
        if job.prefill_start_s == job.prefill_start_s:  # admitted: its prefix blocks are in the pool
            if job.prefill_end_s != job.prefill_end_s:
                job.prefill_end_s = self.clock.now()  # it held the slot's prompt work until now
            if self.prefix_cache and job.request.hash_ids:  # computed: the rule of harness.deploy.cancel's note
                self.pools[job.prefill_instance].mark_ready(job.request.hash_ids, job.request.input_tokens)
        job.error = reason
        job.ended_s = self.clock.now()
        self._finish(job)
        return True

    # -- records ------------------------------------------------------------------------------
    def _finish(self, job: Job) -> None:
        if self.shared_after == "finish":
            self._shareable(job)
        self.in_flight.pop(job.request.request_id, None)
        record = job.record(self.name, self.mode)
        self.records.append(record)
        if self.on_record is not None:
            self.on_record(record)

    def close(self, reason: str = "run ended before the request completed", interrupted: bool = False) -> None:
        """Record every request still in flight as failed (nothing sent goes unrecorded); `interrupted`:
        cut off by stopping the run (see `Deployment.close`)."""
        for instance in self.instances:
            instance.drop_all()
        now = self.clock.now()
        for job in list(self.in_flight.values()):
            job.error = reason
            job.interrupted = interrupted
            if interrupted:  # as Deployment.close
                job.ended_s = now
            self._finish(job)


def _plain(node: Any) -> dict[str, Any]:
    return cast(dict[str, Any], OmegaConf.to_container(node, resolve=True)) if isinstance(node, DictConfig) \
        else dict(node)


def build_aggregated(cfg: DictConfig, clock: Clock, mode: str = "sim"):
    """Build from `cfg.deployment` (an aggregated one) and `cfg.model`; the planner is not involved."""
    from harness.deploy.build import (
        Built,  # the PD builder's result type (import here: no cycle)
    )

    dep = _plain(cfg.deployment)
    for key in dep:
        if key not in KEYS:
            raise InputError(f"deployment {dep.get('name')!r}: unknown key {key!r}; valid keys: {', '.join(KEYS)}")
    where = f"deployment {dep.get('name')!r}"
    for key in ("instances", "slots", "gpus_per_instance"):
        value = dep.get(key, 1)
        require(isinstance(value, int) and value >= 1, f"{where}.{key} must be an integer >= 1, got {value!r}")
    chunk = dep.get("chunk_tokens")
    require(chunk is None or (isinstance(chunk, int) and chunk >= 1),
            f"{where}.chunk_tokens must be an integer >= 1 or null (whole prompts), got {chunk!r}")
    shared_after = dep.get("prefix_shared_after", "prefill")
    require(shared_after in SHARED_AFTER,
            f"{where}.prefix_shared_after must be one of {', '.join(SHARED_AFTER)}, got {shared_after!r}")
    attention = dep.get("prefix_attention", 1.0)
    require(isinstance(attention, (int, float)) and 0.0 <= attention <= 1.0,
            f"{where}.prefix_attention must be a number in [0, 1], got {attention!r}")
    for key in ("wake_s", "wake_after_s"):
        value = dep.get(key, 0.0)
        require(isinstance(value, (int, float)) and value >= 0.0, f"{where}.{key} must be a number >= 0 (seconds), "
                                                                   f"got {value!r}")
    mixed = dep.get("mixed_prompt_factor", 1.0)
    require(isinstance(mixed, (int, float)) and mixed >= 1.0,
            f"{where}.mixed_prompt_factor must be a number >= 1 (1: prompt work beside decodes costs what it "
            f"does alone), got {mixed!r}")
    separate = dep.get("separate_passes", False)
    require(isinstance(separate, bool), f"{where}.separate_passes must be true or false, got {separate!r}")
    layout = dep.get("slot_layout", False)
    require(isinstance(layout, bool), f"{where}.slot_layout must be true or false, got {layout!r}")
    require(not layout or separate, f"{where}.slot_layout: true needs separate_passes: true (a prompt's own passes "
                                    f"beside the decode ubatches the slot layout forms)")
    similarity = dep.get("slot_similarity", SIMILARITY)
    require(isinstance(similarity, (int, float)) and 0.0 <= similarity < 1.0,
            f"{where}.slot_similarity must be a number in [0, 1) (0: least recently used slot only), "
            f"got {similarity!r}")
    ubatch = dep.get("ubatch_tokens", UBATCH_TOKENS)
    require(isinstance(ubatch, int) and ubatch >= 1, f"{where}.ubatch_tokens must be an integer >= 1, got {ubatch!r}")
    save = dep.get("cache_save_token_s", 0.0)
    require(isinstance(save, (int, float)) and save >= 0.0,
            f"{where}.cache_save_token_s must be a number >= 0 (seconds per token), got {save!r}")
    require(not save or layout, f"{where}.cache_save_token_s needs slot_layout: true (the slots it copies)")
    order = dep.get("slot_order")
    n_slots = int(dep["slots"])
    require(order is None or (isinstance(order, list) and sorted(order) == list(range(n_slots))),
            f"{where}.slot_order must be null or a permutation of the slots 0..{n_slots - 1} (least recently "
            f"used first), got {order!r}")
    require(order is None or layout, f"{where}.slot_order needs slot_layout: true")
    tile = dep.get("tile_tokens", 0)
    require(isinstance(tile, int) and tile >= 0,
            f"{where}.tile_tokens must be an integer >= 0 (0: attention tiles not modelled), got {tile!r}")
    fill = dep.get("tile_fill", 0.0)
    require(isinstance(fill, (int, float)) and 0.0 <= fill <= 1.0,
            f"{where}.tile_fill must be a number in [0, 1] (share of a full tile's work a partial one costs), "
            f"got {fill!r}")
    slot_cache = dep.get("slot_prompt_cache", False)
    require(isinstance(slot_cache, bool), f"{where}.slot_prompt_cache must be true or false, got {slot_cache!r}")
    require(not slot_cache or layout, f"{where}.slot_prompt_cache needs slot_layout: true (the slots it reads)")
    host_mib = dep.get("host_cache_mib")
    require(host_mib is None or (isinstance(host_mib, (int, float)) and host_mib >= 0),
            f"{where}.host_cache_mib must be null (unbounded) or a number >= 0 (MiB), got {host_mib!r}")
    require(dep.get("hardware") is not None, f"{where}.hardware is missing (its name selects model.profiles.<name>)")
    profile = build_profile(cfg.model, dep["hardware"], gpus_per_instance=int(dep.get("gpus_per_instance", 1)))
    instances = int(dep.get("instances", 1))
    cache = cfg.get("cache") or {}
    deployment = AggregatedDeployment(
        name=str(dep["name"]), clock=clock, profile=profile, instances=instances, slots=int(dep["slots"]),
        chunk_tokens=chunk, block_tokens=int(cfg.workload.get("block_tokens", 512)),
        prefix_cache=bool(cache.get("enabled", True)), cache_capacity_tokens=cache.get("capacity_tokens"),
        shared_after=shared_after, prefix_attention=float(attention), mode=mode,
        wake_s=float(dep.get("wake_s", 0.0)), wake_after_s=float(dep.get("wake_after_s", 0.0)),
        mixed_prompt_factor=float(mixed), separate_passes=separate, slot_layout=layout,
        slot_similarity=float(similarity), ubatch_tokens=int(ubatch), cache_save_token_s=float(save),
        slot_order=None if order is None else [int(s) for s in order], tile_tokens=int(tile), tile_fill=float(fill),
        slot_prompt_cache=slot_cache, host_cache_mib=None if host_mib is None else float(host_mib))
    # Built names the PD Deployment; this one offers the same attributes run_sim and the series read.
    return Built(cast("Deployment", deployment), None, None, 0, 0, instances)
