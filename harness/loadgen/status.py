"""A one-line status of a running load, every few seconds, for runs whose output is not a terminal
(CI logs, `nohup`, a pipe): a long run is never silent.

    load: t=30.0s sent=600/2000 done=571 errors=2 rate=20.0 req/s lateness_p99=0.84 ms
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

import numpy as np

from harness.loadgen.clock import Pacer
from harness.loadgen.records import RequestRecord


def status_line(records: Sequence[RequestRecord], total: int, elapsed_ns: int, time_scale: float) -> str:
    """sent / total, done, errors, send rate (run-clock req/s), P99 send lateness (wall ms)."""
    sent = [r for r in records if r.sent_ns is not None]
    done = [r for r in sent if r.done_ns is not None]
    errors = sum(1 for r in done if r.error is not None)
    run_s = elapsed_ns / 1e9 * time_scale
    rate = len(sent) / run_s if run_s > 0 else float("nan")
    late_ms = np.array([(r.sent_ns - r.scheduled_ns - r.queued_ns) / 1e6 for r in sent if r.sent_ns is not None],
                       dtype=np.float64)
    p99 = f"{np.percentile(late_ms, 99):.2f} ms" if late_ms.size else "n/a"
    return (f"load: t={run_s:.1f}s sent={len(sent)}/{total} done={len(done)} errors={errors} "
            f"rate={rate:.4g} req/s lateness_p99={p99}")


async def report_status(records: Sequence[RequestRecord], total: int, clock: Pacer, t0_ns: int, every_s: float,
                        time_scale: float, out: TextIO | None = None) -> None:
    """Print `status_line` every `every_s` wall seconds (absolute ticks) until cancelled."""
    period = round(every_s * 1e9)
    tick = t0_ns + period
    while True:
        await clock.sleep_until(tick)
        print(status_line(records, total, clock.now_ns() - t0_ns, time_scale), file=out or sys.stderr, flush=True)
        tick += period
