"""build_profile: pick, for one (model, hardware, GPUs per instance), the best source of each number.

Order of preference, recorded in `profile.provenance`:
- prefill time: the model's `profiles.<hardware>.prefill` (measured table, user CSV, inferred
  polynomial) when it was taken at this GPU count, else the roofline forward model;
- KV bytes: a CSV's kv_bytes column, else the model's `measured_kv` (e.g. the paper's Table 5 S_kv,
  the same on both sides of the link), else the architecture (KV geometry + linear state);
- decode: the model's `profiles.<hardware>.decode` (e.g. the constant step inferred from the
  paper's SLO) at this GPU count, else the roofline decode model.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.costmodel.curves import Curve, PiecewiseLinear, Polynomial, RooflinePrefill, Scaled, read_profile_csv
from harness.costmodel.decode import (
    ConstantDecode,
    LinearDecode,
    PerBatchDecode,
    RooflineDecode,
    roofline_bs_max,
)
from harness.costmodel.hardware import HardwareSpec
from harness.costmodel.nodes import integer, number
from harness.costmodel.profile import InstanceProfile
from harness.costmodel.schema import DecodeConfig, PrefillCurveConfig, ProfileConfig, check_keys
from harness.costmodel.spec import ModelSpec
from harness.errors import InputError

PREFILL_KINDS = ("table", "csv", "polynomial", "roofline")
DECODE_KINDS = ("constant", "linear", "per_batch", "roofline")
KV_INTERPOLATIONS = ("piecewise_linear", "linear_fit")
MIB = 2.0**20


class SpecKv:
    """S_kv(l) from the architecture; scalar path without numpy."""

    __slots__ = ("per_token", "state", "swa_per_token", "window")

    def __init__(self, spec: ModelSpec) -> None:
        self.per_token = spec.kv_bytes_per_token
        self.state = spec.state_bytes
        self.swa_per_token = spec.swa_bytes_per_token
        self.window = spec.window_tokens

    def __call__(self, l: float) -> float:
        return self.per_token * l + self.state + self.swa_per_token * (l if l < self.window else self.window)

    def vec(self, l: np.ndarray) -> np.ndarray:
        l = np.asarray(l, dtype=float)
        size: np.ndarray = self.per_token * l + self.state + self.swa_per_token * np.minimum(l, self.window)
        return size


def _linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    slope, intercept = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(slope), float(intercept)


def _prefill_curve(block: dict[str, Any] | None, spec: ModelSpec, hw: HardwareSpec, gpus: int, where: str,
                   prov: dict[str, str]) -> tuple[Curve, list[float] | None, list[float] | None]:
    """The T_prefill curve, plus (tokens, kv_bytes) when a CSV carries a kv_bytes column."""
    kind = (block or {}).get("kind", "roofline")
    if kind not in PREFILL_KINDS:
        raise InputError(f"{where}.kind must be one of {', '.join(PREFILL_KINDS)}, got {kind!r}")
    source = (block or {}).get("provenance") or ""
    block = block or {}  # (None only reaches the roofline branch, which did the same)
    if kind == "table":
        curve: Curve = PiecewiseLinear(block.get("tokens") or [], block.get("seconds") or [], where)
        prov["prefill_s"] = f"piecewise-linear table: {source}"
        return curve, None, None
    if kind == "csv":
        path = block.get("csv")
        if not path:
            raise InputError(f"{where}.csv is required when kind is csv")
        tokens, seconds, kv = read_profile_csv(path, where)
        prov["prefill_s"] = f"piecewise-linear from CSV {path}: {source}"
        return PiecewiseLinear(tokens, seconds, f"{path} (prefill_s)"), tokens, kv
    if kind == "polynomial":
        poly = Polynomial(block.get("coefficients") or [], where)
        prov["prefill_s"] = f"polynomial {poly.coefficients}: {source}"
        return poly, None, None
    mfu = number(block, "mfu", where, minimum=0, exclusive=True) if block.get("mfu") is not None else hw.prefill_mfu
    overhead = (number(block, "overhead_s", where, minimum=0) if block.get("overhead_s") is not None
                else hw.prefill_overhead_s)
    prov["prefill_s"] = (f"roofline: {overhead:g} s + FLOPs/({mfu:g} MFU x {gpus} x {hw.peak_bf16_flops_per_s:.3g} "
                         f"FLOP/s) [assumed efficiency] {source}").strip()
    curve = RooflinePrefill(spec.prefill_flops_coefficients(), mfu * gpus * hw.peak_bf16_flops_per_s, overhead)
    return curve, None, None


def _kv_curve(spec: ModelSpec, csv_tokens: list[float] | None, csv_kv: list[float] | None, prov: dict[str, str]
              ) -> tuple[Curve, float, float]:
    """(curve, bytes per token, fixed bytes per request)."""
    where = f"model {spec.name}.measured_kv"
    if csv_kv is not None and csv_tokens is not None:  # (a CSV with kv_bytes gives both)
        table = PiecewiseLinear(csv_tokens, csv_kv, "profile CSV (kv_bytes)")
        prov["kv_bytes"] = "piecewise-linear from the profile CSV's kv_bytes column"
        return table, *_linear_fit(csv_tokens, csv_kv)
    measured = spec.config.get("measured_kv")
    if measured:
        tokens = [float(t) for t in measured.get("tokens") or []]
        size = [float(m) * MIB for m in measured.get("mib") or []]
        how = measured.get("interpolation", "piecewise_linear")
        if how not in KV_INTERPOLATIONS:
            raise InputError(f"{where}.interpolation must be one of {', '.join(KV_INTERPOLATIONS)}, got {how!r}")
        curve: Curve = PiecewiseLinear(tokens, size, where)  # validates the points either way
        slope, intercept = _linear_fit(tokens, size)
        if how == "linear_fit":
            curve = Polynomial([intercept, slope], where)
        prov["kv_bytes"] = f"{how.replace('_', '-')} of measured S_kv: {measured.get('provenance', '')}"
        return curve, slope, intercept
    prov["kv_bytes"] = (f"architecture: {spec.kv_bytes_per_token:,.0f} B/token (full attention) + "
                        f"{spec.state_bytes / MIB:.1f} MiB linear state"
                        + (f" + SWA window {spec.window_tokens} tokens" if spec.swa is not None else ""))
    return SpecKv(spec), spec.kv_bytes_per_token, spec.state_bytes + spec.swa_bytes_per_token * spec.window_tokens


def _check_profile(entry: Any, where: str) -> None:
    if not isinstance(entry, dict):
        raise InputError(f"{where} must be a mapping (gpus_per_instance, prefill, decode), got {entry!r}")
    check_keys(entry, ProfileConfig, where)
    for key, schema in (("prefill", PrefillCurveConfig), ("decode", DecodeConfig)):
        block = entry.get(key)
        if block is not None and not isinstance(block, dict):
            raise InputError(f"{where}.{key} must be a mapping, got {block!r}")
        check_keys(block or {}, schema, f"{where}.{key}")


def build_profile(model_cfg: Any, hardware_cfg: Any, gpus_per_instance: int = 8,
                  slo_tokens_per_s: float = 40.0) -> InstanceProfile:
    """Build the cost profile of one instance of `model_cfg` on `gpus_per_instance` x `hardware_cfg`.

    `slo_tokens_per_s` (the paper's 40 tok/s [P]) sets the decode step budget 1/SLO used to size
    bs_max in the roofline decode model.
    """
    spec = ModelSpec(model_cfg)
    hw = HardwareSpec.from_config(hardware_cfg)
    gpus = integer({"gpus_per_instance": gpus_per_instance}, "gpus_per_instance", "build_profile", minimum=1)
    slo = number({"slo_tokens_per_s": slo_tokens_per_s}, "slo_tokens_per_s", "build_profile", minimum=0,
                 exclusive=True)
    usable = gpus * hw.hbm_capacity_bytes * hw.memory_utilisation
    if spec.weight_bytes > usable:
        raise InputError(
            f"model {spec.name}: weights ({spec.weight_bytes / 1e9:,.0f} GB at {spec.weight_dtype_bytes:g} B/param) "
            f"do not fit {gpus} x {hw.name} ({usable / 1e9:,.0f} GB usable); raise gpus_per_instance or "
            f"lower model.weight_dtype_bytes")
    prov: dict[str, str] = {}
    entry = (spec.config.get("profiles") or {}).get(hw.name)
    where = f"model {spec.name}.profiles.{hw.name}"
    if entry is not None:
        _check_profile(entry, where)
    if entry is not None and int(entry.get("gpus_per_instance", 8)) != gpus:
        prov["profile"] = (f"profiles.{hw.name} was taken at {entry.get('gpus_per_instance')} GPUs per instance; "
                           f"roofline used for {gpus}")
        entry = None
    entry = entry or {}
    prefill, csv_tokens, csv_kv = _prefill_curve(entry.get("prefill"), spec, hw, gpus, f"{where}.prefill", prov)
    scale = (entry.get("prefill") or {}).get("scale")
    if scale is not None and float(scale) != 1.0:
        factor = number(entry["prefill"], "scale", f"{where}.prefill", minimum=0, exclusive=True)
        prefill = Scaled(prefill, factor)
        prov["prefill_s"] += f" x {factor:g} (prefill.scale)"
    kv, kv_per_token, state = _kv_curve(spec, csv_tokens, csv_kv, prov)

    kv_capacity = usable - spec.weight_bytes
    prov["kv_capacity_bytes"] = (f"{gpus} x {hw.hbm_capacity_bytes / 1e9:g} GB x {hw.memory_utilisation:g} usable "
                                 f"- {spec.weight_bytes / 1e9:,.0f} GB weights")
    decode_block = entry.get("decode") or {}
    variant = spec.config.get("decode_variant")
    if variant is not None:
        variants = spec.config.get("decode_variants") or {}
        if not variants:  # a model with no variants (e.g. composed beside one that has them): its own decode
            prov["decode_variant"] = f"{variant} requested; model {spec.name} defines no decode variants"
        elif variant not in variants:
            raise InputError(f"model {spec.name}.decode_variant must be one of "
                             f"{', '.join(sorted(variants)) or '(none defined)'}, got {variant!r}")
        chosen = (variants.get(variant) or {}).get(hw.name)
        if chosen is not None:
            check_keys(chosen, DecodeConfig, f"model {spec.name}.decode_variants.{variant}.{hw.name}")
            decode_block = chosen
            prov["decode_variant"] = f"{variant} (model.decode_variant)"
    kind = decode_block.get("kind", "roofline")
    if kind not in DECODE_KINDS:
        raise InputError(f"{where}.decode.kind must be one of {', '.join(DECODE_KINDS)}, got {kind!r}")
    if kind == "constant":
        step_s = number(decode_block, "step_s", f"{where}.decode", minimum=0, exclusive=True)
        bs_max = integer(decode_block, "bs_max", f"{where}.decode", minimum=1)
        decode: ConstantDecode | LinearDecode | PerBatchDecode | RooflineDecode = ConstantDecode(step_s)
        t_decode = step_s
        prov["decode_step_s"] = prov["bs_max"] = f"constant: {decode_block.get('provenance', '')}"
    elif kind == "linear":
        w = f"{where}.decode"
        linear = decode = LinearDecode(number(decode_block, "base_s", w, minimum=0),
                                       number(decode_block, "per_seq_s", w, minimum=0),
                                       number(decode_block, "per_token_s", w, minimum=0))
        ctx = hw.decode_reference_context_tokens
        if decode_block.get("bs_max") is not None:
            bs_max = integer(decode_block, "bs_max", w, minimum=1)
            prov["bs_max"] = f"given: {decode_block.get('provenance', '')}"
        else:
            bs_max = roofline_bs_max(decode, ctx, 1.0 / slo, kv_per_token * ctx + state, kv_capacity)
            prov["bs_max"] = (f"linear step: largest batch with step <= {1e3 / slo:g} ms ({slo:g} tok/s SLO) at "
                              f"{ctx} context tokens per sequence and KV within capacity")
            if bs_max < 1:
                raise InputError(f"{w}: no batch meets the {slo:g} tok/s SLO at {ctx} context tokens; "
                                 f"lower planner.slo_tokens_per_s or give bs_max")
        t_decode = decode(bs_max, float(bs_max * ctx))
        prov["decode_step_s"] = (f"linear: {linear.base_s:g} s + {linear.per_seq_s:g} s/seq + "
                                 f"{linear.per_token_s:g} s/context token: {decode_block.get('provenance', '')}")
    elif kind == "per_batch":
        w = f"{where}.decode"
        steps = decode_block.get("batch_step_s") or []
        if not steps or any(not isinstance(x, (int, float)) or x < 0 for x in steps):
            raise InputError(f"{w}.batch_step_s must be a non-empty list of step times >= 0 (batch 1, 2, ...), "
                             f"got {steps!r}")
        per_batch = decode = PerBatchDecode(
            [float(x) for x in steps], number(decode_block, "per_token_s", w, minimum=0)
        )
        bs_max = integer(decode_block, "bs_max", w, minimum=1)
        t_decode = decode(bs_max, float(bs_max * hw.decode_reference_context_tokens))
        prov["bs_max"] = f"given: {decode_block.get('provenance', '')}"
        prov["decode_step_s"] = (f"per batch size {steps} s + {per_batch.per_token_s:g} s/context token: "
                                 f"{decode_block.get('provenance', '')}")
    else:
        eff = (number(decode_block, "hbm_efficiency", f"{where}.decode", minimum=0, exclusive=True)
               if decode_block.get("hbm_efficiency") is not None else hw.decode_hbm_efficiency)
        overhead = (number(decode_block, "overhead_s", f"{where}.decode", minimum=0)
                    if decode_block.get("overhead_s") is not None else hw.decode_overhead_s)
        decode = RooflineDecode(spec, hw, gpus, eff, overhead, kv_per_token, state)
        ctx = hw.decode_reference_context_tokens
        bs_max = roofline_bs_max(decode, ctx, 1.0 / slo, kv_per_token * ctx + state, kv_capacity)
        t_decode = decode(max(bs_max, 1), float(max(bs_max, 1) * ctx))
        prov["decode_step_s"] = (f"roofline: {overhead:g} s + max(bytes/({eff:g} x {gpus} x "
                                 f"{hw.hbm_bandwidth_bytes_per_s:.3g} B/s), FLOPs/(MFU x peak)) [assumed efficiency]")
        prov["bs_max"] = (f"roofline: largest batch with step <= {1e3 / slo:g} ms ({slo:g} tok/s SLO) at {ctx} "
                          f"context tokens per sequence and KV within capacity")
    price = gpus * hw.price_per_gpu
    prov["price_per_instance"] = f"{gpus} x {hw.price_per_gpu:g} ({hw.provenance.get('price_per_gpu', 'hardware')})"
    return InstanceProfile(
        model=spec.name, hardware=hw.name, gpus_per_instance=gpus, prefill_curve=prefill, kv_curve=kv,
        decode_step=decode, bs_max=bs_max, t_decode_s=t_decode, kv_capacity_bytes=kv_capacity,
        kv_bytes_per_token=kv_per_token, state_bytes=state, price_per_instance=price, provenance=prov,
    )
