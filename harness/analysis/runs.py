"""Find run directories under results folders and gather their summaries into one report frame.

A run directory is any folder holding `summary.parquet`. In a Hydra multirun each numbered job
folder is one, and its `.hydra/overrides.yaml` says which sweep point it was: those override values
become columns of the report (`loadgen.rate_rps`, `link.capacity_gbps`, ...), so a sweep can be
grouped by whatever it varied. Planner outputs (`plan.json`) are gathered the same way.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from harness.analysis.frames import read_table
from harness.analysis.metrics import _finite, _values
from harness.errors import InputError, choices

SUMMARY_FILE = "summary.parquet"
REQUESTS_FILE = "requests.parquet"
# A run killed before it wrote its summary leaves its records here (streamed as requests ended).
PARTS_DIR = REQUESTS_FILE + ".parts"
REPORT_FILE = "report.parquet"
PLAN_FILE = "plan.json"
# Columns every report has (collect adds them): what tells a report.parquet from another Parquet file.
REPORT_COLUMNS = ("deployment", "load_rps")
# Where a run is on its load axis: `at:` selectors of the report table and the gates.
SELECTORS = ("lowest_load", "highest_load", "near_capacity", "all")
# A run counts as "near capacity" when its load is at most this much above the measured capacity.
_NEAR_CAPACITY_SLACK = 1.02


def _natural_key(path: Path) -> list[Any]:
    return [int(tok) if tok.isdigit() else tok for tok in re.split(r"(\d+)", str(path))]


def find_run_dirs(roots: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Every directory under the roots (or a root itself) that holds summary.parquet, or (a run killed
    before it finished) its streamed records in requests.parquet.parts/, in natural order."""
    found: set[Path] = set()
    for root in map(Path, roots):
        if not root.exists():
            raise InputError(f"results directory {root} does not exist")
        for name in (SUMMARY_FILE, PARTS_DIR):
            for hit in root.rglob(name):
                if not any(part.startswith(".") or part.endswith(".parts")
                           for part in hit.relative_to(root).parts[:-1]):
                    found.add(hit.parent)
    return sorted(found, key=_natural_key)


def is_incomplete(run_dir: str | os.PathLike[str]) -> bool:
    """A run killed before it wrote its summary (only its streamed records are there)."""
    return not (Path(run_dir) / SUMMARY_FILE).is_file()


def incomplete_summary(run_dir: str | os.PathLike[str], analysis_cfg: Any = None) -> dict[str, Any]:
    """The summary row of a killed run, computed from the records it streamed (`incomplete` = True)."""
    from harness.analysis.frames import read_parquet, requests_frame
    from harness.analysis.summary import summarize

    path = Path(run_dir) / REQUESTS_FILE
    try:
        requests = requests_frame(read_parquet(path))
    except (OSError, ValueError) as err:
        raise InputError(f"{path}: cannot read the records of this incomplete run: {err}") from err
    meta: dict[str, Any] = {"incomplete": True}
    for key in ("deployment", "mode"):
        values = requests[key].dropna().unique() if key in requests.columns else []
        if len(values):
            meta[key] = str(values[0])
    return summarize(requests, None, meta, analysis_cfg)


def _scalar(text: str) -> Any:
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value if value is None or isinstance(value, (str, int, float, bool)) else text


def yaml_problem(err: yaml.YAMLError) -> str:
    """PyYAML's error as one line: `line L, column C: not valid YAML: <problem> (<context> from line L0)`; its own
    text spans lines (each mark prints the offending line and a caret under it)."""
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or " ".join(str(err).split())
    if problem.startswith("expected '<document start>'"):
        problem += ": a second document (JSON Lines?); the file must hold one"
    context, context_mark = getattr(err, "context", None), getattr(err, "context_mark", None)
    if context:
        problem += f" ({context}" + (f" from line {context_mark.line + 1}" if context_mark is not None else "") + ")"
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}not valid YAML: {problem}"


