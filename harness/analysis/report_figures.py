"""Which figures a run and a sweep report get: which runs each figure draws, and why a figure is skipped.

Throughput and TTFT vs load, TTFT CDFs at a common load, PrfaaS egress near capacity, Table 6 beside
the paper, the planner's Fig. 5 curves with the emulated points on them, the KV-throughput figure,
and per swept parameter a line figure (a heatmap when two vary).
"""

from __future__ import annotations

import math
import os
import textwrap
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from harness.analysis import runs as r
from harness.analysis.frames import read_table
from harness.analysis.report_tables import first_value, has_load_axis, numeric_params, sweep_params, sweep_table
from harness.analysis.runs import capacity_rps

# conf/ ships inside an installed package (harness/conf), else it is the source tree's (see harness.resources).
PAPER_FILE = next((p for p in (Path(__file__).resolve().parents[n] / "conf" / "gates" / "paper_table6.yaml"
                               for n in (1, 2)) if p.is_file()),
                  Path(__file__).resolve().parents[2] / "conf" / "gates" / "paper_table6.yaml")
# The TTFT CDFs compare deployments at one common load: this share of the smallest capacity.
_MODERATE_LOAD_FRACTION = 0.6


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
                                ("ttft_mean_s", first_value(low, "ttft_mean_s")),
                                ("ttft_p90_s", first_value(low, "ttft_p90_s"))):
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
        elif len(categories) > 1:
            notes.append(f"skipped fig_timeline.png: a timeline compares runs over exactly 1 swept category besides "
                         f"the deployment, the sweep varies {', '.join(categories)}")
    return notes


def _deployment_figures(report: pd.DataFrame, out: Path, emit: Callable[[str, object], None],
                        paper_file: str | os.PathLike[str] | None) -> list[str]:
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
        # the run's folder names its overrides: on lines of their own, wrapped at the commas, so a long one fits
        run = textwrap.fill(Path(pick[1]).name.replace(",", ", "), width=100)
        plots.egress_timeseries(ts, ax, title=f"Cross-DC egress: {pick[0]} near capacity\n{run}")
        emit("fig_egress_timeseries.png", fig)
    else:
        notes.append("skipped fig_egress_timeseries.png: no PrfaaS-PD run with a timeseries.parquet")

    t6 = table6_rows(report, paper_file)
    if (t6["source"] == "paper").any():
        emit("fig_table6.png", plots.table6_comparison(t6))
    else:
        notes.append(f"skipped fig_table6.png: no paper reference file ({paper_file})")
    return notes


def write_run_figures(run_dir: str | os.PathLike[str], requests: pd.DataFrame, ts: pd.DataFrame,
                      summary: Mapping[str, object]) -> list[Path]:
    """Per-run figures: the TTFT CDF, and the egress time series when the run sent KV cross-DC."""
    from harness.analysis import plots

    run_dir = Path(run_dir)
    name = str(summary.get("deployment") or "run")
    fig, ax = plots.new_axes()
    plots.ttft_cdf({name: requests}, ax, title=f"TTFT CDF: {name}")
    written = [plots.save(fig, run_dir / "fig_ttft_cdf.png")]
    offload = summary.get("offload_fraction")
    if len(ts) and isinstance(offload, float) and offload > 0:
        fig, ax = plots.new_axes((9, 4))
        plots.egress_timeseries(ts, ax, title=f"Cross-DC egress: {name}")
        written.append(plots.save(fig, run_dir / "fig_egress.png"))
    return written
