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

`PlanCallback` runs the same planner in-process when a `python -m harness -m` suite starts and writes
these files into its sweep dir, so the sweep report can draw Fig. 5 and the KV-throughput figure
from Parquet alone.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
from hydra import compose
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from harness.costmodel import build_profile
from harness.errors import InputError
from harness.hydra_entry import hydra_entry
from harness.planner import Plan, plan_deployment
from harness.planner.projection import measured_phi, projection_rows
from harness.planner.sweeps import split_sweep, threshold_sweep


def _compose(overrides: list[str], config_name: str = "config") -> DictConfig:
    try:
        return compose(config_name=config_name, overrides=overrides)
    except (HydraException, OmegaConfBaseException) as err:
        # Hydra's message: the problem, then the available options, then the search path (dropped).
        lines = [ln.strip() for ln in str(err).split("Config search path")[0].splitlines() if ln.strip()]
        detail = lines[0] + (f" ({' '.join(lines[1:])})" if len(lines) > 1 else "") if lines else type(err).__name__
        raise InputError(f"cannot compose config with {' '.join(overrides)}: {detail}") from err


def _task_overrides(group: str) -> list[str]:
    """This run's command-line overrides, minus any choice of `group` (we set it per plan)."""
    task = list(HydraConfig.get().overrides.task)
    return [o for o in task if o.lstrip("+~").split("=", 1)[0] != group]


def _without(overrides: Sequence[str], group: str) -> list[str]:
    return [o for o in overrides if o.lstrip("+~").split("=", 1)[0] != group]


_GROUPS = ("deployment", "model", "hardware")  # the group options the planner reads beside the run's config


class Variants:
    """The `deployment`, `model` and `hardware` nodes the planner needs, each as composing the run's
    overrides with `<group>=<name>` would give it, from ONE composition (~0.5 s; each full
    composition costs about as much, and the planner needs ~20 of them).

    Every option of the three groups is attached under its own key (`+deployment@deployment.<name>=
    <name>`), and the command line's `deployment.*` / `model.*` / `hardware.*` settings are applied
    to each. When something else changes those nodes (an experiment or local file that sets them,
    a nested group choice such as `router@deployment.router=...`, or an unknown experiment), or the
    one composition fails, each node is composed on its own instead, as before (exact, slower).
    """

    def __init__(self, base: Sequence[str], experiment: str | None, known_experiment: bool = True) -> None:
        self.base = [str(o) for o in base]
        touched = set(_GROUPS) if not known_experiment else self._touched_by_overrides() | _sets_groups(experiment)
        self._fast_groups = [g for g in _GROUPS if g not in touched]
        self._nodes: dict[str, DictConfig] | None = None
        self._cache: dict[tuple[str, str], DictConfig] = {}

    def _touched_by_overrides(self) -> set[str]:
        """Groups an override reaches other than by `<group>=<name>` or `<group>.<key>=<value>`."""
        touched = set()
        for line in self.base:
            key = line.lstrip("+~").split("=", 1)[0]
            group, _, package = key.partition("@")
            head = group.split("/")[0].split(".")[0]
            if package.split(".")[0] in _GROUPS:  # e.g. router@deployment.router=...
                touched.add(package.split(".")[0])
            if head in _GROUPS and ("/" in group or key == "hardware"):  # deployment/router=..., hardware=...
                touched.add(head)
        return touched

    def _compose_all(self) -> dict[str, DictConfig] | None:
        from hydra.core.global_hydra import GlobalHydra

        loader = GlobalHydra.instance().config_loader()
        lines: list[str] = []
        for group in self._fast_groups:
            options = [o for o in loader.get_group_options(group) if not o.startswith("base_")]
            lines += [f"+{group}@{group}.{o}={o}" for o in options]
            for line in self.base:  # the command line's settings of this group, on every option
                prefix, _, rest = line.partition(group + ".")
                if prefix.strip("+~") == "" and rest:
                    lines += [f"{prefix}{group}.{o}.{rest}" for o in options]
        try:
            composed = compose(config_name=None, overrides=lines)
        except Exception:  # Hydra also raises AssertionError here: a setting that does not fit every option;
            return None  # the per-option compositions below apply it as before, or report it
        return {group: composed[group] for group in self._fast_groups}

    def get(self, group: str, name: str) -> DictConfig:
        """The `group` node of the run's config with `group=name`."""
        if group in self._fast_groups and self._nodes is None:
            self._nodes = self._compose_all()
            if self._nodes is None:
                self._fast_groups = []
        if self._nodes is not None and group in self._nodes and name in self._nodes[group]:
            node: DictConfig = self._nodes[group][name]
            return node
        key = (group, name)
        if key not in self._cache:
            if group == "hardware":
                self._cache[key] = _compose([], config_name=f"hardware/{name}").hardware
            else:
                self._cache[key] = _compose([*_without(self.base, group), f"{group}={name}"])[group]
        return self._cache[key]


