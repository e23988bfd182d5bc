"""What the parts of a deployment share: its state, and the steps one part asks of another.

`Deployment` (deployment.py) sets every attribute below in its constructor and defines or mixes in
every step; the parts (transfers.py, decode_pool.py, outage.py, roles.py, cancel.py) are mixed into it
and reach them through `self`. Declaring them here lets each part be read, and type-checked, alone.
Annotations only: nothing here exists at run time but the class itself.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.clock import Clock
    from harness.deploy.cache_pool import HybridCachePool
    from harness.deploy.decode import DecodeInstance
    from harness.deploy.handoff import Handoff
    from harness.deploy.job import Job
    from harness.deploy.link import Link
    from harness.deploy.prefill import PrefillInstance
    from harness.deploy.roles import Drain
    from harness.deploy.view import LeastLoaded


class DeploymentState:
    clock: Clock
    profiles: dict[str, Any]
    pools: dict[str, HybridCachePool]
    prefix_cache: bool
    prefill: dict[str, list[PrefillInstance]]
    least_loaded: dict[str, LeastLoaded]
    decode: list[DecodeInstance]
    waiting: deque[Job]
    blocked: deque[Job]
    landed_bytes: float
    in_flight: dict[int, Job]
    held: list[Job]
    draining: list[Drain]
    roles_log: list[tuple[float, int, int]]
    handoff: Handoff | None
    cross_link: Link | None
    reverse_link: Link | None
    rdma_link: Link | None
    prfaas_reachable: bool
    rebalancer: Any
    on_first_token: Callable[[Job], None] | None
    _saved_capacity: dict[str, float]
    _instance_seq: int

    # Steps one part defines and another calls (the host class or a sibling part provides each).
    def _route(self, job: Job) -> None:
        raise NotImplementedError

    def _finish(self, job: Job) -> None:
        raise NotImplementedError

    def _note_evictions(self, n: int) -> None:
        raise NotImplementedError

    def _fail(self, job: Job, reason: str) -> None:
        raise NotImplementedError

    def _prefill_of(self, job: Job, hold: bool) -> None:
        raise NotImplementedError

    def _new_prefill(self, name: str, cluster: str) -> PrefillInstance:
        raise NotImplementedError

    def _new_decode(self, name: str) -> DecodeInstance:
        raise NotImplementedError

    def _kv_ready(self, job: Job) -> None:
        raise NotImplementedError

    def _dispatch(self) -> None:
        raise NotImplementedError

    def _check_draining(self) -> None:
        raise NotImplementedError
