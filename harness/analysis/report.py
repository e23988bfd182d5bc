"""The sweep report: every run's summary in one table, capacity per deployment, printed tables, figures.

Works from Parquet alone: point it at a results folder (a Hydra multirun, several of them, or a
single run) and it re-reads the summaries, writes `report.parquet` and the figures, and prints the
tables. Nothing is re-run.

A sweep that varies parameters other than the offered load (`deployment.router.threshold_tokens`,
`link.capacity_gbps`, `workload.arrivals.cv`, ...: numeric override columns that differ between
runs) gets a sweep table instead of the per-deployment table: one row per deployment and sweep
point, its steady throughput (the capacity where the point was saturated) beside the planner's
Lambda_max for that point, and a line figure per parameter (a heatmap when two vary).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis import runs as r
from harness.analysis.frames import read_table, write_parquet
from harness.analysis.metrics import capacity_rps

BASELINE = "homogeneous_pd"
LOAD_PARAM = "loadgen.rate_rps"
# A point counts as saturated (its steady throughput is a capacity) when its offered load is at
# least this much above the throughput it sustained, or it was closed-loop (offered_rps = inf).
_SATURATION_EXCESS = 1.05
# conf/ ships inside an installed package (harness/conf), else it is the source tree's (see harness.resources).
PAPER_FILE = next((p for p in (Path(__file__).resolve().parents[n] / "conf" / "gates" / "paper_table6.yaml"
                               for n in (1, 2)) if p.is_file()),
                  Path(__file__).resolve().parents[2] / "conf" / "gates" / "paper_table6.yaml")
# The TTFT CDFs compare deployments at one common load: this share of the smallest capacity.
_MODERATE_LOAD_FRACTION = 0.6


def build_report(dirs: Sequence[str | os.PathLike[str]]) -> pd.DataFrame:
    """One row per run found under the dirs (see runs.collect)."""
    return r.collect(dirs)


def _value(rows: pd.DataFrame, column: str) -> float:
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
        egress = _value(cap, "steady_egress_gbps_mean")
        row = {"deployment": name, "runs": len(runs), "capacity_rps": caps[name]}
        if baseline in caps:
            row[f"x_{baseline}"] = caps[name] / caps[baseline] if caps[baseline] else math.nan
        row.update({
            "plan_lambda_max_rps": _value(runs, "plan_lambda_max_rps") if "plan_lambda_max_rps" in runs else math.nan,
            "low_load_rps": _value(low, "load_rps"),
            "ttft_mean_s@low": _value(low, "ttft_mean_s"),
            "ttft_p90_s@low": _value(low, "ttft_p90_s"),
            "cap_load_rps": _value(cap, "load_rps"),
            "ttft_mean_s@cap": _value(cap, "ttft_mean_s"),
            "ttft_p90_s@cap": _value(cap, "ttft_p90_s"),
            "egress_gbps@cap": egress if math.isfinite(egress) else _value(cap, "egress_gbps_mean"),
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
                    "plan_lambda_max_rps": _value(best, "plan_lambda_max_rps")})
        row.update({c: _value(low, c) for c in SWEEP_COLUMNS})
        row.update({c: _value(best, c) for c in CONFIG_COLUMNS})
        egress = _value(best, "steady_egress_gbps_mean")
        row["egress_gbps"] = egress if math.isfinite(egress) else _value(best, "egress_gbps_mean")
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
    head = f"{len(report)} runs, {n_dep} deployment(s); capacity = max steady throughput over each load sweep"
    return f"{head}\n\n{_text(deployment_table(report, baseline))}\n\n{runs}"


def cdf_runs(report: pd.DataFrame) -> tuple[float, dict[str, str]]:
    """(load, {deployment: run_dir}) for the TTFT CDFs: a load all deployments share, near a moderate
    share of the smallest capacity; each deployment's closest run when no load is common."""
    names = r.deployments(report)
    caps = [capacity_rps(report, n) for n in names]
    finite_caps = [c for c in caps if math.isfinite(c)]
    target = _MODERATE_LOAD_FRACTION * min(finite_caps) if finite_caps else 0.0
    common = set.intersection(*[set(np.round(r.deployment_runs(report, n)["load_rps"].dropna(), 6))
                                for n in names]) if names else set()
    if common:
        target = min(common, key=lambda x: (abs(x - target), x))
    chosen = {n: str(r.select_runs(r.deployment_runs(report, n), float(target), math.nan)["run_dir"].iloc[0])
              for n in names if "run_dir" in report.columns and not r.deployment_runs(report, n).empty}
    return float(target), chosen


