"""Capacity as the highest sustainable rate: a search on open-loop runs (`loadgen.rate_rps=max`).

A closed loop's throughput depends on how many requests it keeps in flight wherever which requests
are in flight changes what the system does (prefix reuse, turns held back for the turn they continue).
The paper's Lambda_max is instead the highest arrival rate the system sustains. So:

1. a closed-loop run at the automatic in-flight count (`rate_rps=inf`) gives a quick estimate C;
2. open-loop runs of the workload's own arrival pattern, scaled to a rate r, are judged stable or not
   (harness/analysis/stability.py): first at C, then stepping up or down until a stable rate lo and an
   unstable rate hi bracket the capacity;
3. bisection until hi / lo - 1 <= `tolerance`; the capacity is lo, the highest rate judged stable.

Every probe is one sim run of the same requests (the same seed) at its rate, recorded in
`capacity_search.parquet` with its verdict and why. The run directory's other files are the open-loop
run at the capacity. Sim mode only: each probe is a whole run, which in wall-clock time would take as
long as the workload's span.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.analysis.stability import Verdict, judge
from harness.errors import InputError

MAX = "max"
STEPS = (1.1, 1.25, 1.5, 2.0, 3.0, 5.0)  # outward steps from the quick estimate while no bracket is found


@dataclass(frozen=True)
class SearchSettings:
    tolerance: float = 0.02  # stop when hi / lo - 1 <= this
    max_runs: int = 20  # probes at most (the closed-loop estimate not counted)
    min_goodput: float = 0.99
    alpha: float = 0.01
    min_requests: int = 20000  # a generated workload offers at least this many requests per probe

    @classmethod
    def from_cfg(cls, cfg: Any) -> SearchSettings:
        node = cfg.loadgen.get("capacity_search") or {}
        keys = ("tolerance", "max_runs", "min_goodput", "alpha", "min_requests")
        values = {k: node.get(k, getattr(cls, k)) for k in keys}
        checks = {"tolerance": 0 < float(values["tolerance"]) < 1, "max_runs": int(values["max_runs"]) >= 2,
                  "min_goodput": 0 < float(values["min_goodput"]) <= 1, "alpha": 0 < float(values["alpha"]) < 1,
                  "min_requests": int(values["min_requests"]) >= 1}
        valid = {"tolerance": "in (0, 1)", "max_runs": "an integer >= 2", "min_goodput": "in (0, 1]",
                 "alpha": "in (0, 1)", "min_requests": "an integer >= 1"}
        for key, ok in checks.items():
            if not ok:
                raise InputError(f"loadgen.capacity_search.{key}={values[key]!r} must be {valid[key]}")
        return cls(float(values["tolerance"]), int(values["max_runs"]), float(values["min_goodput"]),
                   float(values["alpha"]), int(values["min_requests"]))


@dataclass
class Probe:
    rate_rps: float
    verdict: Verdict
    wall_s: float


@dataclass
class Search:
    closed_loop_rps: float
    probes: list[Probe] = field(default_factory=list)
    lo_rps: float = math.nan  # highest stable rate
    hi_rps: float = math.nan  # lowest unstable rate

    def frame(self) -> pd.DataFrame:
        rows = [{"probe": i, "rate_rps": p.rate_rps, "stable": p.verdict.stable, "reason": p.verdict.reason,
                 "goodput_ratio": p.verdict.goodput_ratio, "trend_tau": p.verdict.trend_tau,
                 "trend_p": p.verdict.trend_p, "arrivals_in_window": p.verdict.arrivals_in_window,
                 "in_system_start": p.verdict.in_system_start, "in_system_end": p.verdict.in_system_end,
                 "window_start_s": p.verdict.window_start_s, "window_end_s": p.verdict.window_end_s,
                 "wall_s": p.wall_s} for i, p in enumerate(self.probes)]
        return pd.DataFrame(rows).astype({"stable": "boolean", "reason": "string"}) if rows else pd.DataFrame()


def is_search(cfg: Any) -> bool:
    return isinstance(cfg.loadgen.get("rate_rps"), str) and cfg.loadgen.rate_rps.strip().lower() == MAX


def sized(cfg: Any, min_requests: int) -> Any:
    """The config with a generated workload raised to at least `min_requests` requests (a trace, which has
    a `path`, offers its own rows)."""
    n = cfg.workload.get("num_requests")
    if cfg.workload.get("path") is not None or not isinstance(n, int) or n >= min_requests:
        return cfg
    out = copy.deepcopy(cfg)
    out.workload.num_requests = min_requests
    return out


def with_rate(cfg: Any, rate: float | None) -> Any:
    """A copy of the config offering `rate` (inf: the closed-loop estimate), without figures or a progress bar."""
    out = copy.deepcopy(cfg)
    out.loadgen.rate_rps = rate
    out.loadgen.progress = False
    return out


class Interrupted(Exception):
    """A signal stopped one of the search's runs: the search ends there, with that run's result."""

    def __init__(self, result: Any) -> None:
        super().__init__("interrupted")
        self.result = result
        self.search: Search | None = None  # what the search had found (set on the way out)


def _sim(cfg: Any) -> Any:
    """One in-memory sim run; a signal that stops it stops the search (`Interrupted`)."""
    from harness.runs.sim import run_sim

    result = run_sim(cfg)
    if result.meta.get("interrupted"):
        raise Interrupted(result)
    return result


def _judge_run(cfg: Any, settings: SearchSettings) -> Verdict:
    frame = _sim(cfg).requests
    arrival = frame["arrival_s"].to_numpy(dtype=float)
    finish = frame["finish_s"].to_numpy(dtype=float, na_value=np.nan)
    error = frame["error"] if "error" in frame.columns else pd.Series([None] * len(frame))
    failed = (error.notna() & (error.astype("string").fillna("") != "")).to_numpy(dtype=bool)
    ended = np.where(np.isfinite(finish), finish, np.nan)
    return judge(arrival, ended, failed, min_goodput=settings.min_goodput, alpha=settings.alpha)


def closed_loop_estimate(cfg: Any) -> float:
    """The closed loop's steady throughput at the automatic (or given) in-flight count."""
    from harness.analysis.metrics import steady_throughput_rps

    result = _sim(with_rate(cfg, math.inf))
    return float(steady_throughput_rps(result.requests, float(cfg.analysis.warmup_fraction), closed_loop=True))