def _sets_groups(experiment: str | None) -> set[str]:
    """Which of the deployment/model/hardware nodes the experiment file (or conf/local/default.yaml)
    sets itself, beyond choosing an option (each planned option of those is composed with it)."""
    from omegaconf import OmegaConf

    from harness.resources import conf_dir

    files = [conf_dir() / "local" / "default.yaml"]
    if experiment:
        files.append(conf_dir() / "experiment" / f"{experiment}.yaml")
        if not files[-1].is_file():
            return set(_GROUPS)  # not a file of conf/ (a store or search-path config): don't guess
    touched: set[str] = set()
    for path in files:
        if not path.is_file():
            continue
        doc = OmegaConf.to_container(OmegaConf.load(path))
        if not isinstance(doc, dict):
            continue
        touched |= {g for g in _GROUPS if g in doc}
        for entry in doc.get("defaults") or []:
            text = " ".join(entry.keys()) if isinstance(entry, dict) else str(entry)
            touched |= {g for g in _GROUPS if f"{g}/" in text or f"@{g}" in text}
    return touched


def _run_variants(base: Sequence[str]) -> Variants:
    """Variants for the overrides of this Hydra run (the experiment read from its choices)."""
    try:
        choices = HydraConfig.get().runtime.choices
    except ValueError:  # not inside a Hydra run: don't guess the experiment
        return Variants(base, None, known_experiment=False)
    return Variants(base, choices.get("experiment"))


def plan_all(cfg: DictConfig, base: Sequence[str] | None = None, names: Sequence[str] | None = None,
             variants: Variants | None = None) -> tuple[dict[str, Plan], dict[str, Any]]:
    """Plan each deployment of `names` (default planner.deployments), each composed from the `base`
    overrides (default: this run's command line) plus `deployment=<name>`; returns plans and the
    plan.json document."""
    from harness.workload import input_length_distribution, mean_output_tokens

    values, weights = input_length_distribution(cfg.workload)
    l_out = mean_output_tokens(cfg.workload)
    base = _task_overrides("deployment") if base is None else _without(base, "deployment")
    variants = variants or _run_variants(base)
    plans: dict[str, Plan] = {}
    paper: dict[str, dict[str, Any]] = {}
    for name in names if names is not None else cfg.planner.deployments:
        dep = variants.get("deployment", str(name))
        plans[str(name)] = plan_deployment(dep, cfg.model, cfg.link, cfg.planner, values, weights, l_out)
        if plans[str(name)].service_time != "representative":  # the paper's formula too, for Table 6
            planner = cast(dict[str, Any], OmegaConf.to_container(cfg.planner, resolve=True)) | \
                {"service_time": "representative"}
            paper[str(name)] = plan_deployment(dep, cfg.model, cfg.link, planner, values, weights, l_out).to_dict()
    doc: dict[str, Any] = {name: plan.to_dict() for name, plan in plans.items()}
    for name, rep in paper.items():
        doc[name] |= {f"representative_{k}": v for k, v in rep.items()
                      if isinstance(v, (int, float)) and not isinstance(v, bool)}
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


def projection(cfg: DictConfig, plans: dict[str, Plan], base: Sequence[str] | None = None,
               variants: Variants | None = None) -> pd.DataFrame:
    """Eq. 2 rows: measured Phi_kv of each projection model, and this model's own profile."""
    proj = cfg.planner.projection
    gpus, gpi, lengths = list(proj.gpus), int(proj.gpus_per_instance), list(proj.lengths_tokens)
    task = list(base) if base is not None else list(HydraConfig.get().overrides.task)
    variants = variants or _run_variants(task)
    rows: list[dict[str, Any]] = []
    for name in proj.models:
        model_cfg = variants.get("model", str(name))
        measured = measured_phi(model_cfg)
        if measured is None:
            raise InputError(f"planner.projection.models: model {name} has no kv_throughput table")
        phi, table = measured
        rows += projection_rows(str(name), phi, lengths, gpus, gpi, f"measured: {table.get('provenance', '')}",
                                str(table.get("hardware")))
    for dep_name, plan in plans.items():
        dep = variants.get("deployment", dep_name)
        if dep.prfaas is None:
            continue
        prof = build_profile(cfg.model, dep.prfaas.hardware, gpus_per_instance=int(proj.gpus_per_instance),
                             slo_tokens_per_s=float(cfg.planner.slo_tokens_per_s))
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


