"""The load generator's report on itself: did it send what it was asked, when it was asked?

A generator that falls behind (its loop busy, its sends late, its rate short of the target) makes
the target look better than it is, because the load it offered was lighter than the one reported.
Every run states its achieved vs target rate, send lateness and event-loop lag, and a run that
crossed the configured limits is marked invalid (`valid=False` with the reasons), not dropped.
With `loadgen.max_concurrency`, a request waiting for a slot is the experiment, not the generator
falling behind: lateness and the achieved rate are taken when each request was ready to go
(sent - queued), and the queueing is reported per request (`queue_s`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.loadgen.records import RequestRecord


def _pct(values_ms: np.ndarray, q: float) -> float:
    return float(np.percentile(values_ms, q)) if values_ms.size else math.nan


def _rate(stamps_ns: np.ndarray, time_scale: float) -> float:
    """Requests per run-clock second between the first and last stamp."""
    if stamps_ns.size < 2:
        return math.nan
    span_s = (stamps_ns.max() - stamps_ns.min()) / 1e9 * time_scale
    return (stamps_ns.size - 1) / span_s if span_s > 0 else math.nan


def loadgen_health(records: Sequence[RequestRecord], loop_lag_ns: Sequence[int], *, open_loop: bool,
                   time_scale: float, max_lateness_ms: float, min_rate_fraction: float, max_loop_lag_ms: float,
                   other_problems: Sequence[str] = ()) -> dict[str, Any]:
    """Summary fields (wall-clock milliseconds for lateness and lag; run-clock req/s for rates)."""
    sent = [r for r in records if r.sent_ns is not None]
    scheduled_ns = np.array([r.scheduled_ns for r in sent], dtype=np.int64)
    sent_ns = np.array([r.sent_ns - r.queued_ns for r in sent if r.sent_ns is not None], dtype=np.int64)  # ready to go
    lateness_ms = (sent_ns - scheduled_ns) / 1e6
    lag_ms = np.asarray(loop_lag_ns, dtype=np.int64) / 1e6
    target = _rate(scheduled_ns, time_scale) if open_loop else math.nan
    achieved = _rate(sent_ns, time_scale)
    out: dict[str, Any] = {
        "requests_sent": len(sent),
        "target_rps": target,
        "achieved_rps": achieved,
        "lateness_p50_ms": _pct(lateness_ms, 50),
        "lateness_p99_ms": _pct(lateness_ms, 99),
        "lateness_max_ms": float(lateness_ms.max()) if lateness_ms.size else math.nan,
        "loop_lag_p50_ms": _pct(lag_ms, 50),
        "loop_lag_p99_ms": _pct(lag_ms, 99),
        "loop_lag_max_ms": float(lag_ms.max()) if lag_ms.size else math.nan,
    }
    problems = list(other_problems)
    if open_loop and out["lateness_p99_ms"] > max_lateness_ms:
        problems.append(f"send lateness P99 {out['lateness_p99_ms']:.2f} ms > loadgen.max_lateness_ms="
                        f"{max_lateness_ms:g}")
    if open_loop and math.isfinite(target) and achieved < min_rate_fraction * target:
        problems.append(f"achieved {achieved:.4g} req/s < loadgen.min_rate_fraction={min_rate_fraction:g} x target "
                        f"{target:.4g} req/s")
    if out["loop_lag_p99_ms"] > max_loop_lag_ms:
        problems.append(f"event-loop lag P99 {out['loop_lag_p99_ms']:.2f} ms > loadgen.max_loop_lag_ms="
                        f"{max_loop_lag_ms:g}")
    out["valid"] = not problems
    out["invalid_reason"] = "; ".join(problems)
    return out


def no_completion_warning(records: Sequence[RequestRecord]) -> str | None:
    """One line when measured requests failed and none completed (a wrong model name, a closed port, a
    server answering 404 to all): the run's records keep every failure (errors are data, the status
    stays 0), but a user reading only the exit status would not notice. None otherwise, and when the
    only requests without an answer were cut short by a stop (Ctrl-C, max_duration_s)."""
    measured = [r for r in records if not r.warmup]
    if any(r.completed for r in measured):
        return None
    failed = [r for r in measured if r.error is not None and not r.interrupted]
    if not failed:
        return None
    first = min(failed, key=lambda r: (r.done_ns is None, r.done_ns or 0, r.request_id))
    error = " ".join(str(first.error).split())
    error = error if len(error) <= 200 else error[:197] + "..."
    return f"no request completed ({len(failed)} failed; first error: {error})"
