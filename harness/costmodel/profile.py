"""InstanceProfile: what one serving instance (model x hardware x GPUs) costs in time, bytes and money.

The emulator calls these methods once per request or per decode batch change, so scalar calls stay
in plain Python (about a microsecond). The planner uses the `_vec` forms on whole grids.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import numpy as np

from harness.costmodel.curves import Curve

_GBIT = 8.0 / 1e9  # bytes -> Gbit (decimal, as the paper's Gbps)


class InstanceProfile:
    """Cost of one instance. Times in seconds, sizes in bytes, price in the hardware's relative unit.

    Attributes: model, hardware, gpus_per_instance, bs_max (largest decode batch meeting the SLO),
    t_decode_s (decode step at bs_max: Eq. 5's T_decode), kv_capacity_bytes (KV memory of a decode
    instance; None = unknown/unlimited), kv_bytes_per_token and state_bytes (linear decomposition of
    kv_bytes: block-level KV vs request-level state), price_per_instance, provenance (source of
    each of these, tagged [P]/[I]/[X]/[assumed]).
    """

    __slots__ = ("model", "hardware", "gpus_per_instance", "_t", "_t0", "_kv", "_decode", "bs_max",
                 "t_decode_s", "kv_capacity_bytes", "kv_bytes_per_token", "state_bytes",
                 "price_per_instance", "provenance")

    def __init__(self, *, model: str, hardware: str, gpus_per_instance: int, prefill_curve: Curve,
                 kv_curve: Curve, decode_step: Callable[[int, float], float], bs_max: int,
                 t_decode_s: float, kv_capacity_bytes: float | None, kv_bytes_per_token: float,
                 state_bytes: float, price_per_instance: float, provenance: dict[str, str]) -> None:
        self.model = model
        self.hardware = hardware
        self.gpus_per_instance = gpus_per_instance
        self._t = prefill_curve
        self._t0 = prefill_curve(0.0)
        self._kv = kv_curve
        self._decode = decode_step
        self.bs_max = bs_max
        self.t_decode_s = t_decode_s
        self.kv_capacity_bytes = kv_capacity_bytes
        self.kv_bytes_per_token = kv_bytes_per_token
        self.state_bytes = state_bytes
        self.price_per_instance = price_per_instance
        self.provenance = provenance

    def prefill_s(self, new_tokens: int, cached_tokens: int = 0) -> float:
        """Prefill time of `new_tokens` on top of a cached prefix of `cached_tokens`.

        T(cached + new) - T(cached) + T(0): the new tokens cost the marginal compute of extending
        the sequence (their attention over the cached prefix included, which is why it is not
        T(new)), and the fixed per-pass cost T(0) (launch, weight streaming, scheduling) is paid
        once. With no cache this is exactly T(new).
        """
        if cached_tokens:
            t = self._t
            return t(cached_tokens + new_tokens) - t(cached_tokens) + self._t0
        return self._t(new_tokens)

    def prefill_s_vec(self, lengths: np.ndarray, cached: np.ndarray | None = None) -> np.ndarray:
        lengths = np.asarray(lengths, dtype=float)
        if cached is None:
            return self._t.vec(lengths)
        cached = np.asarray(cached, dtype=float)
        seconds: np.ndarray = self._t.vec(cached + lengths) - self._t.vec(cached) + self._t0
        return seconds

    def kv_bytes(self, tokens: int | float | np.ndarray) -> float | np.ndarray:
        """Bytes shipped for a request of `tokens` tokens: growing KV + fixed state (S_kv of Eq. 1)."""
        if type(tokens) is np.ndarray:
            return self._kv.vec(tokens)
        return self._kv(cast(float, tokens))

    def decode_step_s(self, batch: int, context_tokens: float) -> float:
        """One decode step of `batch` sequences holding `context_tokens` tokens of context in total."""
        return self._decode(batch, context_tokens)

    def phi_kv_gbps(self, tokens: float | np.ndarray) -> float | np.ndarray:
        """Eq. 1: KV throughput of one instance prefilling requests of `tokens` tokens back to back."""
        tokens_arr = np.asarray(tokens, dtype=float)
        gbps: np.ndarray = self._kv.vec(tokens_arr) * _GBIT / self._t.vec(tokens_arr)
        return gbps

    def __repr__(self) -> str:
        return (f"InstanceProfile({self.model} on {self.gpus_per_instance}x{self.hardware}: "
                f"T(8K)={self.prefill_s(8192):.3f}s, S_kv(8K)={self.kv_bytes(8192) / 2**20:.1f}MiB, "
                f"bs_max={self.bs_max}, T_decode={self.t_decode_s * 1e3:.1f}ms)")
