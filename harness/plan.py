"""`harness-plan` / `python -m harness.plan [overrides]`: the paper's analytic planner on the configs.

Plans every deployment in `planner.deployments` (each composed with this run's overrides plus
`deployment=<name>`) for the configured workload, model and link, then writes to the run dir:
  plan.json                      {deployment: plan, ..., "ratios": {...vs planner.baseline}}
  plan_sweep_threshold.parquet   Lambda and its bounds vs t at each deployment's chosen split (Fig. 5b)
  plan_sweep_split.parquet       Lambda, prefill and decode bounds vs N_p at the chosen t (Fig. 5a)
  plan_projection.parquet        Eq. 2: B_out = (N/P) * Phi_kv(L) for planner.projection.gpus
and prints a table. A `deployment=` override is replaced per plan: choose deployments with
`planner.deployments=[...]`. With `-m`, drop the default experiment's deployment x rate sweep with
`~experiment` (e.g. `harness-plan -m link.capacity_gbps=5,25,100 ~experiment`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
from hydra import compose
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from harness.costmodel import build_profile
from harness.errors import InputError
from harness.hydra_entry import hydra_entry
from harness.planner import Plan, plan_deployment
from harness.planner.projection import measured_phi, projection_rows
from harness.planner.sweeps import split_sweep, threshold_sweep


def _compose(overrides: list[str]) -> DictConfig:
    try:
        return compose(config_name="config", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as err:
        # Hydra's message: the problem, then the available options, then the search path (dropped).
        lines = [ln.strip() for ln in str(err).split("Config search path")[0].splitlines() if ln.strip()]
        detail = lines[0] + (f" ({' '.join(lines[1:])})" if len(lines) > 1 else "") if lines else type(err).__name__
        raise InputError(f"cannot compose config with {' '.join(overrides)}: {detail}") from err


def _task_overrides(group: str) -> list[str]:
    """This run's command-line overrides, minus any choice of `group` (we set it per plan)."""
    task = list(HydraConfig.get().overrides.task)
    return [o for o in task if o.lstrip("+~").split("=", 1)[0] != group]


def plan_all(cfg: DictConfig) -> tuple[dict[str, Plan], dict[str, Any]]:
    """Plan each deployment of planner.deployments; returns plans and the plan.json document."""
    from harness.workload import input_length_distribution, mean_output_tokens

    values, weights = input_length_distribution(cfg.workload)
    l_out = mean_output_tokens(cfg.workload)
    base = _task_overrides("deployment")
    plans: dict[str, Plan] = {}
    for name in cfg.planner.deployments:
        dep_cfg = _compose([*base, f"deployment={name}"])
        plans[str(name)] = plan_deployment(dep_cfg.deployment, dep_cfg.model, dep_cfg.link, dep_cfg.planner,
                                           values, weights, l_out)
    doc: dict[str, Any] = {name: plan.to_dict() for name, plan in plans.items()}
    doc["ratios"] = ratios(doc, str(cfg.planner.baseline))
    return plans, doc


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


def projection(cfg: DictConfig, plans: dict[str, Plan]) -> pd.DataFrame:
    """Eq. 2 rows: measured Phi_kv of each projection model, and this model's own profile."""
    proj = cfg.planner.projection
    gpus, gpi, lengths = list(proj.gpus), int(proj.gpus_per_instance), list(proj.lengths_tokens)
    base = _task_overrides("model")
    rows: list[dict[str, Any]] = []
    for name in proj.models:
        model_cfg = _compose([*base, f"model={name}"]).model
        measured = measured_phi(model_cfg)
        if measured is None:
            raise InputError(f"planner.projection.models: model {name} has no kv_throughput table")
        phi, table = measured
        rows += projection_rows(str(name), phi, lengths, gpus, gpi, f"measured: {table.get('provenance', '')}",
                                str(table.get("hardware")))
    for dep_name, plan in plans.items():
        dep = _compose([*_task_overrides("deployment"), f"deployment={dep_name}"]).deployment
        if dep.prfaas is None:
            continue
        prof = build_profile(cfg.model, dep.prfaas.hardware, gpus_per_instance=int(proj.gpus_per_instance),
                             slo_tokens_per_s=float(cfg.planner.slo_tokens_per_s))
        rows += projection_rows(prof.model, prof.phi_kv_gbps, lengths, gpus, gpi,
                                f"profile: {prof.provenance['prefill_s'][:80]}", prof.hardware)
        l_long = plan.to_dict()["l_long_tokens"]
        if l_long is not None:
            rows += projection_rows(prof.model, prof.phi_kv_gbps, [l_long], gpus, gpi,
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


def write(out_dir: Path, plans: dict[str, Plan], doc: dict[str, Any], proj: pd.DataFrame) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "plan.json").write_text(json.dumps(doc, indent=2) + "\n")
    sweeps_t = [threshold_sweep(p) for p in plans.values() if p.grid.thresholds.size > 1]
    sweeps_s = [split_sweep(p) for p in plans.values() if p.grid.n_prefill.size > 1]
    for frames, fname, sweep in ((sweeps_t, "plan_sweep_threshold.parquet", threshold_sweep),
                                 (sweeps_s, "plan_sweep_split.parquet", split_sweep)):
        frame = pd.concat(frames, ignore_index=True) if frames else sweep(next(iter(plans.values()))).iloc[:0]
        frame.to_parquet(out_dir / fname, index=False)
    proj.to_parquet(out_dir / "plan_projection.parquet", index=False)


@hydra_entry(config_name="config")
def main(cfg: DictConfig) -> dict[str, Any]:
    plans, doc = plan_all(cfg)
    proj = projection(cfg, plans)
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    write(out_dir, plans, doc, proj)
    print(table(doc))
    print(f"wrote {out_dir / 'plan.json'} and plan_sweep_threshold / plan_sweep_split / plan_projection .parquet")
    return doc


if __name__ == "__main__":
    main()