def search(cfg: Any, settings: SearchSettings | None = None, start_rps: float | None = None,
           say=print) -> Search:
    """Bracket then bisect the highest stable open-loop rate (see the module docstring)."""
    settings = settings or SearchSettings.from_cfg(cfg)
    cfg = sized(cfg, settings.min_requests)
    try:
        estimate = closed_loop_estimate(cfg)
    except Interrupted as stop:
        stop.search = Search(closed_loop_rps=math.nan)
        raise
    out = Search(closed_loop_rps=estimate)
    try:
        return _bracket_and_bisect(cfg, settings, out, start_rps if start_rps is not None else estimate, say)
    except Interrupted as stop:
        stop.search = out
        raise


def _bracket_and_bisect(cfg: Any, settings: SearchSettings, out: Search, start: float, say) -> Search:
    if not (math.isfinite(start) and start > 0):
        raise InputError("loadgen.rate_rps=max: the closed-loop estimate that starts the search has no steady "
                         "window (too few requests); raise workload.num_requests")

    def probe(rate: float) -> bool:
        began = time.perf_counter()
        verdict = _judge_run(with_rate(cfg, rate), settings)
        out.probes.append(Probe(rate, verdict, time.perf_counter() - began))
        say(f"capacity search: {rate:.4g} req/s {verdict.reason}")
        if verdict.stable:
            out.lo_rps = rate if not math.isfinite(out.lo_rps) else max(out.lo_rps, rate)
        else:
            out.hi_rps = rate if not math.isfinite(out.hi_rps) else min(out.hi_rps, rate)
        return verdict.stable

    def runs_left() -> bool:
        return len(out.probes) < settings.max_runs

    up = probe(start)
    for step in STEPS:  # bracket: step outwards from the estimate until the verdict flips
        if (math.isfinite(out.lo_rps) and math.isfinite(out.hi_rps)) or not runs_left():
            break
        probe(start * step if up else start / step)
    while (math.isfinite(out.lo_rps) and math.isfinite(out.hi_rps) and out.hi_rps / out.lo_rps - 1 > settings.tolerance
           and runs_left()):
        probe(math.sqrt(out.lo_rps * out.hi_rps))
    return out


