"""`harness-profile`'s analysis: fits on the `fit` probes, predictions of the held-out ones, and the
documents it writes (profile.json, the model config with provenance)."""

from __future__ import annotations

import datetime as dt
import os
import platform
from pathlib import Path
from typing import Any, cast

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from harness.errors import require
from harness.hydra_entry import CONF_DIR
from harness.profiling import fit as fitting
from harness.profiling.design import DECODE_KINDS, architecture
from harness.profiling.experiment import decode_batches
from harness.profiling.writer import architecture_from_gguf, model_config


def _median_by(df: pd.DataFrame, key: str, value: str) -> dict[int, float]:
    return {int(k): float(v) for k, v in df.groupby(key)[value].median().items()}


def analyse(rows: pd.DataFrame, tolerance: float, decode_kind: str = "per_batch",
            slots: int | None = None) -> dict[str, Any]:
    """Fits on the `fit` rows, predictions of the `holdout` and `check` rows; no measured value of a
    held-out probe enters a fit. decode_kind `per_batch`: a step per batch size 1..slots (sizes not
    fitted interpolated between fitted neighbours); `linear`: base + per sequence + per context token."""
    require(decode_kind in DECODE_KINDS, f"profile.decode.kind={decode_kind!r}; valid: {', '.join(DECODE_KINDS)}")
    ok = rows[rows["error"].isna()]
    pre = ok[(ok["probe"] == "prefill") & ok["prefill_s"].notna()]
    pre_fit, pre_hold = pre[pre["role"] == "fit"], pre[pre["role"] == "holdout"]
    prefill = fitting.fit_prefill(pre_fit["input_tokens"], pre_fit["prefill_s"])
    dec = ok[(ok["probe"] == "decode") & ok["step_s"].notna()].drop_duplicates("group")
    dec_fit, dec_hold = dec[dec["role"] == "fit"], dec[dec["role"] == "holdout"]
    if decode_kind == "per_batch":
        top = int(slots or max([*dec["batch"].astype(int), 1]))
        decode = fitting.fit_decode_per_batch(dec_fit["batch"], dec_fit["context_tokens"], dec_fit["step_s"], top)
    else:
        decode = fitting.fit_decode(dec_fit["batch"], dec_fit["context_tokens"], dec_fit["step_s"])
    sources = sorted(set(dec["step_source"]))
    step_source = {"server": "server per-token timings, trimmed mean of gaps",
                   "client": "client chunk stamps in the span where all streams decode",
                   "cpu": "engine CPU seconds of N streams minus the same prefills alone, per step"}.get(
        sources[0] if len(sources) == 1 else "", f"mixed: {', '.join(sources)}")
    checks: list[dict[str, Any]] = []
    for n, measured in _median_by(pre_hold, "input_tokens", "prefill_s").items():
        predicted = float(fitting.predict_prefill(prefill, n))
        checks.append({"probe": "prefill", "input_tokens": n, "measured_s": measured, "predicted_s": predicted})
    for (b, pt), grp in dec_hold.groupby(["batch", "input_tokens"]):
        measured = float(grp["step_s"].median())
        predicted = float(fitting.predict_decode(decode, b, grp["context_tokens"].median()))
        checks.append({"probe": "decode", "batch": int(b), "input_tokens": int(pt), "measured_s": measured,
                       "predicted_s": predicted})
    for c in checks:
        c["rel_error"] = fitting.rel_error(c["predicted_s"], c["measured_s"])
        c["pass"] = abs(c["rel_error"]) <= tolerance
    cached = []
    for _, r in ok[(ok["probe"] == "cached") & (ok["role"] == "check")].iterrows():
        hit = r["server_cache_n"] if pd.notna(r["server_cache_n"]) else r["cached_prefix_tokens"]
        new = r["server_prompt_n"] if pd.notna(r["server_prompt_n"]) else r["input_tokens"] - r["cached_prefix_tokens"]
        # The cost model's cached prefill: T(cached + new) - T(cached) + T(0) (InstanceProfile.prefill_s).
        predicted = float(fitting.predict_prefill(prefill, hit + new) - fitting.predict_prefill(prefill, hit)
                          + prefill.params["c0"])
        cached.append({"input_tokens": int(r["input_tokens"]), "cache_n": int(hit), "new_tokens": int(new),
                       "measured_s": float(r["prefill_s"]), "predicted_s": predicted,
                       "rel_error": fitting.rel_error(predicted, float(r["prefill_s"]))})
    both = pre[pre["server_prompt_ms"].notna() & pre["ttft_s"].notna()]
    overhead = float((both["ttft_s"] - both["server_prompt_ms"] / 1e3).median()) if len(both) else None
    return {
        "prefill": {
            "kind": "polynomial",
            **prefill.params,
            "rms_rel": prefill.rms_rel,
            "max_rel": prefill.max_rel,
            "n": prefill.n,
            "median_s": _median_by(pre_fit, "input_tokens", "prefill_s"),
        },
        "decode": {
            "kind": decode_kind,
            "step_source": step_source,
            **decode.params,
            "rms_rel": decode.rms_rel,
            "max_rel": decode.max_rel,
            "n": decode.n,
            "median_step_s": {
                f"{int(b)}x{int(t)}": float(g["step_s"].median())
                for (b, t), g in dec_fit.groupby(["batch", "input_tokens"])
            },
        },
        "holdout": checks,
        "cached": cached,
        "client_minus_server_prefill_s": overhead,
        "errors": int(rows["error"].notna().sum()),
    }


def _design_text(p: DictConfig, slots: int) -> str:
    batches, held = decode_batches(slots, p.decode.batches, p.decode.holdout_batches)
    return (
        f"prefill: lengths {list(p.prefill.lengths)} x {p.prefill.repeats}, held out {list(p.prefill.holdout_lengths)}"
        f" x {p.prefill.holdout_repeats}, max_tokens=1, fresh ids, cache_prompt=false; decode: batches "
        f"{batches}, held out {held}, prompts {list(p.decode.prompt_tokens)}, {p.decode.output_tokens} tokens,"
        f" x {p.decode.repeats}; interleaved in a seeded random order"
    )


def profile_documents(cfg: DictConfig, rows: pd.DataFrame, info: dict[str, Any], slots: int,
                      probed: int | None) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(profile.json document, model config document, its header comment)."""
    p = cfg.profile
    result = analyse(rows, float(p.tolerance), str(p.decode.kind), slots)
    arch = p.architecture
    if arch is None:
        path = info.get("model_path")
        require(path is not None and bool(path) and Path(path).is_file(),
                f"profile.architecture is not set and the server's model file ({path}) is not on this machine; "
                f"give profile.architecture={{hidden_size: ..., layers: ..., q_heads: ..., kv_heads: ..., "
                f"head_dim: ..., params_b: ..., weight_dtype_bytes: ..., kv_dtype_bytes: ...}}")
        arch = architecture_from_gguf(cast(str, path))
        arch_source = f"read from the GGUF file {path}"
    else:
        arch = architecture(arch)
        arch_source = "given as profile.architecture"
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d")  # the day: provenance, not a lab-notebook record
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"
    engine = f"{info.get('server_header') or 'unknown server'} at {info['url']}, build {info.get('build_info')}"
    pre, dec = result["prefill"], result["decode"]
    source = {"server": "server timings.prompt_ms", "client": "client TTFT",
              "cpu": f"engine CPU seconds (pid {p.engine_pid})"}[str(p.clock)]
    holdout = "; ".join(f"{c['probe']} {c.get('input_tokens')}{' tok' if c['probe'] == 'prefill' else ''}"
                        f"{' batch ' + str(c['batch']) if 'batch' in c else ''}: {100 * c['rel_error']:+.1f}%"
                        for c in result["holdout"])
    prefill_block = {"kind": "polynomial", "coefficients": [pre["c0"], pre["c1"], pre["c2"]],
                     "provenance": f"[M] measured by harness-profile {when}: NNLS relative fit to {pre['n']} cold "
                                   f"prefills ({source}); RMS relative residual {100 * pre['rms_rel']:.1f}%"}
    if dec["kind"] == "per_batch":
        form: dict[str, Any] = {"kind": "per_batch", "batch_step_s": [dec[f"b{k}"] for k in range(1, int(slots) + 1)],
                                "per_token_s": dec["per_token_s"]}
    else:
        form = {"kind": "linear", "base_s": dec["base_s"], "per_seq_s": dec["per_seq_s"],
                "per_token_s": dec["per_token_s"]}
    fitted = sorted({int(b) for b in decode_batches(slots, p.decode.batches, p.decode.holdout_batches)[0]})
    decode_block = {**form, "bs_max": int(slots),
                    "provenance": f"[M] measured by harness-profile {when}: NNLS relative fit to {dec['n']} "
                                  f"decode probes ({result['decode']['step_source']}); RMS relative residual "
                                  f"{100 * dec['rms_rel']:.1f}%; batch sizes {fitted} fitted"
                                  + (", the others interpolated" if dec["kind"] == "per_batch" else "")
                                  + "; bs_max = the engine's slots"}
    provenance = {
        "engine": engine, "model_file": str(info.get("model_path") or info["model"]), "date": when,
        "machine": machine, "architecture": f"[M] {arch_source}",
        "prefill": f"RMS rel residual {pre['rms_rel']:.4f} (max {pre['max_rel']:.4f}) over {pre['n']} probes",
        "decode": f"RMS rel residual {dec['rms_rel']:.4f} (max {dec['max_rel']:.4f}) over {dec['n']} probes",
        "bs_max": f"slots: declared {info.get('declared_slots')}, probed {probed}, used {slots}",
        "holdout": holdout or "none",
        "design": _design_text(p, slots),
    }
    name = str(p.name)
    doc = model_config(name, str(p.hardware), arch, prefill_block, decode_block, provenance,
                       display_name=f"{info['model']} (profiled)")
    header = (f"Written by harness-profile on {when}: {engine}.\nMachine: {machine}.\n"
              f"Use it by name: python -m harness --config-dir <dir holding model/> model={name} ...\n"
              f"(or copy this file to conf/model/{name}.yaml). Prefill/decode were measured on this machine;\n"
              f"the hardware's specs ({p.hardware}) only feed the roofline, which this profile overrides.")
    document = {"server": info, "slots": {"declared": info.get("declared_slots"), "probed": probed, "used": slots},
                "architecture": arch, "design": OmegaConf.to_container(p, resolve=True), **result}
    return document, doc, header


def check_loads(model_path: Path, hardware: str) -> Any:
    """Build the written profile the way a deployment does (schema, then build_profile)."""
    from harness.costmodel import build_profile
    from harness.costmodel.schema import HardwareConfig, ModelConfig

    node = OmegaConf.load(model_path)
    model = OmegaConf.merge(OmegaConf.structured(ModelConfig), {k: v for k, v in node.items() if k != "defaults"})
    hw_path = Path(CONF_DIR) / "hardware" / f"{hardware}.yaml"
    require(hw_path.is_file(), f"profile.hardware={hardware}: no conf/hardware/{hardware}.yaml to check the profile on")
    hw_node = OmegaConf.load(hw_path)
    hw = OmegaConf.merge(OmegaConf.structured(HardwareConfig), {k: v for k, v in hw_node.items() if k != "defaults"})
    return build_profile(model, hw, gpus_per_instance=1)


def table(document: dict[str, Any]) -> str:
    pre, dec = document["prefill"], document["decode"]
    lines = [
        "prefill (median s by input tokens): " + ", ".join(f"{k}: {v:.4f}" for k, v in pre["median_s"].items()),
        f"  fit T(l) = {pre['c0']:.4g} + {pre['c1']:.4g}*l + {pre['c2']:.4g}*l^2   RMS rel residual "
        f"{100 * pre['rms_rel']:.1f}% (n={pre['n']})",
        "decode step (median s by batch x prompt): "
        + ", ".join(f"{k}: {v:.4f}" for k, v in dec["median_step_s"].items()),
        (f"  fit step = {dec['base_s']:.4g} + {dec['per_seq_s']:.4g}*batch + {dec['per_token_s']:.4g}*ctx   "
         if dec["kind"] == "linear" else
         "  fit step = [" + ", ".join(f"{v:.4g}" for k, v in dec.items() if k[0] == "b" and k[1:].isdigit())
         + f"][batch] + {dec['per_token_s']:.4g}*ctx   ")
        + f"RMS rel residual {100 * dec['rms_rel']:.1f}% (n={dec['n']})",
        f"slots: {document['slots']}",
    ]
    for c in document["holdout"]:
        what = f"{c['input_tokens']} tokens" if c["probe"] == "prefill" else f"batch {c['batch']} x {c['input_tokens']}"
        lines.append(f"held out {c['probe']:<7} {what:<18} measured {c['measured_s']:.4f} s  predicted "
                     f"{c['predicted_s']:.4f} s  {100 * c['rel_error']:+.1f}%  {'ok' if c['pass'] else 'FAIL'}")
    for c in document["cached"]:
        lines.append(f"cached prefix {c['cache_n']} + {c['new_tokens']} new: measured {c['measured_s']:.4f} s  "
                     f"predicted {c['predicted_s']:.4f} s  {100 * c['rel_error']:+.1f}%")
    return "\n".join(lines)


