"""The sweep report: every run's summary in one table, capacity per deployment, printed tables, figures.

Works from Parquet alone: point it at a results folder (a Hydra multirun, several of them, or a
single run) and it re-reads the summaries, writes `report.parquet` and the figures, and prints the
tables. Nothing is re-run.

A sweep that varies parameters other than the offered load (`deployment.router.threshold_tokens`,
`link.capacity_gbps`, `workload.arrivals.cv`, ...: numeric override columns that differ between
runs) gets a sweep table instead of the per-deployment table: one row per deployment and sweep
point, its steady throughput (the capacity where the point was saturated) beside the planner's
Lambda_max for that point, and a line figure per parameter (a heatmap when two vary).

The tables are in harness/analysis/report_tables.py, the figures in harness/analysis/report_figures.py;
their public names are importable from here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pandas as pd

from harness.analysis import runs as r
from harness.analysis.frames import summary_frame, write_parquet
from harness.analysis.report_figures import (
    PAPER_FILE,
    cdf_runs,
    egress_run,
    emulated_points,
    table6_rows,
    write_figures,
)
from harness.analysis.report_tables import (
    BASELINE,
    CONFIG_COLUMNS,
    LOAD_PARAM,
    RUN_COLUMNS,
    SWEEP_COLUMNS,
    deployment_table,
    format_report,
    has_load_axis,
    numeric_params,
    runs_table,
    sweep_params,
    sweep_table,
)
from harness.errors import InputError, choices

__all__ = [
    "BASELINE", "CONFIG_COLUMNS", "LOAD_PARAM", "PAPER_FILE", "RUN_COLUMNS", "SWEEP_COLUMNS", "build_report",
    "cdf_runs", "deployment_table", "egress_run", "emulated_points", "format_report", "has_load_axis",
    "numeric_params", "runs_table", "sweep_params", "sweep_table", "table6_rows", "write_figures", "write_report",
]


def build_report(dirs: Sequence[str | os.PathLike[str]]) -> pd.DataFrame:
    """One row per run found under the dirs (see runs.collect)."""
    return r.collect(dirs)


def _folder(path: str | os.PathLike[str]) -> Path:
    """A report's folder: a `.parquet` path stands for the folder that holds it."""
    path = Path(path)
    return path.parent if path.suffix == ".parquet" else path


def new_report_dir(parent: str | os.PathLike[str] = ".", now: datetime | None = None) -> Path:
    """A folder for a combined report that does not exist yet: `report_<YYYYmmdd-HHMMSS>` under parent
    (`_2`, `_3`, ... appended when taken)."""
    base = Path(parent) / f"report_{(now or datetime.now()).strftime('%Y%m%d-%H%M%S')}"
    out, k = base, 1
    while out.exists():
        k += 1
        out = base.with_name(f"{base.name}_{k}")
    return out


def report_dir(dirs: Sequence[str | os.PathLike[str]], out_dir: str | os.PathLike[str] | None,
               run_dirs: Sequence[Path] = ()) -> Path:
    """Where the report goes. One DIR: --out, else that DIR (its own report, rewritten). Several DIRs:
    --out, else a new `report_<timestamp>` folder in the current directory; never one of the DIRs or
    of the run directories under them (a sweep's own report.parquet is not replaced by a combined
    one: an InputError before anything is written)."""
    inputs = list(dict.fromkeys(_folder(d).resolve() for d in dirs))
    if len(inputs) <= 1:
        return _folder(out_dir if out_dir is not None else dirs[0])
    if out_dir is None:
        return new_report_dir()
    out = _folder(out_dir)
    taken = {*inputs, *(Path(d).resolve() for d in run_dirs)}
    if out.resolve() in taken:
        raise InputError(f"--out {out_dir}: is one of the {len(inputs)} DIRs (or a run directory in them); the "
                         f"combined report never replaces an input's own report.parquet: give a new folder")
    return out


def write_report(dirs: Sequence[str | os.PathLike[str]], out_dir: str | os.PathLike[str] | None = None,
                 figures: bool = True, paper_file: str | os.PathLike[str] | None = PAPER_FILE,
                 baseline: str = BASELINE, require_baseline: bool = False) -> tuple[pd.DataFrame, str]:
    """Build the report from the dirs, write report.parquet (and figures) into out_dir (default: the
    dir when there is one, else a new folder in the current directory: `report_dir`); return the report
    and the printable text. With require_baseline (a baseline the user chose), a baseline that is not a
    deployment of the report is an InputError, before anything is written."""
    report = build_report(dirs)
    present = r.deployments(report)
    if require_baseline and baseline not in present:
        raise InputError(f"--baseline {baseline}: not a deployment in the report; present: {choices(present)}")
    run_dirs = [Path(d) for d in report["run_dir"].dropna()] if "run_dir" in report.columns else []
    out = report_dir(dirs, out_dir, run_dirs)
    out.mkdir(parents=True, exist_ok=True)
    path = write_parquet(summary_frame(report), out / r.REPORT_FILE)  # the summaries' declared dtypes
    text = format_report(report, baseline)
    lines = [f"report: {path}"]
    if "incomplete" in report.columns:
        for run_dir in report.loc[report["incomplete"].fillna(False).astype(bool), "run_dir"]:
            lines.append(f"incomplete run (stopped before it wrote its summary; read from its "
                         f"{r.PARTS_DIR}/): {run_dir}")
    if figures:
        lines += write_figures(report, out, dirs, paper_file)
    return report, f"{text}\n\n" + "\n".join(lines)
