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
    """The hybrid prefix cache pool of each cluster (prefix matching on the prompt's hash_ids)."""

    enabled: bool = True
    capacity_tokens: int | None = None  # per cluster, in full-attention KV tokens; None: unlimited
    exact_state_match: bool = True  # hybrids: a prefix is usable only where a linear state was stored


@dataclass
class FaultsConfig:
    """Trouble on a schedule (run-clock seconds)."""

    link_events: list[Any] = field(default_factory=list)  # [{t_s, capacity_gbps?, rtt_ms?, loss_rate?}]
    prfaas_outages: list[Any] = field(default_factory=list)  # [[start_s, end_s], ...]


@dataclass
class RebalancerConfig:
    """Long-term re-optimisation of the PD split and threshold from observed traffic."""

    enabled: bool = False
    period_s: float = 60.0  # how often to re-plan
    window_s: float = 120.0  # traffic window the plan is made from
    switch_delay_s: float = 10.0  # a drained instance's role switch (reload, warm-up)
    min_gain: float = 0.05  # re-plan only when it predicts at least this relative throughput gain
    min_samples: int = 50  # requests in the window before a plan is trusted


@dataclass
class KvCostConfig:
    """A per-request cost of the KV hand-off: base_s + per_token_s x the prompt's tokens."""

    base_s: float = 0.0
    per_token_s: float = 0.0


@dataclass
class KvBytesOverheadConfig:
    """Bytes on the link beyond the model's KV: fixed_bytes + per_token_bytes x the tokens sent."""

    fixed_bytes: float = 0.0
    per_token_bytes: float = 0.0


@dataclass
class DeploymentConfig:
    name: str = "???"
    prfaas: RemoteClusterConfig | None = None
    local: LocalClusterConfig = field(default_factory=LocalClusterConfig)
    router: Any = None
    prefill_max_batch_tokens: int | None = None  # token-budget batching; None: one request per pass
    decode_step_s: float | None = None  # override the profile's decode step time
    # The KV hand-off from prefill to decode (harness/deploy/handoff.py); the defaults are no cost, layer-wise.
    kv_handoff: str = "layerwise"  # layerwise: streamed during the prefill | store_and_forward: sent after it
    kv_save_s: KvCostConfig = field(default_factory=KvCostConfig)  # on the prefill instance, after the prefill
    kv_restore_s: KvCostConfig = field(default_factory=KvCostConfig)  # on the decode slot, before the first token
    kv_bytes_overhead: KvBytesOverheadConfig = field(default_factory=KvBytesOverheadConfig)


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
    efficiency: float = 1.0  # goodput over the set rate (payload per frame byte); the wire carries payload / this
    sharing: str = "fair"  # fair: max-min fair between concurrent transfers | fifo: one at a time, in start order


def register(cs: ConfigStore) -> None:
    cs.store(group="deployment", name="base_deployment", node=DeploymentConfig)
    cs.store(group="link", name="base_link", node=LinkConfig)