def egress_run(report: pd.DataFrame) -> tuple[str, str] | None:
    """(deployment, run_dir) for the egress figure: prfaas_pd (or the deployment that splits traffic
    between clusters) at its run nearest capacity."""
    names, name = r.deployments(report), None
    if "prfaas_pd" in names:
        name = "prfaas_pd"
    elif "offload_fraction" in report.columns:
        split = pd.to_numeric(report["offload_fraction"], errors="coerce").groupby(report["deployment"]).mean()
        name = next((n for n in names if 0 < split.get(n, 0) < 1), None)
    if name is None or "run_dir" not in report.columns:
        return None
    run = r.select_runs(r.deployment_runs(report, name), "near_capacity", capacity_rps(report, name))
    return name, str(run["run_dir"].iloc[0])


def table6_rows(report: pd.DataFrame, paper_file: str | os.PathLike[str] | None) -> pd.DataFrame:
    """Harness and paper values of capacity and lowest-load TTFT mean/P90, long format for the figure."""
    from harness.analysis.gates import load_gate, reference_targets

    paper = reference_targets(load_gate(paper_file)) if paper_file and Path(paper_file).is_file() else pd.DataFrame()
    rows = []
    for name in r.deployments(report):
        runs = r.deployment_runs(report, name)
        low = r.select_runs(runs, "lowest_load", math.nan)
        for quantity, value in (("capacity_rps", capacity_rps(report, name)),
                                ("ttft_mean_s", _value(low, "ttft_mean_s")),
                                ("ttft_p90_s", _value(low, "ttft_p90_s"))):
            rows.append({"deployment": name, "quantity": quantity, "source": "harness", "value": value})
    if not paper.empty:
        rows += [{**row, "source": "paper"} for row in paper.to_dict("records")]
    return pd.DataFrame(rows, columns=["deployment", "quantity", "source", "value"])


def emulated_points(report: pd.DataFrame, curve: pd.DataFrame, axis: str) -> pd.DataFrame:
    """Emulated capacity (max steady throughput) on a planner curve's axis (`threshold_tokens` or
    `n_prefill`), from the runs whose configuration is the curve's: same deployment, and the
    curve's fixed split (threshold curves) or fixed threshold (split curves). Empty when the sweep
    varied anything else (a bandwidth sweep's runs are not on a 100 Gbps curve)."""
    cols = ["deployment", axis, "capacity_rps"]
    params = sweep_params(report)
    axis_param = {"threshold_tokens": "deployment.router.threshold_tokens", "n_prefill": "deployment.local.n_prefill"}
    needed = {"deployment", axis, "steady_throughput_rps", "n_prefill", "n_decode", "threshold_tokens"}
    if any(p != axis_param[axis] for p in params) or not needed <= set(report.columns) or "deployment" not in curve:
        return pd.DataFrame(columns=cols)
    picked = []
    for name, rows in curve.groupby("deployment", sort=False):
        runs = report[report["deployment"] == name]
        if axis == "threshold_tokens":
            split = set(zip(rows["n_prefill"].astype(int), rows["n_decode"].astype(int), strict=True))
            keep = [(int(a), int(b)) in split for a, b in zip(runs["n_prefill"], runs["n_decode"], strict=True)]
        else:
            t = pd.to_numeric(rows["threshold_tokens"], errors="coerce").iloc[0]
            run_t = pd.to_numeric(runs["threshold_tokens"], errors="coerce")
            keep = (run_t.isna() if pd.isna(t) else (run_t - t).abs() < 0.5).to_list()
        picked.append(runs[keep])
    chosen = pd.concat(picked) if picked else report.iloc[:0]
    if chosen.empty:
        return pd.DataFrame(columns=cols)
    chosen = chosen.assign(**{axis: pd.to_numeric(chosen[axis], errors="coerce"),
                              "capacity_rps": pd.to_numeric(chosen["steady_throughput_rps"], errors="coerce")})
    return chosen.groupby(["deployment", axis], sort=False)["capacity_rps"].max().reset_index()


def _slug(param: str) -> str:
    return param.split(".")[-1]


