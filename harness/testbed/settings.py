"""The testbed's typed knobs (conf/testbed/default.yaml) and which engines a deployment config asks for."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from harness.errors import InputError


@dataclass(frozen=True)
class TestbedSettings:
    """Units in the names; ports are inside the testbed's own namespaces (no clash with the host's)."""

    prefix: str | None = None
    slots: int = 4
    slot_context_tokens: int = 4608
    threads: int = 1
    engine_port: int = 8080
    agent_ctl_port: int = 7000
    agent_data_port: int = 7001
    tbf_burst_bytes: int = 262144
    tbf_latency_ms: float = 50.0
    ready_timeout_s: float = 120.0
    request_timeout_s: float = 300.0
    transfer_timeout_s: float = 120.0
    slot_root: str = "/dev/shm"
    sample_s: float = 0.1
    engine_binary: str | None = None
    engine_model: str | None = None
    recompute_locally: bool = True
    threshold_tokens: float | None = None
    faults: tuple[Any, ...] = ()  # harness/testbed/faults.py

    def __post_init__(self) -> None:
        for name in ("slots", "slot_context_tokens", "threads"):
            if int(getattr(self, name)) < 1:
                raise InputError(f"testbed.{name}={getattr(self, name)} must be >= 1")
        if self.sample_s <= 0:
            raise InputError(f"testbed.sample_s={self.sample_s} must be > 0")

    @classmethod
    def from_mapping(cls, values: Any) -> TestbedSettings:
        known = {f.name for f in fields(cls)}
        given = dict(values or {})
        unknown = sorted(set(given) - known)
        if unknown:
            raise InputError(f"testbed.{unknown[0]} is not a testbed setting; valid: {', '.join(sorted(known))}")
        if "faults" in given:
            given["faults"] = tuple(given["faults"] or ())
        return cls(**given)

    @property
    def slot_root_path(self) -> Path:
        return Path(self.slot_root)


@dataclass(frozen=True)
class Layout:
    """Which instances a deployment runs on the testbed: at most one prefill engine per cluster (the machine
    has 2 cores), and `n_decode` decode engines."""

    deployment: str
    has_prfaas: bool
    has_local_prefill: bool
    n_decode: int = 1

    @property
    def decode_roles(self) -> tuple[str, ...]:
        return ("decode", *(f"decode_{i}" for i in range(1, self.n_decode)))

    @property
    def roles(self) -> tuple[str, ...]:
        return (*(("remote_prefill",) if self.has_prfaas else ()),
                *(("local_prefill",) if self.has_local_prefill else ()), *self.decode_roles)


def layout_of(deployment: Any) -> Layout:
    """From a deployment config: a PrfaaS cluster if `prfaas.instances` > 0; local prefill unless
    `local.n_prefill` is 0 (naive heterogeneous PD); `local.n_decode` decode engines (null: 1)."""
    prfaas = deployment.get("prfaas")
    has_prfaas = bool(prfaas) and int(prfaas.get("instances") or 0) > 0
    local = deployment.get("local") or {}
    n_prefill, n_decode = local.get("n_prefill"), local.get("n_decode")
    has_local = n_prefill is None or int(n_prefill) > 0
    if not has_prfaas and not has_local:
        raise InputError(f"deployment={deployment.get('name')}: no prefill instance (prfaas.instances=0 and "
                         f"local.n_prefill=0)")
    return Layout(deployment=str(deployment.get("name")), has_prfaas=has_prfaas, has_local_prefill=has_local,
                  n_decode=max(1, int(n_decode or 1)))
