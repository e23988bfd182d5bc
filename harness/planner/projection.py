"""Eq. 2 scale-out projection: minimum egress of an N-GPU prefill cluster, B_out = (N/P) * Phi_kv(L).

Phi_kv(L) = S_kv(L) / T_prefill(L) is one instance's KV production rate (Eq. 1). It comes either
from a model's measured table (the paper's Table 3, 8xH200, SGLang) or from a cost profile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from harness.costmodel.nodes import plain
from harness.errors import InputError


def egress_gbps(phi_kv_gbps: float | np.ndarray, gpus: int, gpus_per_instance: int) -> float | np.ndarray:
    """Eq. 2: (N / P) * Phi_kv."""
    if gpus_per_instance < 1:
        raise InputError(f"gpus_per_instance must be >= 1, got {gpus_per_instance}")
    return gpus / gpus_per_instance * phi_kv_gbps


def measured_phi(model_cfg: Any) -> tuple[Callable[[np.ndarray], np.ndarray], dict[str, Any]] | None:
    """Phi_kv(L) from the model's `kv_throughput` table, or None if it has none.

    Phi_kv is not monotone in L (dense models peak mid-range, Ring-2.5-1T falls), so it is
    interpolated linearly between the measured lengths and held constant beyond them.
    """
    node = plain(model_cfg, "model")
    table = node.get("kv_throughput")
    if not table:
        return None
    xs, ys = np.asarray(table.get("tokens") or [], float), np.asarray(table.get("gbps") or [], float)
    where = f"model {node.get('name')}.kv_throughput"
    if xs.size == 0 or xs.shape != ys.shape:
        raise InputError(f"{where}: tokens and gbps must be non-empty lists of equal length")
    if np.any(np.diff(xs) <= 0) or np.any(ys < 0):
        raise InputError(f"{where}: tokens must be strictly increasing and gbps >= 0")
    return (lambda l: np.interp(np.asarray(l, float), xs, ys)), table


def projection_rows(model: str, phi: Callable[[np.ndarray], np.ndarray], lengths_tokens: Sequence[float],
                    gpus: Sequence[int], gpus_per_instance: int, source: str, hardware: str) -> list[dict[str, Any]]:
    lengths = np.asarray(lengths_tokens, dtype=float)
    phis = np.asarray(phi(lengths), dtype=float)
    rows = []
    for n in gpus:
        for l, f in zip(lengths, phis, strict=True):
            rows.append({
                "model": model, "source": source, "hardware": hardware, "gpus": int(n),
                "gpus_per_instance": gpus_per_instance, "instances": n / gpus_per_instance,
                "length_tokens": float(l), "phi_kv_gbps": float(f),
                "b_out_gbps": float(egress_gbps(f, int(n), gpus_per_instance)),
            })
    return rows