def summary_meta(found: Search, settings: SearchSettings) -> dict[str, Any]:
    """The summary keys (`capacity_*`): the capacity, its bracket, the runs, the closed loop beside it."""
    capacity = found.lo_rps
    gap = found.closed_loop_rps / capacity - 1 if math.isfinite(capacity) and capacity > 0 else math.nan
    converged = math.isfinite(found.lo_rps) and math.isfinite(found.hi_rps) and \
        found.hi_rps / found.lo_rps - 1 <= settings.tolerance
    warning = ""
    if not converged:
        warning = (f"the search did not converge in {len(found.probes)} runs (bracket {found.lo_rps:.4g} - "
                   f"{found.hi_rps:.4g} req/s); raise loadgen.capacity_search.max_runs")
    elif math.isfinite(gap) and abs(gap) > settings.tolerance:
        warning = (f"the closed-loop estimate ({found.closed_loop_rps:.4g} req/s) differs from the searched "
                   f"capacity ({capacity:.4g} req/s) by {gap:+.1%}: trust the searched capacity, the highest "
                   f"open-loop rate judged stable; a closed loop's throughput depends on how many requests it keeps "
                   f"in flight when that changes which requests are in flight (prefix reuse, held-back turns)")
    return {"rps": capacity, "lo_rps": found.lo_rps, "hi_rps": found.hi_rps, "runs": len(found.probes),
            "tolerance": settings.tolerance, "closed_loop_rps": found.closed_loop_rps, "closed_loop_gap": gap,
            "converged": converged, "warning": warning}


def run_search(cfg: Any, out: Path):
    """`loadgen.rate_rps=max`: the search, then the open-loop run at the capacity written into `out`."""
    from harness.runs.sim import run_sim

    if cfg.mode != "sim":
        raise InputError(f"loadgen.rate_rps=max (a capacity search) runs in sim mode only, not mode={cfg.mode}: "
                         f"each probe is a whole run; for a {cfg.mode} target sweep loadgen.rate_rps instead")
    settings = SearchSettings.from_cfg(cfg)
    try:
        found = search(cfg, settings)
    except Interrupted as stop:  # the stopped run's records and the probes so far are the run's files
        found = stop.search or Search(closed_loop_rps=math.nan)
        meta = summary_meta(found, settings) | {
            "rps": math.nan, "converged": False,
            "warning": f"interrupted after {len(found.probes)} probe(s): the files are the stopped run's, no capacity"}
        stop.result.meta["capacity"] = meta
        _write_probes(found, out)
        return stop.result
    meta = summary_meta(found, settings)
    rate = found.lo_rps if math.isfinite(found.lo_rps) else (found.probes[-1].rate_rps if found.probes else math.nan)
    final = copy.deepcopy(sized(cfg, settings.min_requests))  # the probe's requests, at the capacity
    final.loadgen.rate_rps = rate
    result = run_sim(final, out)
    result.meta["capacity"] = meta
    _write_probes(found, out)
    if meta["warning"]:
        print(f"warning: {meta['warning']}")
    return result


def _write_probes(found: Search, out: Path) -> None:
    from harness.analysis.frames import write_parquet

    frame = found.frame()
    if len(frame):
        write_parquet(frame, out / "capacity_search.parquet")
