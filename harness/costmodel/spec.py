"""A model's architecture as numbers: KV bytes per token, fixed per-request state, FLOPs and weight bytes.

Only full-attention layers (GQA or MLA) produce KV that grows with the prompt; SWA layers keep the
last `window_tokens` tokens and linear-attention layers a fixed recurrent state, so a request ships
`S_kv(l) = kv_bytes_per_token * l + swa_bytes_per_token * min(l, window) + state_bytes`.
This is why hybrids can cross datacenters (paper §2, Table 2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.costmodel.nodes import integer, number, plain
from harness.errors import InputError

ATTENTION_KINDS = ("gqa", "mla")


@dataclass(frozen=True)
class FullAttention:
    layers: int
    q_heads: int
    qk_dim: int  # per-head Q.K dot-product dimension (prefill FLOPs)
    v_dim: int
    cached_elems_per_token_layer: int  # GQA: 2 * kv_heads * head_dim (K+V); MLA: latent + rope


@dataclass(frozen=True)
class SlidingWindow:
    layers: int
    window_tokens: int
    q_heads: int
    qk_dim: int
    v_dim: int
    cached_elems_per_token_layer: int


@dataclass(frozen=True)
class LinearAttention:
    layers: int
    heads: int
    k_dim: int
    v_dim: int
    state_bytes_per_layer: float  # recurrent state + short-conv state
    chunk_tokens: int


def _full(node: Mapping[str, Any], where: str) -> FullAttention:
    layers = integer(node, "layers", where, minimum=0)
    kind = node.get("kind")
    if kind not in ATTENTION_KINDS:
        raise InputError(f"{where}.kind must be one of {', '.join(ATTENTION_KINDS)}, got {kind!r}")
    q_heads = integer(node, "q_heads", where, minimum=1)
    if kind == "gqa":
        kv_heads = integer(node, "kv_heads", where, minimum=1)
        k_dim = integer(node, "k_head_dim", where, minimum=1)
        v_dim = integer(node, "v_head_dim", where, minimum=1, default=k_dim)
        return FullAttention(layers, q_heads, k_dim, v_dim, kv_heads * (k_dim + v_dim))
    rank = integer(node, "kv_lora_rank", where, minimum=1)
    rope = integer(node, "qk_rope_head_dim", where, minimum=0)
    nope = integer(node, "qk_nope_head_dim", where, minimum=0)
    v_dim = integer(node, "v_head_dim", where, minimum=1)
    return FullAttention(layers, q_heads, nope + rope, v_dim, rank + rope)


def _swa(node: Mapping[str, Any], where: str) -> SlidingWindow:
    k_dim = integer(node, "k_head_dim", where, minimum=1)
    v_dim = integer(node, "v_head_dim", where, minimum=1)
    kv_heads = integer(node, "kv_heads", where, minimum=1)
    return SlidingWindow(
        layers=integer(node, "layers", where, minimum=0),
        window_tokens=integer(node, "window_tokens", where, minimum=1),
        q_heads=integer(node, "q_heads", where, minimum=1),
        qk_dim=k_dim,
        v_dim=v_dim,
        cached_elems_per_token_layer=kv_heads * (k_dim + v_dim),
    )


def _linear(node: Mapping[str, Any], where: str, conv_dtype_bytes: float) -> LinearAttention:
    heads = integer(node, "heads", where, minimum=1)
    k_dim = integer(node, "k_head_dim", where, minimum=1)
    v_dim = integer(node, "v_head_dim", where, minimum=1)
    state = heads * k_dim * v_dim * number(node, "state_dtype_bytes", where, minimum=0, exclusive=True)
    kernel = integer(node, "conv_kernel", where, minimum=0, default=0)
    conv = max(kernel - 1, 0) * integer(node, "conv_channels", where, minimum=0, default=0) * conv_dtype_bytes
    return LinearAttention(
        layers=integer(node, "layers", where, minimum=0),
        heads=heads,
        k_dim=k_dim,
        v_dim=v_dim,
        state_bytes_per_layer=state + conv,
        chunk_tokens=integer(node, "chunk_tokens", where, minimum=1, default=64),
    )


class ModelSpec:
    """Derived architecture numbers of one model config (units in names; bytes and FLOPs)."""

    def __init__(self, model_cfg: Any) -> None:
        node = plain(model_cfg, "model")
        name = node.get("name")
        if not name or name == "???":
            raise InputError("model.name is missing: choose a model config, e.g. model=internal_1t")
        self.name = str(name)
        self.config = node
        where = f"model {self.name}"
        self.kv_dtype_bytes = number(node, "kv_dtype_bytes", where, minimum=0, exclusive=True)
        self.weight_dtype_bytes = number(node, "weight_dtype_bytes", where, minimum=0, exclusive=True)
        self.total_params = number(node, "total_params_b", where, minimum=0, exclusive=True) * 1e9
        self.active_params = number(node, "active_params_b", where, minimum=0, exclusive=True) * 1e9
        if self.active_params > self.total_params:
            raise InputError(f"{where}: active_params_b {node['active_params_b']} exceeds total_params_b "
                             f"{node['total_params_b']}")
        sub = {k: node.get(k) for k in ("full_attention", "sliding_window", "linear_attention")}
        self.full = _full(sub["full_attention"], f"{where}.full_attention") if sub["full_attention"] else None
        self.swa = _swa(sub["sliding_window"], f"{where}.sliding_window") if sub["sliding_window"] else None
        self.linear = (_linear(sub["linear_attention"], f"{where}.linear_attention", self.kv_dtype_bytes)
                       if sub["linear_attention"] else None)
        if self.full is None and self.swa is None and self.linear is None:
            raise InputError(f"{where} has no attention layers (full_attention, sliding_window, linear_attention)")

    # -- KV geometry ----------------------------------------------------------------------------
    @property
    def kv_bytes_per_token(self) -> float:
        """KV that grows with the prompt: full-attention layers only."""
        if self.full is None:
            return 0.0
        return self.full.layers * self.full.cached_elems_per_token_layer * self.kv_dtype_bytes

    @property
    def swa_bytes_per_token(self) -> float:
        if self.swa is None:
            return 0.0
        return self.swa.layers * self.swa.cached_elems_per_token_layer * self.kv_dtype_bytes

    @property
    def window_tokens(self) -> int:
        return self.swa.window_tokens if self.swa is not None else 0

    @property
    def state_bytes(self) -> float:
        """Fixed per-request state of linear layers (independent of length)."""
        return 0.0 if self.linear is None else self.linear.layers * self.linear.state_bytes_per_layer

    def kv_bytes(self, tokens: float | np.ndarray) -> float | np.ndarray:
        """S_kv(l) from the geometry: growing KV + SWA window + fixed linear state."""
        out = self.kv_bytes_per_token * tokens + self.state_bytes
        if self.swa is not None:
            out = out + self.swa_bytes_per_token * np.minimum(tokens, self.window_tokens)
        return out

    # -- compute and memory ---------------------------------------------------------------------
    @property
    def weight_bytes(self) -> float:
        return self.total_params * self.weight_dtype_bytes

    def prefill_flops_coefficients(self) -> tuple[float, float, float, float]:
        """(a, b, c, w) with FLOPs(l) = a*l + b*l^2 + c*pairs_w(l) for one causal prefill of l tokens.

        a: 2*active_params per token for the matmuls, plus linear attention's 4*heads*d_k*d_v per
        token (state update and read-out) and its intra-chunk attention; b: full attention,
        q_heads*(d_qk+d_v) per layer (l^2/2 query-key pairs, 2 FLOPs per multiply-add, QK^T and PV);
        c: SWA, 2*q_heads*(d_qk+d_v) per layer on pairs_w(l) = l^2/2 (l <= w) or w*l - w^2/2.
        """
        a = 2.0 * self.active_params
        if self.linear is not None:
            lin = self.linear
            a += lin.layers * (4.0 * lin.heads * lin.k_dim * lin.v_dim
                               + lin.heads * (lin.k_dim + lin.v_dim) * lin.chunk_tokens)
        b = 0.0 if self.full is None else self.full.layers * self.full.q_heads * (self.full.qk_dim + self.full.v_dim)
        c, w = 0.0, 0.0
        if self.swa is not None:
            s = self.swa
            c, w = s.layers * 2.0 * s.q_heads * (s.qk_dim + s.v_dim), float(s.window_tokens)
        return a, b, c, w

    def prefill_flops(self, tokens: float | np.ndarray) -> float | np.ndarray:
        """FLOPs of one prefill of `tokens` tokens (causal, no cache); see prefill_flops_coefficients."""
        a, b, c, w = self.prefill_flops_coefficients()
        flops = a * tokens + b * np.square(tokens)
        if c:
            flops = flops + c * np.where(tokens <= w, np.square(tokens) / 2.0, w * tokens - w * w / 2.0)
        return flops

    def decode_weight_bytes(self, batch: int) -> float:
        """Weight bytes read by one decode step of `batch` sequences.

        Mixture-of-experts: with uniform routing a batch of b tokens touches an expected share
        1 - (1 - active/total)^b of the weights (b = 1 reads the active parameters only).
        """
        share = self.active_params / self.total_params
        return self.weight_bytes * (1.0 - (1.0 - share) ** max(batch, 1))
