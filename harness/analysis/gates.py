"""Perf gates: a YAML list of checks on a sweep report (and planner outputs), each pass or fail.

A check names a metric, a deployment, optionally another deployment to divide by (`relative_to`),
where on the load sweep to read it (`at`), and bounds (`min`, `max`, or `target` with `rel_tol` /
`abs_tol`). `min`/`max` may also name a numeric report column of the same run (`max: link_capacity_gbps`);
anything else (`min: abc`, a plan or whole-sweep check with a column, `min` above `max`) is bad input.
"""

from __future__ import annotations

import difflib
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.metrics import METRICS
from harness.analysis.runs import SELECTORS, capacity_rps, deployment_runs, deployments, read_yaml, select_runs
from harness.errors import InputError, choices

# Metrics computed per deployment from its whole sweep (not read off one run).
SWEEP_METRICS = ("capacity_rps",)
# The planner's plan.json keys (design.md); any numeric key of a plan is accepted too.
PLAN_METRICS = ("lambda_max_rps", "theta_prfaas_rps", "theta_pd_p_rps", "theta_pd_d_rps", "threshold_tokens",
                "n_prfaas", "n_prefill", "n_decode", "offload_fraction", "egress_gbps")
CHECK_KEYS = ("name", "metric", "deployment", "relative_to", "at", "source", "min", "max", "target", "rel_tol",
              "abs_tol", "note", "kind", "service_time")
SOURCES = ("report", "plan")
# What a check's pass means. prediction: an output the mechanism produces from independent inputs;
# calibration: an output some input was fitted to (it holds by construction, or nearly); invariant: a
# property that holds whatever the numbers (routing rules, conservation, no failures below capacity).
KINDS = ("prediction", "calibration", "invariant")
SERVICE_TIMES = ("representative", "expected")


@dataclass(frozen=True)
class Check:
    index: int
    metric: str
    deployment: str | None = None
    relative_to: str | None = None
    at: str | float | None = None
    source: str | None = None
    min: float | str | None = None
    max: float | str | None = None
    target: float | None = None
    rel_tol: float | None = None
    abs_tol: float | None = None
    name: str | None = None
    note: str | None = None
    kind: str | None = None
    service_time: str | None = None  # plan checks: read the plan made with this planner.service_time

    def label(self) -> str:
        text = self.name or f"{self.metric} {self.deployment or ''}".strip()
        if not self.name and self.relative_to:
            text += f" / {self.relative_to}"
        if not self.name and self.at is not None:
            text += f" @{self.at}"
        return text

    def bound_text(self) -> str:
        parts = []
        if self.min is not None:
            parts.append(f">= {_fmt(self.min)}")
        if self.max is not None:
            parts.append(f"<= {_fmt(self.max)}")
        if self.target is not None:
            tol = f"±{self.rel_tol:.0%}" if self.rel_tol is not None else f"±{_fmt(self.abs_tol)}"
            parts.append(f"{_fmt(self.target)} {tol}")
        return ", ".join(parts)


@dataclass
class Gate:
    name: str
    path: str
    checks: list[Check] = field(default_factory=list)
    description: str = ""


@dataclass
class Result:
    check: Check
    value: float
    passed: bool
    detail: str = ""


def _fmt(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.4g}"


