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

# Parts that own config groups; each module defines register(cs: ConfigStore) -> None.
_PARTS = (
    "harness.workload.schema",
    "harness.costmodel.schema",
    "harness.planner.schema",
    "harness.deploy.schema",
    "harness.analysis.schema",
)


@dataclass
class LoadgenConfig:
    """How requests are offered: rate (open loop) or concurrency (closed loop)."""

    rate_rps: float | None = None  # None: the workload's own rate; inf: saturate (closed loop)
    concurrency: int | None = None  # closed loop: this many requests in flight, arrivals ignored
    saturation_in_flight: int = 256  # requests kept in flight when rate_rps is inf
    max_duration_s: float | None = None  # stop offering new requests after this much run time
    progress: bool = True


@dataclass
class TargetConfig:
    url: str | None = None  # mode=url: any OpenAI-compatible endpoint
    model: str | None = None
    timeout_s: float = 600.0


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    time_scale: float = 1.0


@dataclass
class RootConfig:
    mode: str = "sim"  # sim | live | url
    seed: int | None = 0
    out_dir: str = "."
    loadgen: LoadgenConfig = field(default_factory=LoadgenConfig)
    target: TargetConfig = field(default_factory=TargetConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
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
        try:
            module = importlib.import_module(part)
        except ModuleNotFoundError as err:
            if err.name != part:
                raise
            continue
        module.register(cs)
    _registered = True