def _measured_rows(model: dict[str, Any], hardware: str) -> list[dict[str, Any]]:
    """Measured Phi_kv points of a model config: its `kv_throughput` table (Table 3: Phi only), and
    where it has both `measured_kv` and a measured prefill table on `hardware` (Table 5), the
    lengths they share, with S_kv and T_prefill."""
    rows: list[dict[str, Any]] = []
    common = {"model": model["name"], "family": model.get("family"), "source": "measured"}
    table = model.get("kv_throughput") or {}
    for tokens, gbps in zip(table.get("tokens") or [], table.get("gbps") or [], strict=False):
        rows.append({**common, "hardware": table.get("hardware"), "gpus_per_instance": table.get("gpus_per_instance"),
                     "input_tokens": float(tokens), "kv_bytes": math.nan, "prefill_s": math.nan,
                     "phi_kv_gbps": float(gbps), "provenance": table.get("provenance", "")})
    kv = model.get("measured_kv") or {}
    entry = (model.get("profiles") or {}).get(hardware) or {}
    prefill = entry.get("prefill") or {}
    if kv and prefill.get("kind") == "table":
        seconds = dict(zip(prefill.get("tokens") or [], prefill.get("seconds") or [], strict=False))
        for tokens, mib in zip(kv.get("tokens") or [], kv.get("mib") or [], strict=False):
            if tokens in seconds and seconds[tokens] > 0:
                size = float(mib) * _MIB
                rows.append({**common, "hardware": hardware, "gpus_per_instance": entry.get("gpus_per_instance"),
                             "input_tokens": float(tokens), "kv_bytes": size, "prefill_s": float(seconds[tokens]),
                             "phi_kv_gbps": size * _GBIT / float(seconds[tokens]),
                             "provenance": f"S_kv {kv.get('provenance', '')}; "
                                           f"T_prefill {prefill.get('provenance', '')}"})
    return rows


def kv_throughput(cfg: DictConfig, base: Sequence[str] | None = None, hardware: str = KV_HARDWARE,
                  variants: Variants | None = None) -> tuple[pd.DataFrame, list[str]]:
    """Phi_kv(l) = S_kv(l) / T_prefill(l) (Eq. 1) of every model config on `hardware` at
    planner.projection.gpus_per_instance GPUs: cost-model curves (source `costmodel`) and the configs'
    measured points (source `measured`). Returns the frame and notes on models that were skipped."""
    from harness.costmodel import build_profile
    from harness.costmodel.nodes import plain

    task = list(base) if base is not None else list(HydraConfig.get().overrides.task)
    gpus = int(cfg.planner.projection.gpus_per_instance)
    variants = variants or _run_variants(task)
    hw_cfg = variants.get("hardware", hardware)
    lengths = np.asarray(KV_LENGTHS_TOKENS, dtype=float)
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for name in _model_options():
        model_cfg = variants.get("model", name)
        model = plain(model_cfg, "model")
        rows += _measured_rows(model, hardware)
        try:
            prof = build_profile(model_cfg, hw_cfg, gpus_per_instance=gpus,
                                 slo_tokens_per_s=float(cfg.planner.slo_tokens_per_s))
        except InputError as err:
            notes.append(f"plan_kv_throughput: no cost-model curve for {name}: {err}")
            continue
        kv_bytes = np.asarray(prof.kv_bytes(lengths), dtype=float)
        prefill_s = prof.prefill_s_vec(lengths)
        provenance = f"T_prefill {prof.provenance.get('prefill_s', '')}; S_kv {prof.provenance.get('kv_bytes', '')}"
        for l, size, t in zip(lengths, kv_bytes, prefill_s, strict=True):
            rows.append({"model": prof.model, "family": model.get("family"), "hardware": prof.hardware,
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


@hydra_entry(config_name="config")
def main(cfg: DictConfig) -> dict[str, Any]:
    variants = _run_variants(HydraConfig.get().overrides.task)  # one composition for every option planned
    plans, doc = plan_all(cfg, variants=variants)
    proj = projection(cfg, plans, variants=variants)
    kv, notes = kv_throughput(cfg, variants=variants)
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    write(out_dir, plans, doc, proj, kv)
    print(table(doc))
    for note in notes:
        print(note)
    print(f"wrote {out_dir / 'plan.json'} and plan_sweep_threshold / plan_sweep_split / plan_projection / "
          f"plan_kv_throughput .parquet")
    return doc


def sweep_overrides(config: DictConfig) -> tuple[list[str], dict[str, list[str]]]:
    """(fixed overrides, {swept key: values}) of a multirun, combined as Hydra's basic sweeper does:
    `hydra.sweeper.params` first, then the command line; the later override of a key wins."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = config.hydra.sweeper.get("params") or {}
    lines = [f"{key}={value}" for key, value in params.items()] + [str(o) for o in config.hydra.overrides.task]
    final = {o.get_key_element(): o for o in OverridesParser.create().parse_overrides(lines)}
    fixed = [str(o.input_line) for o in final.values() if not o.is_sweep_override()]
    swept = {key: (list(o.sweep_string_iterator()) if o.is_discrete_sweep() and "glob(" not in str(o.input_line)
                   else [])
             for key, o in final.items() if o.is_sweep_override()}
    return fixed, swept


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
            fixed, swept = sweep_overrides(config)
            names = self.deployments or swept.get("deployment") or _fixed_choice(fixed, config)
            cfg = _compose(fixed)
            variants = Variants(fixed, config.hydra.runtime.choices.get("experiment"))
            plans, doc = plan_all(cfg, fixed, names, variants)
            proj = projection(cfg, plans, fixed, variants)
            kv, notes = kv_throughput(cfg, fixed, variants=variants) if self.kv_table else (None, [])
            write(sweep_dir, plans, doc, proj, kv)
        except InputError as err:
            sys.stderr.write(f"error: planner for {sweep_dir}: {err}\n")
            return
        for note in notes:
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
