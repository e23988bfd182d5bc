"""`harness-plan` / `python -m harness.plan [overrides]`: the paper's analytic planner on the configs.

Plans every deployment in `planner.deployments` (each composed with this run's overrides plus
`deployment=<name>`) for the configured workload, model and link, then writes to the run dir:
  plan.json                      {deployment: plan, ..., "ratios": {...vs planner.baseline}}
  plan_sweep_threshold.parquet   Lambda and its bounds vs t at each deployment's chosen split (Fig. 5b)
  plan_sweep_split.parquet       Lambda, prefill and decode bounds vs N_p at the chosen t (Fig. 5a)
  plan_projection.parquet        Eq. 2: B_out = (N/P) * Phi_kv(L) for planner.projection.gpus
  plan_kv_throughput.parquet     Eq. 1: Phi_kv vs input length of every model in conf/model/ on 8 x H200
                                 (cost model), plus the measured points (Table 3 / Table 5) of the configs
and prints a table. A `deployment=` override is replaced per plan: choose deployments with
`planner.deployments=[...]`. With `-m`, drop the default experiment's deployment x rate sweep with
`~experiment` (e.g. `harness-plan -m link.capacity_gbps=5,25,100 ~experiment`).

The planner run itself (plans, projection, KV-throughput table, the files) is assembled in
harness/runs/plan.py, the one composition of every option in harness/runs/plan_variants.py; their
public names are importable from here.

`PlanCallback` runs the same planner in-process when a `python -m harness -m` suite starts and
writes these files into its sweep dir, so the sweep report can draw Fig. 5 and the KV-throughput
figure from Parquet alone.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from harness.errors import InputError
from harness.hydra_entry import hydra_entry
from harness.runs.plan import (
    KV_COLUMNS,
    KV_HARDWARE,
    KV_LENGTHS_TOKENS,
    PlanRun,
    kv_throughput,
    plan_all,
    projection,
    ratios,
    run_plan,
    table,
    write,
)
from harness.runs.plan_variants import Variants, compose_or_input_error, run_variants
from harness.sweep_check import sweep_overrides

__all__ = [
    "KV_COLUMNS", "KV_HARDWARE", "KV_LENGTHS_TOKENS", "PlanCallback", "PlanRun", "Variants", "kv_throughput", "main",
    "plan_all", "projection", "ratios", "run_plan", "sweep_overrides", "table", "write",
]


@hydra_entry(config_name="config")
def main(cfg: DictConfig) -> dict[str, Any]:
    variants = run_variants(HydraConfig.get().overrides.task)  # one composition for every option planned
    run = run_plan(cfg, variants=variants)
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    write(out_dir, run.plans, run.doc, run.projection, run.kv)
    print(table(run.doc))
    for note in run.notes:
        print(note)
    print(f"wrote {out_dir / 'plan.json'} and plan_sweep_threshold / plan_sweep_split / plan_projection / "
          f"plan_kv_throughput .parquet")
    return run.doc


class PlanCallback(Callback):
    """At the start of a multirun, plan the sweep's deployments and write the planner's files
    (plan.json, plan_sweep_threshold / plan_sweep_split / plan_projection / plan_kv_throughput
    .parquet) into `hydra.sweep.dir`, for the report to draw Fig. 5 and the KV-throughput figure.

    The plan uses the sweep's fixed overrides (the experiment, `workload.num_requests=...`); swept
    keys keep their config defaults here, and each run records the planner's values at its own
    sweep point in its summary (`plan_*` columns). Deployments: `deployments` if given, else the
    swept `deployment` values, else the sweep's one deployment. List it before the ReportCallback
    in `hydra.callbacks`. A planner input problem is printed as `error: ...` and the sweep still runs
    (the report then skips the planner figures).
    """

    def __init__(self, deployments: list[str] | None = None, kv_table: bool = True) -> None:
        self.deployments = list(deployments) if deployments else None
        self.kv_table = kv_table  # plan_kv_throughput.parquet: ~2 s composing and profiling every model

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        try:
            sweep_dir.mkdir(parents=True, exist_ok=True)
        except OSError:  # the sweep itself fails on it next, in one line: raised here, Hydra would print a warning
            return
        try:
            fixed, swept = sweep_overrides(config)
            names = self.deployments or swept.get("deployment") or _fixed_choice(fixed, config)
            cfg = compose_or_input_error(fixed)
            variants = Variants(fixed, config.hydra.runtime.choices.get("experiment"))
            run = run_plan(cfg, fixed, names, variants, kv_table=self.kv_table)
            write(sweep_dir, run.plans, run.doc, run.projection, run.kv)
        except InputError as err:
            # the jobs are valid (harness.sweep_check.SweepCheck ran first): the sweep runs, without the plan
            sys.stderr.write(f"error: planner for {sweep_dir}: {err}\n")
            return
        for note in run.notes:
            print(note)
        print(f"planner: wrote {sweep_dir / 'plan.json'} and the plan_*.parquet tables for "
              f"{', '.join(names)}")


def _fixed_choice(fixed: Sequence[str], config: DictConfig) -> list[str]:
    for line in fixed:
        key, _, value = line.partition("=")
        if key.lstrip("+") == "deployment" and value:
            return [value]
    return [str(config.hydra.runtime.choices.get("deployment"))]


if __name__ == "__main__":
    main()
