"""Schemas of the deployment and link groups."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore


@dataclass
class RemoteClusterConfig:
    """The PrfaaS cluster: prefill-only instances, compute-dense hardware."""

    instances: int = 4
    gpus_per_instance: int = 8
    hardware: Any = None


@dataclass
class LocalClusterConfig:
    """The local PD cluster; n_prefill/n_decode null means the planner chooses the split."""

    instances: int = 8
    gpus_per_instance: int = 8
    n_prefill: int | None = None
    n_decode: int | None = None
    rdma_gbps: float = 800.0
    hardware: Any = None


@dataclass
class CacheConfig:
    """Per-cluster prefix cache on the prompt's hash_ids (block-level LRU)."""

    enabled: bool = True
    capacity_blocks: int | None = None  # None: unlimited


@dataclass
class DeploymentConfig:
    name: str = "???"
    prfaas: RemoteClusterConfig | None = None
    local: LocalClusterConfig = field(default_factory=LocalClusterConfig)
    router: Any = None
    cache: CacheConfig = field(default_factory=CacheConfig)
    prefill_max_batch_tokens: int | None = None  # token-budget batching; None: one request per pass
    decode_step_s: float | None = None  # override the profile's decode step time


@dataclass
class LinkConfig:
    name: str = "???"
    capacity_gbps: float = 100.0
    rtt_ms: float = 5.0
    connections: int = 8
    per_connection_gbps: float | None = None
    loss_rate: float = 0.0
    mss_bytes: int = 8960
    capacity_schedule: list[Any] = field(default_factory=list)


def register(cs: ConfigStore) -> None:
    cs.store(group="deployment", name="base_deployment", node=DeploymentConfig)
    cs.store(group="link", name="base_link", node=LinkConfig)
