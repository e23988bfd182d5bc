"""Decode step time and the largest batch that meets the per-token SLO.

`step_s(batch, context_tokens)`: `context_tokens` is the total context held by the batch (the sum
over its sequences), which is what a decode step has to read. Two models:

- constant: the paper's view (Eq. 5 treats BS_max and T_decode as SLO-governed constants); the
  step time does not depend on the batch, and bs_max is given.
- linear: `base_s + per_seq_s * batch + per_token_s * context_tokens`, the form a measured engine
  fits (its step grows with the batch and with the context it reads); bs_max is given (an engine's
  slot count) or sized from the SLO at the hardware's reference context.
- roofline: weights touched by the batch plus all KV and state read from HBM at an assumed
  efficiency, or the matmul FLOPs at the prefill MFU, whichever is slower, plus a fixed overhead.
  bs_max is the largest batch whose step at the hardware's reference context meets the SLO and
  whose KV fits in memory.
"""

from __future__ import annotations

from collections.abc import Callable

from harness.costmodel.hardware import HardwareSpec
from harness.costmodel.spec import ModelSpec

BS_SEARCH_LIMIT = 4096


class ConstantDecode:
    __slots__ = ("step",)

    def __init__(self, step_s: float) -> None:
        self.step = step_s

    def __call__(self, batch: int, context_tokens: float) -> float:
        return self.step


class LinearDecode:
    """A step that grows with the batch and the context it reads (fitted to a measured engine)."""

    __slots__ = ("base_s", "per_seq_s", "per_token_s")

    def __init__(self, base_s: float, per_seq_s: float, per_token_s: float) -> None:
        self.base_s, self.per_seq_s, self.per_token_s = base_s, per_seq_s, per_token_s

    def __call__(self, batch: int, context_tokens: float) -> float:
        return self.base_s + self.per_seq_s * batch + self.per_token_s * context_tokens


class PerBatchDecode:
    """A measured step per batch size (1..n) plus a per-context-token term; beyond n, the last
    increment continues. For engines whose step is not linear in the batch (llama.cpp on CPU with
    per-sequence KV: one sequence is much cheaper than two)."""

    __slots__ = ("per_token_s", "steps")

    def __init__(self, steps: list[float], per_token_s: float) -> None:
        self.steps, self.per_token_s = [float(x) for x in steps], per_token_s

    def __call__(self, batch: int, context_tokens: float) -> float:
        steps, n = self.steps, len(self.steps)
        if batch <= n:
            base = steps[max(batch, 1) - 1]
        else:
            base = steps[-1] + (batch - n) * (max(0.0, steps[-1] - steps[-2]) if n > 1 else steps[-1])
        return base + self.per_token_s * context_tokens


class RooflineDecode:
    __slots__ = ("overhead_s", "_bw", "_flops", "_weights", "_share", "_active2", "_kv_tok", "_state")

    def __init__(self, spec: ModelSpec, hw: HardwareSpec, gpus: int, hbm_efficiency: float,
                 overhead_s: float, kv_bytes_per_token: float, state_bytes: float) -> None:
        self.overhead_s = overhead_s
        self._bw = hbm_efficiency * gpus * hw.hbm_bandwidth_bytes_per_s
        self._flops = hw.prefill_mfu * gpus * hw.peak_bf16_flops_per_s
        self._weights = spec.weight_bytes
        self._share = 1.0 - spec.active_params / spec.total_params
        self._active2 = 2.0 * spec.active_params
        # Each sequence reads its growing KV and its fixed state (linear state, SWA window).
        self._kv_tok = kv_bytes_per_token
        self._state = state_bytes

    def __call__(self, batch: int, context_tokens: float) -> float:
        b = batch if batch > 1 else 1
        weights = self._weights * (1.0 - self._share ** b)
        memory_s = (weights + self._kv_tok * context_tokens + self._state * b) / self._bw
        compute_s = self._active2 * b / self._flops
        return self.overhead_s + (memory_s if memory_s > compute_s else compute_s)


def roofline_bs_max(step: Callable[[int, float], float], per_seq_context_tokens: int, slo_step_s: float,
                    kv_per_seq_bytes: float, kv_capacity_bytes: float | None) -> int:
    """Largest batch with step <= slo_step_s at that context and total KV within capacity (0 if none).

    Both conditions only get harder as the batch grows, so the feasible batches are 1..B: bisect.
    """

    def ok(n: int) -> bool:
        if kv_capacity_bytes is not None and n * kv_per_seq_bytes > kv_capacity_bytes:
            return False
        return step(n, float(n) * per_seq_context_tokens) <= slo_step_s

    if not ok(1):
        return 0
    lo, hi = 1, BS_SEARCH_LIMIT  # ok(lo) holds
    if ok(hi):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo
