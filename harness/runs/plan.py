"""A planner run from a config: every deployment's plan, the Eq. 2 projection, the Eq. 1 KV-throughput
table, the printed table, and the files `harness-plan` and the `PlanCallback` write (harness/plan.py).

The config nodes the planner reads become the schema dataclasses first (harness/planner/configs.py):
`PlannerConfig`, `LinkConfig`, a `DeploymentConfig` per deployment planned and a `ModelConfig` per
model read for its measured points. A wrong key or a value of the wrong type fails there, in one
line, before anything is planned; the code below reads typed attributes.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from harness.config.deployment import LinkConfig
from harness.costmodel import build_profile
from harness.costmodel.schema import ModelConfig
from harness.errors import InputError, choices
from harness.planner import Plan, plan_deployment
from harness.planner.configs import deployment_config, planner_config, typed
from harness.planner.projection import measured_phi, projection_rows
from harness.planner.schema import PlannerConfig
from harness.planner.sweeps import split_sweep, threshold_sweep
from harness.runs.plan_variants import Variants, run_variants, task_overrides, without


@dataclasses.dataclass
class PlanRun:
    """What one planner run produces (the files `write` puts in a directory, and notes to print)."""

    plans: dict[str, Plan]
    doc: dict[str, Any]  # plan.json
    projection: pd.DataFrame
    kv: pd.DataFrame | None
    notes: list[str]


def run_plan(cfg: DictConfig, base: Sequence[str] | None = None, names: Sequence[str] | None = None,
             variants: Variants | None = None, kv_table: bool = True) -> PlanRun:
    """Plan, project and tabulate (see plan_all, projection, kv_throughput); `kv_table=False` skips
    the KV-throughput table (~2 s composing and profiling every model)."""
    variants = variants or run_variants(list(base) if base is not None else list(HydraConfig.get().overrides.task))
    plans, doc = plan_all(cfg, base, names, variants)
    proj = projection(cfg, plans, base, variants)
    kv, notes = kv_throughput(cfg, base, variants=variants) if kv_table else (None, [])
    return PlanRun(plans, doc, proj, kv, notes)


def plan_all(cfg: DictConfig, base: Sequence[str] | None = None, names: Sequence[str] | None = None,
             variants: Variants | None = None) -> tuple[dict[str, Plan], dict[str, Any]]:
    """Plan each deployment of `names` (default planner.deployments), each composed from the `base`
    overrides (default: this run's command line) plus `deployment=<name>`; returns plans and the
    plan.json document."""
    from harness.workload import input_length_distribution, mean_output_tokens

    planner = planner_config(cfg.planner)
    planned = [str(name) for name in (names if names is not None else planner.deployments)]
    if not planned:
        raise InputError("planner.deployments is empty: list the deployments to plan, e.g. "
                         "planner.deployments=[homogeneous_pd,prfaas_pd]")
    _check_baseline(planner.baseline, planned, base)
    link = typed(LinkConfig, cfg.link, "link") if cfg.link is not None else None  # read with a remote cluster
    values, weights = input_length_distribution(cfg.workload)
    l_out = mean_output_tokens(cfg.workload)
    base = task_overrides("deployment") if base is None else without(base, "deployment")
    variants = variants or run_variants(base)
    paper_formula = dataclasses.replace(planner, service_time="representative")
    plans: dict[str, Plan] = {}
    paper: dict[str, dict[str, Any]] = {}
    for name in planned:
        dep = deployment_config(variants.get("deployment", name))
        plans[name] = plan_deployment(dep, cfg.model, link, planner, values, weights, l_out)
        if plans[name].service_time != "representative":  # the paper's formula too, for Table 6
            paper[name] = plan_deployment(dep, cfg.model, link, paper_formula, values, weights, l_out).to_dict()
    doc: dict[str, Any] = {name: plan.to_dict() for name, plan in plans.items()}
    for name, rep in paper.items():
        doc[name] |= {f"representative_{k}": v for k, v in rep.items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool)}
    doc["ratios"] = ratios(doc, planner.baseline)
    return plans, doc


def _check_baseline(baseline: str, planned: Sequence[str], base: Sequence[str] | None) -> None:
    """planner.baseline must be a deployment planned. The default one (homogeneous_pd) may be left out of
    a shorter planner.deployments list: the ratios are then against the first deployment planned."""
    if baseline in planned:
        return
    overrides = list(base) if base is not None else list(HydraConfig.get().overrides.task)
    chosen = any(o.lstrip("+~").split("=", 1)[0] == "planner.baseline" for o in overrides)
    if chosen or baseline != PlannerConfig().baseline:
        raise InputError(f"planner.baseline={baseline!r} is not a deployment planned; valid: {choices(planned)} "
                         "(planner.deployments)")


def ratios(doc: dict[str, Any], baseline: str) -> dict[str, Any]:
    """Lambda_max and cost-normalised throughput of each deployment relative to the baseline."""
    names = [k for k in doc if k != "ratios"]
    if baseline not in names:
        baseline = names[0]
    b = doc[baseline]
    out: dict[str, Any] = {"baseline": baseline, "lambda_max": {}, "cost_normalised": {}}
    for name in names:
        out["lambda_max"][name] = doc[name]["lambda_max_rps"] / b["lambda_max_rps"]
        cn, cb = doc[name]["cost_normalised"], b["cost_normalised"]
        out["cost_normalised"][name] = cn / cb if cn is not None and cb else None
    return out


def projection(cfg: DictConfig, plans: dict[str, Plan], base: Sequence[str] | None = None,
               variants: Variants | None = None) -> pd.DataFrame:
    """Eq. 2 rows: measured Phi_kv of each projection model, and this model's own profile."""
    planner = planner_config(cfg.planner)
    proj = planner.projection
    gpus, gpi, lengths = proj.gpus, proj.gpus_per_instance, proj.lengths_tokens
    task = list(base) if base is not None else list(HydraConfig.get().overrides.task)
    variants = variants or run_variants(task)
    rows: list[dict[str, Any]] = []
    for name in proj.models:
        measured = measured_phi(variants.get("model", name))
        if measured is None:
            raise InputError(f"planner.projection.models: model {name} has no kv_throughput table")
        phi, table = measured
        rows += projection_rows(name, phi, lengths, gpus, gpi, f"measured: {table.get('provenance', '')}",
                                str(table.get("hardware")))
    for dep_name, plan in plans.items():
        remote = deployment_config(variants.get("deployment", dep_name)).prfaas
        if remote is None:
            continue
        prof = build_profile(cfg.model, remote.hardware, gpus_per_instance=gpi,
                             slo_tokens_per_s=planner.slo_tokens_per_s)
        phi = cast(Callable[[np.ndarray], np.ndarray], prof.phi_kv_gbps)  # arrays in, arrays out
        rows += projection_rows(prof.model, phi, lengths, gpus, gpi,
                                f"profile: {prof.provenance['prefill_s'][:80]}", prof.hardware)
        l_long = plan.to_dict()["l_long_tokens"]
        if l_long is not None:
            rows += projection_rows(prof.model, phi, [l_long], gpus, gpi,
                                    f"profile at l_long of {dep_name}", prof.hardware)
        break  # one profile of this model per prefill hardware is enough
    return pd.DataFrame(rows)


def _fmt(x: Any, spec: str) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return format(x, spec)


def table(doc: dict[str, Any]) -> str:
    head = (f"{'deployment':<16}{'Lambda':>8}{'ratio':>7}{'Th_prfaas':>10}{'Th_pd-p':>9}{'Th_pd-d':>9}"
            f"{'t':>9}{'Npf/Np/Nd':>11}{'p':>7}{'egress':>8}  bound")
    lines = [head, "-" * len(head)]
    for name, d in doc.items():
        if name == "ratios":
            continue
        split = f"{d['n_prfaas']}/{d['n_prefill']}/{d['n_decode']}"
        lines.append(
            f"{name:<16}{d['lambda_max_rps']:>8.3f}{doc['ratios']['lambda_max'][name]:>7.3f}"
            f"{_fmt(d['theta_prfaas_rps'], '.3f'):>10}{_fmt(d['theta_pd_p_rps'], '.3f'):>9}"
            f"{d['theta_pd_d_rps']:>9.3f}{_fmt(d['threshold_tokens'], ',.0f'):>9}{split:>11}"
            f"{d['offload_fraction']:>7.3f}{d['egress_gbps']:>8.2f}  {d['bound']}")
    lines.append("(Lambda, Theta in req/s; t in tokens; egress in Gbps; ratio vs "
                 f"{doc['ratios']['baseline']})")
    return "\n".join(lines)


# Eq. 1 view (the paper's Table 3 / Fig. 2): Phi_kv of every model on this hardware [P: 8 x H200].
KV_HARDWARE = "h200"
# Input lengths of the cost-model curves: 1K..128K tokens, two points per octave.
KV_LENGTHS_TOKENS = tuple(round(2.0**e) for e in np.arange(10.0, 17.01, 0.5))
KV_COLUMNS = ("model", "family", "hardware", "gpus_per_instance", "input_tokens", "kv_bytes", "prefill_s",
              "phi_kv_gbps", "source", "provenance")
_GBIT = 8.0 / 1e9
_MIB = 2.0**20


def _model_options() -> list[str]:
    """The options of the `model` config group (conf/model/*.yaml), without the schema entries."""
    from hydra.core.global_hydra import GlobalHydra

    options = GlobalHydra.instance().config_loader().get_group_options("model")
    return sorted(o for o in options if not o.startswith("base_"))


def _measured_rows(model: ModelConfig, hardware: str) -> list[dict[str, Any]]:
    """Measured Phi_kv points of a model config: its `kv_throughput` table (Table 3: Phi only), and
    where it has both `measured_kv` and a measured prefill table on `hardware` (Table 5), the
    lengths they share, with S_kv and T_prefill."""
    rows: list[dict[str, Any]] = []
    common = {"model": model.name, "family": model.family, "source": "measured"}
    table = model.kv_throughput
    if table is not None:
        for tokens, gbps in zip(table.tokens, table.gbps, strict=False):
            rows.append({**common, "hardware": table.hardware, "gpus_per_instance": table.gpus_per_instance,
                         "input_tokens": float(tokens), "kv_bytes": math.nan, "prefill_s": math.nan,
                         "phi_kv_gbps": float(gbps), "provenance": table.provenance})
    kv = model.measured_kv
    # A profile is typed Any in the schema (one can be added from the command line); build_profile checks it.
    entry = model.profiles.get(hardware) or {}
    prefill = entry.get("prefill") or {}
    if kv is not None and prefill.get("kind") == "table":
        seconds = dict(zip(prefill.get("tokens") or [], prefill.get("seconds") or [], strict=False))
        for tokens, mib in zip(kv.tokens, kv.mib, strict=False):
            if tokens in seconds and seconds[tokens] > 0:
                size = float(mib) * _MIB
                rows.append({**common, "hardware": hardware, "gpus_per_instance": entry.get("gpus_per_instance"),
                             "input_tokens": float(tokens), "kv_bytes": size, "prefill_s": float(seconds[tokens]),
                             "phi_kv_gbps": size * _GBIT / float(seconds[tokens]),
                             "provenance": f"S_kv {kv.provenance}; T_prefill {prefill.get('provenance', '')}"})
    return rows


def kv_throughput(cfg: DictConfig, base: Sequence[str] | None = None, hardware: str = KV_HARDWARE,
                  variants: Variants | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Phi_kv(l) = S_kv(l) / T_prefill(l) (Eq. 1) of every model config on `hardware` at
    planner.projection.gpus_per_instance GPUs: cost-model curves (source `costmodel`) and the configs'
    measured points (source `measured`). Returns the frame and notes on models that were skipped."""
    planner = planner_config(cfg.planner)
    task = list(base) if base is not None else list(HydraConfig.get().overrides.task)
    gpus = planner.projection.gpus_per_instance
    variants = variants or run_variants(task)
    hw_cfg = variants.get("hardware", hardware)
    lengths = np.asarray(KV_LENGTHS_TOKENS, dtype=float)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for name in _model_options():
        model_cfg = variants.get("model", name)
        model = typed(ModelConfig, model_cfg, "model")
        rows += _measured_rows(model, hardware)
        try:
            prof = build_profile(model_cfg, hw_cfg, gpus_per_instance=gpus, slo_tokens_per_s=planner.slo_tokens_per_s)
        except InputError as err:
            notes.append(f"plan_kv_throughput: no cost-model curve for {name}: {err}")
            continue
        kv_bytes = np.asarray(prof.kv_bytes(lengths), dtype=float)
        prefill_s = prof.prefill_s_vec(lengths)
        provenance = f"T_prefill {prof.provenance.get('prefill_s', '')}; S_kv {prof.provenance.get('kv_bytes', '')}"
        for l, size, t in zip(lengths, kv_bytes, prefill_s, strict=True):
            rows.append({"model": prof.model, "family": model.family, "hardware": prof.hardware,
                         "gpus_per_instance": gpus, "input_tokens": float(l), "kv_bytes": float(size),
                         "prefill_s": float(t), "phi_kv_gbps": float(size * _GBIT / t), "source": "costmodel",
                         "provenance": provenance})
    frame = pd.DataFrame(rows, columns=list(KV_COLUMNS))
    return frame.astype({"gpus_per_instance": "Int64"}), notes


def write(out_dir: Path, plans: dict[str, Plan], doc: dict[str, Any], proj: pd.DataFrame,
          kv: pd.DataFrame | None = None) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "plan.json").write_text(json.dumps(doc, indent=2) + "\n")
    sweeps_t = [threshold_sweep(p) for p in plans.values() if p.grid.thresholds.size > 1]
    sweeps_s = [split_sweep(p) for p in plans.values() if p.grid.n_prefill.size > 1]
    for frames, fname, sweep in ((sweeps_t, "plan_sweep_threshold.parquet", threshold_sweep),
                                 (sweeps_s, "plan_sweep_split.parquet", split_sweep)):
        frame = pd.concat(frames, ignore_index=True) if frames else sweep(next(iter(plans.values()))).iloc[:0]
        frame.to_parquet(out_dir / fname, index=False)
    proj.to_parquet(out_dir / "plan_projection.parquet", index=False)
    if kv is not None:
        kv.to_parquet(out_dir / "plan_kv_throughput.parquet", index=False)

