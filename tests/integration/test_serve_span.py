"""`harness-serve`'s summary covers its run span, not its uptime: a server idle before and after a
`harness-load` run reports the egress of the run (first arrival .. last finish), which is what the
bytes it moved over that span say; over the uptime it was a fraction of it."""

from __future__ import annotations

import asyncio
import json
import time

import pandas as pd
import pytest

from .cli import SMALL
from .cli import python as _python
from .serving import serving

# Every request (4096 tokens) over the threshold: prefilled on PrfaaS, its KV across the link.
# 0.1 s bins: the span (~4 s of emulated time) is ~40 bins, so its edges move the mean a few percent.
SERVER = [*SMALL, "deployment.router.threshold_tokens=1000", "analysis.timeseries.bin_s=0.1", "server.port=0",
          "server.time_scale=20", "recording.flush_s=0.1"]
IDLE_S = 10.0  # emulated seconds idle before and after the load: 0.5 s of wall time each


def test_serve_summary_is_over_the_run_span_not_the_uptime(compose_cfg, tmp_path):
    run_dir, load_dir = tmp_path / "serve", tmp_path / "load"
    cfg = compose_cfg(SERVER)

    async def idle(server, emulated_s: float) -> None:
        until, deadline = server.clock.now() + emulated_s, time.monotonic() + 60
        while server.clock.now() < until:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)

    async def main() -> None:
        async with serving(cfg, run_dir) as server:
            await idle(server, IDLE_S)
            load = await asyncio.to_thread(_python, "-m", "harness.load", f"target.url={server.url}", *SMALL,
                                           f"hydra.run.dir={load_dir}")
            assert load.returncode == 0, load.stderr[-2000:]
            await idle(server, IDLE_S)

    asyncio.run(main())
    summary = json.loads((run_dir / "summary.json").read_text())
    served = pd.read_parquet(run_dir / "requests.parquet")
    uptime_s = pd.read_parquet(run_dir / "timeseries.parquet").eval("t_s + bin_s").max()
    assert summary["completed"] == 30 and (served["route"] == "prfaas").all() and (served["kv_bytes_sent"] > 0).all()
    assert summary["duration_s"] + 2 * IDLE_S <= uptime_s  # the setup is serve-like: idle on both sides
    moved_gbps = served["kv_bytes_sent"].sum() * 8 / 1e9
    over_span = moved_gbps / summary["duration_s"]
    assert summary["egress_gbps_mean"] == pytest.approx(over_span, rel=0.1)
    assert summary["egress_gbps_mean"] > 2 * moved_gbps / uptime_s  # not the uptime's mean
    assert summary["link_util_mean"] == pytest.approx(summary["egress_gbps_mean"] / summary["link_capacity_gbps"])