def read_yaml(path: Path, what: str) -> Any:
    """A YAML file's document; not YAML (or not text) is an InputError naming `what`, the file and the line."""
    try:
        return yaml.safe_load(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise InputError(f"{what} {path}: not a YAML text file (byte {err.start} is not UTF-8)") from err
    except yaml.YAMLError as err:
        raise InputError(f"{what} {path}, {yaml_problem(err)}") from err


def read_overrides(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Hydra's `.hydra/overrides.yaml` of a run as {key: typed value}; {} when the run has none."""
    path = Path(run_dir) / ".hydra" / "overrides.yaml"
    if not path.exists():
        return {}
    lines = read_yaml(path, "Hydra overrides") or []
    out: dict[str, Any] = {}
    for line in lines:
        text = str(line)
        if text.startswith("~") or "=" not in text:
            continue  # deletions carry no value
        key, value = text.split("=", 1)
        out[key.lstrip("+")] = _scalar(value)
    return out


def load_rps(frame: pd.DataFrame) -> pd.Series:
    """Each run's load: the offered rate, or the measured arrival rate for native trace timing."""
    offered = pd.to_numeric(frame.get("offered_rps", pd.Series(np.nan, index=frame.index)), errors="coerce")
    arrival = pd.to_numeric(frame.get("arrival_rps", pd.Series(np.nan, index=frame.index)), errors="coerce")
    return offered.where(np.isfinite(offered.astype(float)), arrival).astype(float)


def collect(roots: Iterable[str | os.PathLike[str]]) -> pd.DataFrame:
    """One row per run: its summary, its Hydra override values, `run_dir`, `run_name`, `load_rps`.

    With no run directory under the roots, a `report.parquet` found directly in a root is read instead
    (a report copied out of the results tree still gates and re-plots).
    """
    roots = [Path(r) for r in roots]
    rows = []
    for run_dir in find_run_dirs(roots):
        if is_incomplete(run_dir):
            if not any((run_dir / PARTS_DIR).glob("part-*.parquet")):
                # killed after it set up its records but before the first batch landed: nothing to report
                print(f"note: {run_dir}: killed before it recorded a request; not in the report", file=sys.stderr)
                continue
            row = incomplete_summary(run_dir)
        else:
            summary = read_table(run_dir / SUMMARY_FILE)
            if len(summary) != 1:
                raise InputError(f"{run_dir / SUMMARY_FILE}: expected one row, found {len(summary)}")
            # a value the run does not know is null in the file (Int64, boolean, string): None here, as a
            # row computed in memory has it
            row = {k: None if v is pd.NA else v for k, v in summary.iloc[0].to_dict().items()}
            row.setdefault("incomplete", False)
        for key, value in read_overrides(run_dir).items():
            row.setdefault(key, value)  # the measured summary wins over the requested value
        row["run_dir"] = str(run_dir.resolve())
        row["run_name"] = run_dir.name
        rows.append(row)
    if not rows:
        reports = [r / REPORT_FILE if r.is_dir() else r for r in map(Path, roots)]
        existing = [p for p in reports if p.is_file() and p.suffix == ".parquet"]
        if not existing:
            raise InputError(f"no run directory (a folder with {SUMMARY_FILE}) and no {REPORT_FILE} under "
                             f"{choices(roots)}")
        return pd.concat([read_report(p) for p in existing], ignore_index=True)
    report = pd.DataFrame(rows)
    report["load_rps"] = load_rps(report)
    return report


def read_report(path: str | os.PathLike[str]) -> pd.DataFrame:
    """A report.parquet written by `harness-report` (or the report callback); any other Parquet file (a run's
    summary.parquet or requests.parquet, a trace) is an InputError that says what is expected."""
    path = Path(path)
    report = read_table(path)
    missing = [c for c in REPORT_COLUMNS if c not in report.columns]
    if missing:
        hint = (f"; for this run give its folder {path.parent}"
                if path.name in (SUMMARY_FILE, REQUESTS_FILE) and (path.parent / SUMMARY_FILE).is_file() else "")
        raise InputError(f"{path}: not a sweep report (missing column(s) {choices(missing)}); expected a run "
                         f"directory (a folder with {SUMMARY_FILE}), a sweep directory or a {REPORT_FILE}{hint}")
    return report


def _plan_rows(obj: Any, name: str | None = None) -> list[dict[str, Any]]:
    """Accept the planner's plan.json shapes: {deployment: {...}}, {"deployments": ...}, [{...}], {...}."""
    if isinstance(obj, list):
        return [row for item in obj for row in _plan_rows(item)]
    if not isinstance(obj, Mapping):
        return []
    if "deployments" in obj:
        return _plan_rows(obj["deployments"])
    if "lambda_max_rps" in obj:
        row = {k: v for k, v in obj.items() if not isinstance(v, (Mapping, list))}
        row["deployment"] = row.get("deployment") or row.get("name") or name
        return [row]
    return [row for key, value in obj.items() if isinstance(value, Mapping) for row in _plan_rows(value, str(key))]


def collect_plans(roots: Iterable[str | os.PathLike[str]], report: pd.DataFrame | None = None) -> pd.DataFrame:
    """Planner outputs per deployment: plan.json files under the roots, else the summaries' plan_* columns."""
    rows: list[dict[str, Any]] = []
    for root in map(Path, roots):
        files = ([root] if root.is_file() and root.name == PLAN_FILE
                 else sorted(root.rglob(PLAN_FILE)) if root.is_dir() else [])
        for path in files:
            try:
                rows += [{**row, "plan_file": str(path)} for row in _plan_rows(json.loads(path.read_text()))]
            except json.JSONDecodeError as err:
                raise InputError(f"{path}: not JSON: {err}") from err
    plans = pd.DataFrame(rows)
    if report is not None and "deployment" in report.columns:
        cols = [c for c in report.columns if c.startswith("plan_") and c not in ("plan_file", "plan_deployment")]
        if cols:
            from_report = report[["deployment", *cols]].rename(columns=lambda c: c.removeprefix("plan_"))
            from_report = from_report.groupby("deployment", sort=False).first().reset_index()
            known = set(plans["deployment"]) if "deployment" in plans.columns else set()
            plans = pd.concat([plans, from_report[~from_report["deployment"].isin(known)]], ignore_index=True)
    if "deployment" in plans.columns:
        plans = plans.dropna(subset=["deployment"]).drop_duplicates("deployment", keep="first")
    return plans.reset_index(drop=True)


def deployment_runs(report: pd.DataFrame, deployment: str) -> pd.DataFrame:
    """The runs of one deployment, ordered by load."""
    rows = report[report["deployment"] == deployment]
    return rows.sort_values("load_rps", kind="stable") if "load_rps" in rows.columns else rows


def select_runs(rows: pd.DataFrame, at: str | float, capacity_rps: float) -> pd.DataFrame:
    """The run(s) of one deployment at a point of its load sweep.

    `lowest_load` / `highest_load`; `near_capacity`: the highest load not above the measured capacity
    (the heaviest load the deployment still keeps up with), else the lowest load; `all`; or a number:
    the run whose load is closest to it.
    """
    if rows.empty or at == "all":
        return rows
    loads = rows["load_rps"].to_numpy(dtype=float)
    order = np.argsort(np.where(np.isfinite(loads), loads, np.inf), kind="stable")
    if at == "lowest_load":
        return rows.iloc[[order[0]]]
    if at == "highest_load":
        finite = [i for i in order if np.isfinite(loads[i])]
        return rows.iloc[[finite[-1] if finite else order[-1]]]
    if at == "near_capacity":
        ok = [i for i in order if math.isfinite(capacity_rps) and loads[i] <= capacity_rps * _NEAR_CAPACITY_SLACK]
        return rows.iloc[[ok[-1] if ok else order[0]]]
    if isinstance(at, (int, float)) and not isinstance(at, bool):
        return rows.iloc[[int(np.nanargmin(np.abs(loads - float(at))))]] if np.isfinite(loads).any() else rows.iloc[[0]]
    raise InputError(f"at={at!r} is not a load selector; valid: {choices(SELECTORS)} or a load in req/s")


def deployments(report: pd.DataFrame) -> list[str]:
    """Deployment names in first-seen order."""
    return list(dict.fromkeys(str(d) for d in report["deployment"].dropna())) if "deployment" in report else []


def read_requests(run_dir: str | os.PathLike[str]) -> pd.DataFrame | None:
    """A run's requests.parquet (or, for a killed run, its streamed parts), or None when neither is
    there (a report moved away from its runs)."""
    from harness.analysis.frames import read_parquet

    path = Path(str(run_dir)) / REQUESTS_FILE
    if not path.is_file() and not (path.parent / PARTS_DIR).is_dir():
        return None
    try:
        return read_parquet(path)
    except InputError:  # an empty parts folder
        return None


def read_timeseries(run_dir: str | os.PathLike[str]) -> pd.DataFrame | None:
    path = Path(str(run_dir)) / "timeseries.parquet"
    return read_table(path) if path.is_file() else None


def find_files(roots: Sequence[str | os.PathLike[str]], name: str) -> list[Path]:
    """Files called `name` in or under the roots (planner sweep tables and the like)."""
    out: list[Path] = []
    for root in map(Path, roots):
        out += [root] if root.is_file() and root.name == name else sorted(root.rglob(name)) if root.is_dir() else []
    return out


def capacity_rps(report: pd.DataFrame, deployment: str) -> float:
    """Capacity of one deployment: the searched capacity where a run has one (`loadgen.rate_rps=max`: the
    highest stable open-loop rate, harness/runs/capacity.py), else its highest steady throughput over the runs
    of a load sweep."""
    rows = report[report["deployment"] == deployment]
    searched = _finite(_values(rows, "capacity_rps"))
    if searched.size:
        return float(searched.max())
    v = _finite(_values(rows, "steady_throughput_rps"))
    return float(v.max()) if v.size else float("nan")
