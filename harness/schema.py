"""Structured-config schemas, stored in Hydra's ConfigStore as `base_<name>` in each group.

Each YAML option lists its schema first in its defaults list, so an unknown key or a wrong type
fails at compose time with the key's path. Each part of the harness owns the schemas of its own
groups (`<package>/schema.py` with a `register(cs)` function); this module only calls them.
Polymorphic nodes (anything with a `_target_`) are typed `Any` here and checked by their
constructors, which name the field and the valid range.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore

from harness.deploy.schema import CacheConfig, FaultsConfig, RebalancerConfig

# Parts that own config groups; each module defines register(cs: ConfigStore) -> None.
_PARTS = (
    "harness.workload.schema",
    "harness.costmodel.schema",
    "harness.planner.schema",
    "harness.deploy.schema",
    "harness.analysis.schema",
    "harness.profiling.schema",
)


@dataclass
class LoadgenConfig:
    """How requests are offered: rate (open loop) or concurrency (closed loop)."""

    rate_rps: float | None = None  # None: the workload's own rate; inf: saturate (closed loop)
    concurrency: int | None = None  # closed loop: this many requests in flight, arrivals ignored
    saturation_in_flight: int = 256  # requests kept in flight when rate_rps is inf
    max_duration_s: float | None = None  # stop offering new requests after this much run time
    progress: bool = True
    # Live/url only (the load generator over HTTP; see harness/loadgen/engine.py):
    warmup_s: float = 0.0  # requests scheduled in the first warmup_s (run clock) are sent but not measured
    max_lateness_ms: float = 10.0  # P99 send lateness (wall ms) above this marks the run invalid
    min_rate_fraction: float = 0.95  # achieved / target send rate below this marks the run invalid
    max_loop_lag_ms: float = 20.0  # P99 event-loop lag (wall ms) above this marks the run invalid


@dataclass
class TargetConfig:
    url: str | None = None  # mode=url: any OpenAI-compatible endpoint
    model: str | None = None  # null: the first model the endpoint lists at /v1/models
    timeout_s: float = 600.0
    api: str = "completions"  # completions (token-id prompts) | chat (text prompts)
    name: str | None = None  # deployment label of a url run; null: url:<model>
    stream: bool = True  # stream responses (TTFT needs it)
    ignore_eos: bool = True  # send ignore_eos so max_tokens pins the output length
    token_id_min: int = 1000  # prompt token ids are drawn from [token_id_min, token_id_max)
    token_id_max: int = 30000  # (clear of special tokens in common vocabularies)
    max_connections: int = 0  # HTTP connection pool size; 0: unlimited


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000  # 0: a free port (printed as `listening on http://HOST:PORT`)
    time_scale: float = 1.0
    model_name: str | None = None  # served model id; null: model.name
    max_model_len: int = 262144  # [assumed] context limit: prompt + max_tokens beyond it is a 400
    default_max_tokens: int = 16  # max_tokens when a request gives none (the OpenAI completions default)
    # Tokens per SSE chunk after the first (vLLM's --stream-interval); null: round(time_scale), at
    # least 1, so the chunk rate per wall second is what real time would produce.
    stream_interval_tokens: int | None = None
    max_body_bytes: int = 33554432  # request bodies beyond this get a 413
    max_lag_ms: float = 50.0  # live runs: P99 emulator timer lag (wall ms) above this marks the run invalid


@dataclass
class RootConfig:
    mode: str = "sim"  # sim | live | url
    seed: int | None = 0
    out_dir: str = "."
    loadgen: LoadgenConfig = field(default_factory=LoadgenConfig)
    target: TargetConfig = field(default_factory=TargetConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    rebalancer: RebalancerConfig = field(default_factory=RebalancerConfig)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    # Group nodes: validated by their own schemas.
    workload: Any = None
    model: Any = None
    deployment: Any = None
    link: Any = None
    planner: Any = None
    analysis: Any = None
    experiment: Any = None


_registered = False


def register_configs() -> None:
    """Store every schema once (idempotent; safe to call from tests and entry points)."""
    global _registered
    if _registered:
        return
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=RootConfig)
    for part in _PARTS:
        importlib.import_module(part).register(cs)
    _registered = True
