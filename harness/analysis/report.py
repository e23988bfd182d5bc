"""The sweep report: every run's summary in one table, capacity per deployment, printed tables, figures.

Works from Parquet alone: point it at a results folder (a Hydra multirun, several of them, or a
single run) and it re-reads the summaries, writes `report.parquet` and the figures, and prints the
tables. Nothing is re-run.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis import runs as r
from harness.analysis.frames import write_parquet
from harness.analysis.metrics import capacity_rps

BASELINE = "homogeneous_pd"
PAPER_FILE = Path(__file__).resolve().parents[2] / "conf" / "gates" / "paper_table6.yaml"
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


def runs_table(report: pd.DataFrame) -> pd.DataFrame:
    """One line per run, ordered by deployment then load."""
    cols = [c for c in RUN_COLUMNS if c in report.columns]
    order = {n: i for i, n in enumerate(r.deployments(report))}
    out = report[cols].copy()
    out["_d"] = out["deployment"].map(order)
    return out.sort_values(["_d", "load_rps"], kind="stable").drop(columns="_d").reset_index(drop=True)


def _text(df: pd.DataFrame) -> str:
    return df.to_string(index=False, na_rep="-", float_format=lambda v: f"{v:.2f}")


def format_report(report: pd.DataFrame, baseline: str = BASELINE) -> str:
    """The printed tables: deployments (capacity, ratio, TTFT at low load / near capacity), then runs."""
    n_dep = len(r.deployments(report))
    head = f"{len(report)} runs, {n_dep} deployment(s); capacity = max steady throughput over each load sweep"
    return (f"{head}\n\n{_text(deployment_table(report, baseline))}\n\nruns (load_rps = offered rate, or "
            f"measured arrival rate for native trace timing)\n{_text(runs_table(report))}")


def cdf_runs(report: pd.DataFrame) -> tuple[float, dict[str, str]]:
    """(load, {deployment: run_dir}) for the TTFT CDFs: a load all deployments share, near a moderate
    share of the smallest capacity; each deployment's closest run when no load is common."""
    names = r.deployments(report)
    caps = [capacity_rps(report, n) for n in names]
    finite_caps = [c for c in caps if math.isfinite(c)]
    target = _MODERATE_LOAD_FRACTION * min(finite_caps) if finite_caps else 0.0
    common = set.intersection(*[set(np.round(r.deployment_runs(report, n)["load_rps"].dropna(), 6)) for n in names]) if names else set()
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
        for quantity, value in (("capacity_rps", capacity_rps(report, name)), ("ttft_mean_s", _value(low, "ttft_mean_s")),
                                ("ttft_p90_s", _value(low, "ttft_p90_s"))):
            rows.append({"deployment": name, "quantity": quantity, "source": "harness", "value": value})
    if not paper.empty:
        rows += [{**row, "source": "paper"} for row in paper.to_dict("records")]
    return pd.DataFrame(rows, columns=["deployment", "quantity", "source", "value"])


def write_figures(report: pd.DataFrame, out_dir: str | os.PathLike[str], roots: Sequence[str | os.PathLike[str]],
                  paper_file: str | os.PathLike[str] | None = PAPER_FILE) -> list[str]:
    """Write the sweep figures into out_dir; return one line per figure (written, or why skipped)."""
    from harness.analysis import plots

    out, notes = Path(out_dir), []

    def emit(name: str, fig: object) -> None:
        notes.append(f"wrote {plots.save(fig, out / name)}")  # type: ignore[arg-type]

    fig, ax = plots.new_axes()
    plots.throughput_vs_load(report, ax)
    emit("fig_throughput_vs_load.png", fig)
    fig, ax = plots.new_axes()
    plots.ttft_vs_load(report, ax)
    emit("fig_ttft_vs_load.png", fig)

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

    for file, fig_name, draw in (("plan_sweep_threshold.parquet", "fig_plan_threshold.png", plots.plan_threshold),
                                 ("plan_sweep_split.parquet", "fig_plan_split.png", plots.plan_split)):
        found = r.find_files(roots, file)
        if found:
            fig, ax = plots.new_axes()
            draw(pd.read_parquet(found[0]), ax)
            emit(fig_name, fig)
        else:
            notes.append(f"skipped {fig_name}: no {file}")
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
    if figures:
        lines += write_figures(report, out, dirs, paper_file)
    return report, f"{text}\n\n" + "\n".join(lines)