def _number(raw: Any, where: str, key: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise InputError(f"{where}: key {key!r} must be a number, got {raw!r}")
    return float(raw)


def load_gate(path: str | os.PathLike[str]) -> Gate:
    """Parse and validate a gate file; every problem names the check index and the key."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"gate file {path} does not exist")
    doc = read_yaml(path, "gate file")
    if not isinstance(doc, dict) or not isinstance(doc.get("checks"), list) or not doc["checks"]:
        raise InputError(f"gate file {path}: needs a non-empty list under key 'checks'")
    unknown_top = set(doc) - {"name", "description", "checks"}
    if unknown_top:
        raise InputError(f"gate file {path}: unknown key(s) {choices(sorted(unknown_top))}; "
                         f"valid: name, description, checks")
    checks = [_parse_check(raw, i, f"gate file {path}, check {i}") for i, raw in enumerate(doc["checks"])]
    return Gate(name=str(doc.get("name", path.stem)), path=str(path), checks=checks,
                description=str(doc.get("description", "")))


def _parse_check(raw: Any, index: int, where: str) -> Check:
    if not isinstance(raw, dict):
        raise InputError(f"{where}: must be a mapping with keys {choices(CHECK_KEYS)}, got {raw!r}")
    for key in raw:
        if key not in CHECK_KEYS:
            raise InputError(f"{where}: unknown key {key!r}; valid: {choices(CHECK_KEYS)}")
    if not isinstance(raw.get("metric"), str):
        raise InputError(f"{where}: key 'metric' is required (a metric name)")
    kw: dict[str, Any] = {"index": index, "metric": raw["metric"]}
    for key in ("deployment", "relative_to", "name", "note"):
        if raw.get(key) is not None:
            kw[key] = str(raw[key])
    if raw.get("source") is not None and raw["source"] not in SOURCES:
        raise InputError(f"{where}: key 'source' is {raw['source']!r}; valid: {choices(SOURCES)}")
    kw["source"] = raw.get("source")
    if raw.get("kind") is not None and raw["kind"] not in KINDS:
        raise InputError(f"{where}: key 'kind' is {raw['kind']!r}; valid: {choices(KINDS)}")
    kw["kind"] = raw.get("kind")
    if raw.get("service_time") is not None and raw["service_time"] not in SERVICE_TIMES:
        raise InputError(f"{where}: key 'service_time' is {raw['service_time']!r}; valid: {choices(SERVICE_TIMES)}")
    kw["service_time"] = raw.get("service_time")
    at = raw.get("at")
    if isinstance(at, str) and at not in SELECTORS:
        raise InputError(f"{where}: key 'at' is {at!r}; valid: {choices(SELECTORS)} or a load in req/s")
    kw["at"] = _number(at, where, "at") if at is not None and not isinstance(at, str) else at
    for key in ("min", "max"):
        if raw.get(key) is not None:
            kw[key] = raw[key] if isinstance(raw[key], str) else _number(raw[key], where, key)
    for key in ("target", "rel_tol", "abs_tol"):
        if raw.get(key) is not None:
            kw[key] = _number(raw[key], where, key)
    if kw.get("min") is None and kw.get("max") is None and kw.get("target") is None:
        raise InputError(f"{where}: needs a bound: 'min', 'max' or 'target'")
    low, high = kw.get("min"), kw.get("max")
    if isinstance(low, float) and isinstance(high, float) and low > high:
        raise InputError(f"{where}: key 'min' ({_fmt(low)}) is above key 'max' ({_fmt(high)}): no value can pass")
    for key in ("min", "max"):
        if isinstance(kw.get(key), str) and (kw["metric"] in SWEEP_METRICS or kw["source"] == "plan"):
            what = f"{kw['metric']} is a whole-sweep metric" if kw["metric"] in SWEEP_METRICS else "a plan check"
            raise InputError(f"{where}: key {key!r} is {kw[key]!r}, a report column, but {what} (no run to read "
                             f"the column from); give a number")
    if kw.get("target") is not None and kw.get("rel_tol") is None and kw.get("abs_tol") is None:
        raise InputError(f"{where}: key 'target' needs 'rel_tol' or 'abs_tol'")
    if (kw.get("rel_tol") is not None or kw.get("abs_tol") is not None) and kw.get("target") is None:
        raise InputError(f"{where}: key 'rel_tol'/'abs_tol' needs 'target'")
    return Check(**kw)


def _slack(check: Check, value: float, row: pd.Series | None) -> float:
    """Smallest margin over the check's bounds (negative: violated; NaN value: -inf)."""
    if not math.isfinite(value):
        return -math.inf
    margins = []
    for key, sign in (("min", 1.0), ("max", -1.0)):
        bound = getattr(check, key)
        if bound is None:
            continue
        if isinstance(bound, str):
            bound = float(row[bound]) if row is not None and bound in row.index else math.nan
        margins.append(sign * (value - bound) if math.isfinite(bound) else -math.inf)
    if check.target is not None:
        tol = check.abs_tol if check.abs_tol is not None else abs(check.target) * float(check.rel_tol or 0.0)
        margins.append(tol - abs(value - check.target) + 1e-12 * max(1.0, abs(check.target)))
    return min(margins)


def valid_metrics(report: pd.DataFrame, plans: pd.DataFrame) -> list[str]:
    numeric = [c for c in report.columns if pd.api.types.is_numeric_dtype(report[c])]
    plan = [c for c in plans.columns if pd.api.types.is_numeric_dtype(plans[c])]
    return sorted(set(METRICS) | set(SWEEP_METRICS) | set(numeric) | set(PLAN_METRICS) | set(plan))


def _source(check: Check, report: pd.DataFrame, plans: pd.DataFrame) -> str:
    if check.source:
        return check.source
    if check.metric in SWEEP_METRICS or check.metric in METRICS or check.metric in report.columns:
        return "report"
    if check.metric in PLAN_METRICS or check.metric in plans.columns:
        return "plan"
    raise InputError(f"gate check {check.index}: key 'metric' is {check.metric!r}; valid: "
                     f"{choices(valid_metrics(report, plans))}")


def evaluate(gate: Gate, report: pd.DataFrame, plans: pd.DataFrame | None = None) -> list[Result]:
    """Evaluate every check of the gate on a report (one row per run) and planner outputs."""
    plans = plans if plans is not None else pd.DataFrame()
    _check_column_bounds(gate, report, plans)
    return [_evaluate(check, report, plans) for check in gate.checks]


def _numeric_column(report: pd.DataFrame, column: str) -> bool:
    values = report[column].dropna()
    return not pd.api.types.is_bool_dtype(values) and bool(pd.to_numeric(values, errors="coerce").notna().all())


def _check_column_bounds(gate: Gate, report: pd.DataFrame, plans: pd.DataFrame) -> None:
    """A `min`/`max` that is not a number must name a numeric column of the report, read from the same run: an
    InputError naming the gate file, the check and the key before any check is evaluated (not a failed check)."""
    numeric: list[str] | None = None
    for check in gate.checks:
        for key in ("min", "max"):
            bound = getattr(check, key)
            if not isinstance(bound, str):
                continue
            where = f"gate file {gate.path}, check {check.index} ({check.label()})"
            if _source(check, report, plans) == "plan":
                raise InputError(f"{where}: key {key!r} is {bound!r}, a report column, but the metric is read from "
                                 f"the plan (no run to read the column from); give a number")
            if numeric is None:
                numeric = [str(c) for c in report.columns if _numeric_column(report, c)]
            if bound not in numeric:
                close = difflib.get_close_matches(bound, numeric, n=1)
                raise InputError(f"{where}: key {key!r} is {bound!r}, neither a number nor a numeric column of the "
                                 f"report" + (f" (did you mean {close[0]}?)" if close else "")
                                 + f"; numeric columns: {choices(sorted(numeric))}")


def _deployment(check: Check, names: list[str]) -> str:
    if check.deployment is not None:
        return check.deployment
    if len(names) == 1:
        return names[0]
    raise InputError(f"gate check {check.index}: key 'deployment' is required when the data holds several "
                     f"deployments; valid: {choices(names)}")


def _evaluate(check: Check, report: pd.DataFrame, plans: pd.DataFrame) -> Result:
    source = _source(check, report, plans)
    if source == "plan":
        names = [str(d) for d in plans["deployment"]] if "deployment" in plans.columns else []
        value, detail = _plan_value(check, plans, _deployment(check, names) if names else check.deployment)
        if check.relative_to is not None and math.isfinite(value):
            base, base_detail = _plan_value(check, plans, check.relative_to)
            value, detail = (value / base, detail) if base else (math.nan, base_detail)
        return Result(check, value, _slack(check, value, None) >= 0, detail)
    name = _deployment(check, deployments(report))
    if check.metric in SWEEP_METRICS:
        if check.at is not None:
            raise InputError(f"gate check {check.index}: key 'at' does not apply to {check.metric} "
                             f"(a whole-sweep metric); remove it")
        value, detail = _capacity(report, name)
        if check.relative_to is not None and math.isfinite(value):
            base, base_detail = _capacity(report, check.relative_to)
            value, detail = (value / base, detail) if base else (math.nan, base_detail)
        return Result(check, value, _slack(check, value, None) >= 0, detail)
    return _run_check(check, report, name)


def _capacity(report: pd.DataFrame, name: str) -> tuple[float, str]:
    value = capacity_rps(report, name) if "steady_throughput_rps" in report.columns else math.nan
    return value, "" if math.isfinite(value) else f"no runs with a steady throughput for {name!r}"


def _plan_value(check: Check, plans: pd.DataFrame, name: str | None) -> tuple[float, str]:
    if plans.empty or "deployment" not in plans.columns:
        return math.nan, "no planner output (plan.json or plan_* summary columns)"
    rows = plans[plans["deployment"] == name]
    if rows.empty:
        return math.nan, f"no plan for deployment {name!r}; planned: {choices(plans['deployment'])}"
    metric = check.metric
    made_with = rows["service_time"].iloc[0] if "service_time" in rows.columns else None
    if check.service_time is not None and made_with != check.service_time:
        metric = f"{check.service_time}_{check.metric}"  # plan.json's second plan (harness.plan.plan_all)
    if metric not in rows.columns:
        return math.nan, f"plan of {name!r} has no key {metric!r}"
    value = pd.to_numeric(rows[metric], errors="coerce").iloc[0]
    origin = rows["plan_file"].iloc[0] if "plan_file" in rows.columns and pd.notna(rows["plan_file"].iloc[0]) else None
    where = f"plan: {origin}" if origin else "plan: summaries' plan_* columns"
    if metric != check.metric:
        where += f" ({check.service_time} service times)"
    return (float(value), where) if pd.notna(value) else (math.nan, f"plan of {name!r}: {metric} is null")


def _run_check(check: Check, report: pd.DataFrame, name: str) -> Result:
    at = check.at if check.at is not None else "all"
    if check.relative_to is not None and at == "all":
        raise InputError(f"gate check {check.index}: key 'relative_to' needs 'at' to pick one run per deployment; "
                         f"valid: {choices(s for s in SELECTORS if s != 'all')} or a load in req/s")
    runs = select_runs(deployment_runs(report, name), at, capacity_rps(report, name))
    if runs.empty:
        return Result(check, math.nan, False,
                      f"no runs of deployment {name!r}; present: {choices(deployments(report))}")
    base = math.nan
    if check.relative_to is not None:
        base_runs = select_runs(deployment_runs(report, check.relative_to), at, capacity_rps(report, check.relative_to))
        if base_runs.empty:
            return Result(check, math.nan, False, f"no runs of deployment {check.relative_to!r}")
        base = _row_value(base_runs.iloc[0], check.metric)
    worst: tuple[float, float, pd.Series] | None = None
    for _, row in runs.iterrows():
        value = _row_value(row, check.metric)
        if check.relative_to is not None:
            value = value / base if base else math.nan
        slack = _slack(check, value, row)
        if worst is None or slack < worst[0]:
            worst = (slack, value, row)
    assert worst is not None  # runs is non-empty
    slack, value, row = worst
    where = f"{row.get('run_name', '')} load {_fmt(row.get('load_rps', math.nan))} req/s"
    if len(runs) > 1:
        where = f"worst of {len(runs)} runs: {where}"
    return Result(check, value, slack >= 0, where)


def _row_value(row: pd.Series, metric: str) -> float:
    value = pd.to_numeric(pd.Series([row.get(metric, np.nan)]), errors="coerce").iloc[0]
    return float(value) if pd.notna(value) else math.nan


def format_results(gate: Gate, results: list[Result]) -> str:
    """The gate's table, predictions first, then calibration and invariant checks (one line per check:
    index, kind, check, value, bound, PASS/FAIL, where), then a count per kind and a verdict."""
    order = {kind: i for i, kind in enumerate(KINDS)}
    ordered = sorted(results, key=lambda r: (order.get(r.check.kind or "", len(KINDS)), r.check.index))
    rows = [{"#": r.check.index, "kind": r.check.kind or "unmarked", "check": r.check.label(),
             "value": _fmt(r.value), "bound": r.check.bound_text(), "result": "PASS" if r.passed else "FAIL",
             "detail": r.detail} for r in ordered]
    frame = pd.DataFrame(rows)
    for col in ("kind", "check", "bound", "detail"):  # text reads better left-aligned
        width = max(frame[col].str.len().max(), len(col))
        frame[col] = frame[col].str.ljust(width)
    table = frame.to_string(index=False, justify="left")
    counts = []
    for kind in (*KINDS, None):
        mine = [r for r in results if r.check.kind == kind]
        if mine:
            counts.append(f"{kind or 'unmarked'} {sum(r.passed for r in mine)}/{len(mine)}")
    failed = [r for r in results if not r.passed]
    verdict = f"gate {gate.name}: {len(results) - len(failed)}/{len(results)} checks passed"
    verdict += f"; FAILED: {', '.join(f'#{r.check.index} {r.check.label()}' for r in failed)}" if failed else ""
    return f"{table}\nby kind: {', '.join(counts)} passed\n{verdict}"


def reference_targets(gate: Gate) -> pd.DataFrame:
    """Paper reference values of a gate (rows deployment, quantity, value) for the Table 6 figure:
    un-divided `target` checks of capacity_rps, and of ttft_mean_s / ttft_p90_s at the lowest load."""
    rows = []
    for c in gate.checks:
        if c.target is None or c.relative_to is not None or c.deployment is None or c.source == "plan":
            continue
        if c.metric == "capacity_rps" or (c.metric in ("ttft_mean_s", "ttft_p90_s") and c.at == "lowest_load"):
            rows.append({"deployment": c.deployment, "quantity": c.metric, "value": c.target})
    return pd.DataFrame(rows, columns=["deployment", "quantity", "value"])
