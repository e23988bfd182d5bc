"""Schema of `harness-profile`'s config (conf/profile.yaml): the target and the probe design."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore

from harness.schema import TargetConfig


@dataclass
class PrefillDesign:
    """(a) Cold prefill vs input length: one request in flight, fresh random ids, max_tokens=1."""

    lengths: list[int] = field(default_factory=lambda: [128, 256, 512, 1024, 2048])
    repeats: int = 3
    holdout_lengths: list[int] = field(default_factory=lambda: [384, 768, 1536])  # never fitted
    holdout_repeats: int = 2


@dataclass
class CachedDesign:
    """(b) Prefill on a cached prefix: a prompt, then the same prefix + new tokens (checked, not fitted)."""

    prefix_tokens: list[int] = field(default_factory=lambda: [1024])
    new_tokens: list[int] = field(default_factory=lambda: [64, 256])
    repeats: int = 2


@dataclass
class DecodeDesign:
    """(c) Decode step vs batch size and context: N concurrent streams started together."""

    batches: list[int] | None = None  # null: 1, 2, 4, 8, ... up to slots, and slots itself
    holdout_batches: list[int] | None = None  # never fitted; null: [3] when slots >= 4, else none
    prompt_tokens: list[int] = field(default_factory=lambda: [64, 1536])  # per stream: sets the context
    output_tokens: int = 64
    repeats: int = 2
    # The step's form: per_batch (a step per batch size + per context token; sizes not fitted are
    # interpolated: what validate_engine uses) | linear (base + per sequence + per context token).
    kind: str = "per_batch"
    # Streams on slots 0..N-1 (llama.cpp's `id_slot`): the step of one ubatch of N sequences, whatever
    # slots the engine would pick (see ProfileExperiment.decode). false: the engine picks.
    pin_slots: bool = True


@dataclass
class SlotsDesign:
    """(d) The slot/batch limit: from /props or /slots, and (probe=true) by concurrency probing."""

    probe: bool = True
    max_concurrency: int = 16  # probe up to this many concurrent requests
    prompt_tokens: int = 32
    output_tokens: int = 32


@dataclass
class ProfileSettings:
    name: str = "engine_profile"  # the model config's name: model=<name> selects it
    hardware: str = "cpu_local"  # profiles.<hardware> in the written model config
    out_dir: str | None = None  # the model config goes to <out_dir>/model/<name>.yaml; null: the run dir
    slots: int | None = None  # null: from the server (/props, /slots) or probing
    # What times a probe: server (its timings: prompt_ms, per-token predicted_ms; client stamps where it
    # sends none) | client (TTFT, chunk stamps) | cpu (CPU seconds of the local process engine_pid:
    # a single-threaded engine's time without the share other processes take on a shared machine).
    clock: str = "server"
    engine_pid: int | None = None  # clock=cpu only
    prefill: PrefillDesign = field(default_factory=PrefillDesign)
    cached: CachedDesign = field(default_factory=CachedDesign)
    decode: DecodeDesign = field(default_factory=DecodeDesign)
    slot_probe: SlotsDesign = field(default_factory=SlotsDesign)
    # Architecture of the served model (KV bytes derive from it). null: read from the GGUF file the
    # server names in /props when it is on this machine. Keys: hidden_size, layers, q_heads, kv_heads,
    # head_dim, params_b, weight_dtype_bytes, kv_dtype_bytes.
    architecture: Any = None
    tolerance: float = 0.10  # held-out relative error above this is reported as a failed check


@dataclass
class ProfileRunConfig:
    seed: int = 0
    target: TargetConfig = field(default_factory=TargetConfig)
    profile: ProfileSettings = field(default_factory=ProfileSettings)
    engine: Any = None  # conf/engine/<name>.yaml (engine=<llama_server|vllm>): request fields, timings source


def register(cs: ConfigStore) -> None:
    cs.store(name="base_profile_run", node=ProfileRunConfig)
