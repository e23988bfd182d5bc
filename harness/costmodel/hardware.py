"""An accelerator's specs and the roofline efficiency factors the cost model assumes for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.costmodel.nodes import integer, number, plain
from harness.errors import InputError


@dataclass(frozen=True)
class HardwareSpec:
    """Per-GPU numbers; `price_per_gpu` is relative (the configs use one H20 GPU = 1.0)."""

    name: str
    peak_bf16_flops_per_s: float
    hbm_bandwidth_bytes_per_s: float
    hbm_capacity_bytes: float
    price_per_gpu: float
    memory_utilisation: float
    prefill_mfu: float
    prefill_overhead_s: float
    decode_hbm_efficiency: float
    decode_overhead_s: float
    decode_reference_context_tokens: int
    provenance: dict[str, str]

    @classmethod
    def from_config(cls, hardware_cfg: Any, where: str = "hardware") -> HardwareSpec:
        node = plain(hardware_cfg, where)
        name = node.get("name")
        if not name or name == "???":
            raise InputError(f"{where}.name is missing: compose a hardware config, e.g. /hardware@...: h20")
        where = f"hardware {name}"
        mfu = number(node, "prefill_mfu", where, minimum=0, exclusive=True)
        eff = number(node, "decode_hbm_efficiency", where, minimum=0, exclusive=True)
        util = number(node, "memory_utilisation", where, minimum=0, exclusive=True)
        for key, value in (("prefill_mfu", mfu), ("decode_hbm_efficiency", eff), ("memory_utilisation", util)):
            if value > 1.0:
                raise InputError(f"{where}.{key} must be in (0, 1], got {value}")
        return cls(
            name=str(name),
            peak_bf16_flops_per_s=number(node, "peak_bf16_flops_per_s", where, minimum=0, exclusive=True),
            hbm_bandwidth_bytes_per_s=number(node, "hbm_bandwidth_bytes_per_s", where, minimum=0, exclusive=True),
            hbm_capacity_bytes=number(node, "hbm_capacity_bytes", where, minimum=0, exclusive=True),
            price_per_gpu=number(node, "price_per_gpu", where, minimum=0),
            memory_utilisation=util,
            prefill_mfu=mfu,
            prefill_overhead_s=number(node, "prefill_overhead_s", where, minimum=0),
            decode_hbm_efficiency=eff,
            decode_overhead_s=number(node, "decode_overhead_s", where, minimum=0),
            decode_reference_context_tokens=integer(node, "decode_reference_context_tokens", where, minimum=1),
            provenance=dict(node.get("provenance") or {}),
        )