def write_figures(report: pd.DataFrame, out_dir: str | os.PathLike[str], roots: Sequence[str | os.PathLike[str]],
                  paper_file: str | os.PathLike[str] | None = PAPER_FILE) -> list[str]:
    """Write the sweep figures into out_dir; return one line per figure (written, or why skipped)."""
    from harness.analysis import plots

    out, notes = Path(out_dir), []
    params = sweep_params(report)

    def emit(name: str, fig: object) -> None:
        notes.append(f"wrote {plots.save(fig, out / name)}")  # type: ignore[arg-type]

    if has_load_axis(report, params):
        fig, ax = plots.new_axes()
        plots.throughput_vs_load(report, ax)
        emit("fig_throughput_vs_load.png", fig)
        fig, ax = plots.new_axes()
        plots.ttft_vs_load(report, ax)
        emit("fig_ttft_vs_load.png", fig)
    else:
        notes.append("skipped fig_throughput_vs_load.png, fig_ttft_vs_load.png: no deployment ran at two offered loads")

    if params:
        notes.append(f"skipped fig_ttft_cdf.png, fig_egress_timeseries.png, fig_table6.png: they compare deployments "
                     f"at one configuration and this sweep varies {', '.join(params)}")
    else:
        notes += _deployment_figures(report, out, emit, paper_file)

    for file, fig_name, draw, axis in (
            ("plan_sweep_threshold.parquet", "fig_plan_threshold.png", plots.plan_threshold, "threshold_tokens"),
            ("plan_sweep_split.parquet", "fig_plan_split.png", plots.plan_split, "n_prefill")):
        found = r.find_files(roots, file)
        curve = read_table(found[0]) if found else None
        if curve is not None and len(curve):
            emit(fig_name, plots.plan_panels(curve, draw, emulated_points(report, curve, axis)))
        else:
            notes.append(f"skipped {fig_name}: no {file}" + (" rows" if found else ""))

    found = r.find_files(roots, "plan_kv_throughput.parquet")
    if found:
        fig, ax = plots.new_axes((9, 5.5))
        plots.kv_throughput(read_table(found[0]), ax)
        emit("fig_kv_throughput.png", fig)
    else:
        notes.append("skipped fig_kv_throughput.png: no plan_kv_throughput.parquet "
                     "(harness-plan or the PlanCallback writes it)")

    numeric = numeric_params(report, params)
    if params:
        table = sweep_table(report, params)
        for param in numeric:
            fig, ax = plots.new_axes()
            plots.sweep_lines(table, param, ax, keys=params)
            emit(f"fig_sweep_{_slug(param)}.png", fig)
            fig, ax = plots.new_axes()
            plots.sweep_ttft(table, param, ax, keys=params)
            emit(f"fig_sweep_{_slug(param)}_ttft.png", fig)
        if len(params) == 2 and len(numeric) == 2:
            emit("fig_sweep_heatmap.png", plots.sweep_heatmap(table, params[0], params[1]))
        elif len(params) >= 2:
            notes.append(f"skipped fig_sweep_heatmap.png: a heatmap needs exactly 2 swept numeric parameters, the "
                         f"sweep varies {', '.join(params)}")
        if not numeric:
            notes.append(f"skipped fig_sweep_*.png: no swept parameter is numeric ({', '.join(params)}); see the table")
        categories = [p for p in params if p not in numeric and p != "deployment"]
        if len(categories) == 1 and "run_dir" in report:
            from harness.analysis.timeline import timeline

            emit("fig_timeline.png", timeline(report, categories[0]))
    return notes


def _deployment_figures(report: pd.DataFrame, out: Path, emit, paper_file) -> list[str]:
    """TTFT CDFs at a common load, PrfaaS egress near capacity, Table 6: deployments side by side."""
    from harness.analysis import plots

    notes: list[str] = []
    load, chosen = cdf_runs(report)
    requests = {n: df for n, d in chosen.items() if (df := r.read_requests(d)) is not None}
    if requests:
        fig, ax = plots.new_axes()
        plots.ttft_cdf(requests, ax, title=f"TTFT CDF at ≈{load:.2f} req/s")
        emit("fig_ttft_cdf.png", fig)
    else:
        notes.append("skipped fig_ttft_cdf.png: no requests.parquet next to the summaries")

    pick = egress_run(report)
    ts = r.read_timeseries(pick[1]) if pick else None
    if pick and ts is not None and len(ts):
        fig, ax = plots.new_axes((9, 4))
        plots.egress_timeseries(ts, ax, title=f"Cross-DC egress: {pick[0]} near capacity ({Path(pick[1]).name})")
        emit("fig_egress_timeseries.png", fig)
    else:
        notes.append("skipped fig_egress_timeseries.png: no PrfaaS-PD run with a timeseries.parquet")

    t6 = table6_rows(report, paper_file)
    if (t6["source"] == "paper").any():
        emit("fig_table6.png", plots.table6_comparison(t6))
    else:
        notes.append(f"skipped fig_table6.png: no paper reference file ({paper_file})")
    return notes


def write_report(dirs: Sequence[str | os.PathLike[str]], out_dir: str | os.PathLike[str] | None = None,
                 figures: bool = True, paper_file: str | os.PathLike[str] | None = PAPER_FILE,
                 baseline: str = BASELINE) -> tuple[pd.DataFrame, str]:
    """Build the report from the dirs, write report.parquet (and figures) into out_dir (default: the
    first dir); return the report and the printable text."""
    report = build_report(dirs)
    out = Path(out_dir) if out_dir is not None else Path(dirs[0])
    if out.suffix == ".parquet":
        out = out.parent
    out.mkdir(parents=True, exist_ok=True)
    path = write_parquet(report, out / r.REPORT_FILE)
    text = format_report(report, baseline)
    lines = [f"report: {path}"]
    if "incomplete" in report.columns:
        for run_dir in report.loc[report["incomplete"].fillna(False).astype(bool), "run_dir"]:
            lines.append(f"incomplete run (stopped before it wrote its summary; read from its "
                         f"{r.PARTS_DIR}/): {run_dir}")
    if figures:
        lines += write_figures(report, out, dirs, paper_file)
    return report, f"{text}\n\n" + "\n".join(lines)
