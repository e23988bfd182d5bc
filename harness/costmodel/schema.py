"""Schemas of the `model` and `hardware` config groups (types only; meaning is checked in code).

A model YAML describes the architecture (layer kinds, KV geometry, linear state), the measured data
the paper gives for it (Table 3 KV throughput, Table 5 KV sizes) and per-hardware instance profiles
(`profiles.<hardware name>`): measured tables, inferred curves, or nothing, in which case the
roofline forward model fills in. Every number carries its provenance in `provenance` or in the
`provenance` field of the block it belongs to ([P] paper, [I] inferred, [X] external, [assumed]).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from hydra.core.config_store import ConfigStore


@dataclass
class FullAttentionConfig:
    """Quadratic attention layers: GQA (kv_heads x head dims) or MLA (latent + rope dims)."""

    layers: int = 0
    kind: str = "gqa"  # gqa | mla
    q_heads: int = 0
    kv_heads: int | None = None  # gqa
    k_head_dim: int | None = None  # gqa: K (and Q) head dim
    v_head_dim: int | None = None  # gqa and mla
    kv_lora_rank: int | None = None  # mla: cached latent
    qk_rope_head_dim: int | None = None  # mla: cached decoupled rope key
    qk_nope_head_dim: int | None = None  # mla: per-head non-rope Q/K dim (prefill FLOPs)


@dataclass
class SlidingWindowConfig:
    """SWA layers: KV of the last `window_tokens` tokens only (a bounded per-request state)."""

    layers: int = 0
    window_tokens: int = 0
    q_heads: int = 0
    kv_heads: int = 0
    k_head_dim: int = 0
    v_head_dim: int = 0


@dataclass
class LinearAttentionConfig:
    """Linear-attention layers (KDA, Gated DeltaNet, Lightning): a fixed recurrent state per request."""

    layers: int = 0
    kind: str = "kda"
    heads: int = 0
    k_head_dim: int = 0
    v_head_dim: int = 0
    state_dtype_bytes: float = 4.0
    conv_kernel: int = 0  # short convolution: (kernel - 1) cached inputs per channel
    conv_channels: int = 0
    chunk_tokens: int = 64  # chunkwise-parallel prefill: intra-chunk attention cost


@dataclass
class MeasuredKvConfig:
    """Measured KVCache size per request (S_kv) at a few lengths; overrides the geometry."""

    tokens: list[float] = field(default_factory=list)
    mib: list[float] = field(default_factory=list)
    interpolation: str = "piecewise_linear"  # piecewise_linear | linear_fit
    provenance: str = ""


@dataclass
class KvThroughputConfig:
    """Measured per-instance KV throughput Phi_kv (Eq. 1) at a few lengths, e.g. the paper's Table 3."""

    hardware: str = "h200"
    gpus_per_instance: int = 8
    tokens: list[float] = field(default_factory=list)
    gbps: list[float] = field(default_factory=list)
    provenance: str = ""


@dataclass
class PrefillCurveConfig:
    """T_prefill(l) for one (model, hardware, gpus_per_instance).

    kind: table (tokens/seconds, piecewise-linear), csv (a file with input_tokens,prefill_s[,kv_bytes]),
    polynomial (coefficients c0 + c1*l + c2*l^2 ...), roofline (mfu / overhead_s override the hardware's).
    """

    kind: str = "roofline"
    tokens: list[float] | None = None
    seconds: list[float] | None = None
    csv: str | None = None
    coefficients: list[float] | None = None
    mfu: float | None = None
    overhead_s: float | None = None
    scale: float | None = None  # multiply the curve (sensitivity studies of an inferred profile)
    provenance: str = ""


@dataclass
class DecodeConfig:
    """Decode step model: constant (step_s, bs_max as SLO-governed constants), linear
    (base_s + per_seq_s x batch + per_token_s x context tokens) or roofline."""

    kind: str = "roofline"
    step_s: float | None = None
    bs_max: int | None = None
    base_s: float | None = None
    per_seq_s: float | None = None
    per_token_s: float | None = None
    batch_step_s: list[float] | None = None  # per_batch: step at zero context for batch 1..n
    hbm_efficiency: float | None = None
    overhead_s: float | None = None
    provenance: str = ""


@dataclass
class ProfileConfig:
    gpus_per_instance: int = 8
    prefill: PrefillCurveConfig | None = None
    decode: DecodeConfig | None = None


@dataclass
class ModelConfig:
    name: str = "???"
    display_name: str = ""
    family: str = "hybrid"  # hybrid | dense
    hidden_size: int = 0
    total_params_b: float = 0.0
    active_params_b: float = 0.0
    weight_dtype_bytes: float = 2.0  # bytes per parameter, incl. quantisation scales
    kv_dtype_bytes: float = 2.0
    full_attention: FullAttentionConfig | None = None
    sliding_window: SlidingWindowConfig | None = None
    linear_attention: LinearAttentionConfig | None = None
    measured_kv: MeasuredKvConfig | None = None
    kv_throughput: KvThroughputConfig | None = None
    # hardware name -> ProfileConfig. Typed Any so a profile can be added from the command line
    # (`+model.profiles.h200={prefill:{kind:csv,csv:my.csv}}`); build_profile checks the keys.
    profiles: dict[str, Any] = field(default_factory=dict)
    # Named alternatives to the profiles' decode blocks: variant name -> {hardware name -> decode block}.
    # `model.decode_variant=<name>` swaps them in (for the planner and the emulator alike).
    decode_variants: dict[str, Any] = field(default_factory=dict)
    decode_variant: str | None = None
    provenance: dict[str, str] = field(default_factory=dict)


@dataclass
class HardwareConfig:
    """One accelerator; throughput and memory per GPU, price relative to one H20 GPU."""

    name: str = "???"
    display_name: str = ""
    peak_bf16_flops_per_s: float = 0.0  # dense
    hbm_bandwidth_bytes_per_s: float = 0.0
    hbm_capacity_bytes: float = 0.0
    price_per_gpu: float = 1.0
    memory_utilisation: float = 0.9  # share of HBM usable for weights + KV
    prefill_mfu: float = 0.3  # roofline prefill efficiency
    prefill_overhead_s: float = 0.4  # roofline fixed per-pass cost
    decode_hbm_efficiency: float = 0.6
    decode_overhead_s: float = 0.005
    decode_reference_context_tokens: int = 32768  # per-sequence context at which bs_max is sized
    provenance: dict[str, str] = field(default_factory=dict)


def check_keys(node: dict[str, Any], schema: type, where: str) -> None:
    """InputError naming the first key of `node` that `schema` (a dataclass) does not define."""
    from harness.errors import InputError

    valid = [f.name for f in fields(schema)]
    for key in node:
        if key not in valid:
            raise InputError(f"{where}: unknown key {key!r}; valid keys: {', '.join(valid)}")


def register(cs: ConfigStore) -> None:
    cs.store(group="model", name="base_model", node=ModelConfig)
    cs.store(group="hardware", name="base_hardware", node=HardwareConfig)
