"""The sweep report's tables: per deployment (capacity, ratio, TTFT), per sweep point, per run, printed.

A sweep that varies parameters other than the offered load (numeric override columns that differ
between runs) gets the sweep table instead of the per-deployment table (see harness.analysis.report).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from harness.analysis import runs as r
from harness.analysis.runs import capacity_rps

BASELINE = "homogeneous_pd"
LOAD_PARAM = "loadgen.rate_rps"
# A point counts as saturated (its steady throughput is a capacity) when its offered load is at
# least this much above the throughput it sustained, or it was closed-loop (offered_rps = inf).
_SATURATION_EXCESS = 1.05


def first_value(rows: pd.DataFrame, column: str) -> float:
    """The first row's `column` as a float; NaN when the rows are empty, lack it, or it is not a number."""
    if rows.empty or column not in rows.columns:
        return math.nan
    value = pd.to_numeric(rows[column], errors="coerce").iloc[0]
    return float(value) if pd.notna(value) else math.nan


def deployment_table(report: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """Per deployment: capacity (max steady throughput), ratio to the baseline, planner Lambda_max,
    TTFT at the lowest load and near capacity, and steady egress near capacity."""
    names = r.deployments(report)
    caps = {n: capacity_rps(report, n) for n in names}
    rows = []
    for name in names:
        runs = r.deployment_runs(report, name)
        low, cap = r.select_runs(runs, "lowest_load", caps[name]), r.select_runs(runs, "near_capacity", caps[name])
        egress = first_value(cap, "steady_egress_gbps_mean")
        row = {"deployment": name, "runs": len(runs), "capacity_rps": caps[name]}
        if baseline in caps:
            row[f"x_{baseline}"] = caps[name] / caps[baseline] if caps[baseline] else math.nan
        row.update({
            "plan_lambda_max_rps": first_value(runs, "plan_lambda_max_rps"),  # NaN where the runs lack it
            "low_load_rps": first_value(low, "load_rps"),
            "ttft_mean_s@low": first_value(low, "ttft_mean_s"),
            "ttft_p90_s@low": first_value(low, "ttft_p90_s"),
            "cap_load_rps": first_value(cap, "load_rps"),
            "ttft_mean_s@cap": first_value(cap, "ttft_mean_s"),
            "ttft_p90_s@cap": first_value(cap, "ttft_p90_s"),
            "egress_gbps@cap": egress if math.isfinite(egress) else first_value(cap, "egress_gbps_mean"),
        })
        rows.append(row)
    table = pd.DataFrame(rows)
    if "plan_lambda_max_rps" in table and table["plan_lambda_max_rps"].isna().all():
        table = table.drop(columns="plan_lambda_max_rps")
    return table


RUN_COLUMNS = ("deployment", "load_rps", "steady_throughput_rps", "completed", "failed", "ttft_mean_s", "ttft_p90_s",
               "egress_gbps_mean", "run_name")


def runs_table(report: pd.DataFrame, params: Sequence[str] = ()) -> pd.DataFrame:
    """One line per run, ordered by deployment, then the swept parameters, then load."""
    cols = [c for c in RUN_COLUMNS if c in report.columns]
    cols = [cols[0], *params, *cols[1:]] if cols and cols[0] == "deployment" else [*params, *cols]
    order = {n: i for i, n in enumerate(r.deployments(report))}
    out = report[cols].copy()
    out["_d"] = out["deployment"].map(order)
    keys = ["_d", *params, *(["load_rps"] if "load_rps" in out.columns else [])]
    return out.sort_values(keys, kind="stable").drop(columns="_d").reset_index(drop=True)


def _override_keys(report: pd.DataFrame) -> list[str]:
    """Override columns of the report: the keys of the runs' `.hydra/overrides.yaml` (re-read when the
    run dirs are still there), and any dotted column (a report moved away from its runs)."""
    keys: dict[str, None] = {}
    if "run_dir" in report.columns:
        for run_dir in report["run_dir"].dropna().unique():
            keys.update(dict.fromkeys(r.read_overrides(str(run_dir))))
    keys.update(dict.fromkeys(c for c in report.columns if "." in c))
    return [k for k in keys if k in report.columns and k not in ("deployment", LOAD_PARAM)]


def sweep_params(report: pd.DataFrame) -> list[str]:
    """What the sweep varied besides the deployment and the offered load: the override columns with
    more than one value (numeric, like `link.capacity_gbps`, or not, like `workload` or `faults`)."""
    return [k for k in _override_keys(report) if report[k].astype("string").nunique(dropna=True) > 1]


def numeric_params(report: pd.DataFrame, params: Sequence[str]) -> list[str]:
    """The swept parameters whose every value is a number (the ones a figure can put on an axis)."""
    out = []
    for p in params:
        values = report[p].dropna()
        if not pd.api.types.is_bool_dtype(values) and pd.to_numeric(values, errors="coerce").notna().all():
            out.append(p)
    return out


def _numeric(report: pd.DataFrame, params: Sequence[str]) -> pd.DataFrame:
    out = report.copy()
    for p in numeric_params(report, params):
        out[p] = pd.to_numeric(out[p], errors="coerce").astype(float)
    return out


SWEEP_COLUMNS = ("ttft_mean_s", "ttft_p90_s", "goodput_rps", "slo_attainment")
CONFIG_COLUMNS = ("threshold_tokens", "n_prefill", "n_decode", "offload_fraction")


def sweep_table(report: pd.DataFrame, params: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per deployment and sweep point (the swept parameters' values).

    steady_rps: the highest steady throughput among the point's runs; `saturated` says whether it is
    a capacity (some run offered more than it sustained, or ran closed-loop: `closed_loop`).
    plan_lambda_max_rps: the planner's Lambda_max at that point (the runs' `plan_*` columns). TTFT,
    goodput and SLO attainment: the point's lowest-load run. The configuration the run used
    (threshold, split, offload share) and the steady egress: the run that set steady_rps.
    """
    params = sweep_params(report) if params is None else list(params)
    frame = _numeric(report, params)
    rows = []
    for key, runs in frame.groupby(["deployment", *params], sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        steady = pd.to_numeric(runs["steady_throughput_rps"], errors="coerce")
        best = runs.loc[[steady.idxmax()]] if steady.notna().any() else runs.iloc[[0]]
        low = r.select_runs(runs, "lowest_load", math.nan) if "load_rps" in runs.columns else runs.iloc[[0]]
        offered = pd.to_numeric(runs.get("offered_rps", pd.Series(math.nan, index=runs.index)), errors="coerce")
        load = pd.to_numeric(runs.get("load_rps", pd.Series(math.nan, index=runs.index)), errors="coerce")
        closed_loop = bool(np.isinf(offered).any())
        saturated = closed_loop or bool((load > _SATURATION_EXCESS * steady).any())
        row = dict(zip(["deployment", *params], key, strict=True))
        row.update({"runs": len(runs), "steady_rps": float(steady.max()) if steady.notna().any() else math.nan,
                    "saturated": saturated, "closed_loop": closed_loop,
                    "plan_lambda_max_rps": first_value(best, "plan_lambda_max_rps")})
        row.update({c: first_value(low, c) for c in SWEEP_COLUMNS})
        row.update({c: first_value(best, c) for c in CONFIG_COLUMNS})
        egress = first_value(best, "steady_egress_gbps_mean")
        row["egress_gbps"] = egress if math.isfinite(egress) else first_value(best, "egress_gbps_mean")
        rows.append(row)
    table = pd.DataFrame(rows)
    order = {n: i for i, n in enumerate(r.deployments(report))}
    table = table.assign(_d=table["deployment"].map(order)).sort_values(["_d", *params], kind="stable")
    # A configuration column that only repeats a swept one (threshold_tokens when t is swept) goes.
    echo = [c for c in CONFIG_COLUMNS if c in table.columns and any(
        p in numeric_params(table, params) and np.allclose(pd.to_numeric(table[c], errors="coerce").astype(float),
                                                           table[p].astype(float), equal_nan=True) for p in params)]
    return table.drop(columns=["_d", *echo]).dropna(axis=1, how="all").reset_index(drop=True)


def has_load_axis(report: pd.DataFrame, params: Sequence[str]) -> bool:
    """True when some deployment and sweep point was run at two or more offered loads."""
    if "load_rps" not in report.columns:
        return False
    frame = _numeric(report, params)
    counts = frame.groupby(["deployment", *params], dropna=False)["load_rps"].nunique()
    return bool((counts >= 2).any())


def _text(df: pd.DataFrame) -> str:
    return df.to_string(index=False, na_rep="-", float_format=lambda v: f"{v:.2f}")


def format_report(report: pd.DataFrame, baseline: str = BASELINE) -> str:
    """The printed tables: deployments (capacity, ratio, TTFT at low load / near capacity), or for a
    parameter sweep the sweep table; then the runs."""
    n_dep = len(r.deployments(report))
    params = sweep_params(report)
    runs = (f"runs (load_rps = offered rate, or measured arrival rate for native trace timing and closed loop)\n"
            f"{_text(runs_table(report, params))}")
    if params:
        head = (f"{len(report)} runs, {n_dep} deployment(s), swept: {', '.join(params)}; steady_rps = max steady "
                f"throughput of each point (its capacity where saturated), plan_lambda_max_rps = planner at that point")
        return f"{head}\n\n{_text(sweep_table(report, params))}\n\n{runs}"
    searched = "capacity_rps" in report.columns and bool(
        pd.to_numeric(report["capacity_rps"], errors="coerce").notna().any())
    how = ("the searched capacity (loadgen.rate_rps=max: the highest stable open-loop rate) where a deployment "
           "has one, else max steady throughput over its load sweep") if searched else \
        "max steady throughput over each load sweep"
    head = f"{len(report)} runs, {n_dep} deployment(s); capacity = {how}"
    return f"{head}\n\n{_text(deployment_table(report, baseline))}\n\n{runs}"
