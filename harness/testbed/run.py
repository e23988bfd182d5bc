"""`mode=testbed`: stand the testbed up, drive its router exactly as a `mode=url` run drives any endpoint, tear
it down, and write the same run directory as a sim run.

The load generator only sees the router's URL. What it cannot see is joined in after the run from the
router's own records (route, KV bytes, save/transfer/restore seconds, prefill instance) and from the link's
byte counters (`egress_gbps` per time bin); both are stamped on the same monotonic clock as the client's rows.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
from omegaconf import DictConfig, OmegaConf

from harness.runs.sim import RunResult
from harness.testbed.cluster import Testbed
from harness.testbed.handoff import HandoffRecord
from harness.testbed.linkmon import egress_per_bin
from harness.testbed.settings import Layout, TestbedSettings, layout_of

# Router columns added to each client row (durations in s; times moved onto the run clock).
_DURATIONS = ("prefill_s", "kv_save_s", "kv_transfer_s", "kv_restore_s")
_TIMES = ("prefill_start", "prefill_end", "kv_ready")


def settings_of(cfg: DictConfig) -> TestbedSettings:
    node = cfg.get("testbed")
    return TestbedSettings.from_mapping(OmegaConf.to_container(node, resolve=True) if node is not None else {})


def join_records(frame: pd.DataFrame, records: list[HandoffRecord], t0_ns: int) -> pd.DataFrame:
    """The router's view of each request beside the client's (matched on X-Request-Id = request_id)."""
    by_id = {rec.request_id: rec for rec in records}
    out = frame.copy()
    ids = out["request_id"].astype(str).tolist() if len(out) else []
    found = [by_id.get(i) for i in ids]

    def column(get: Any, dtype: str = "float64") -> pd.Series:
        return pd.Series([get(r) if r is not None else None for r in found], index=out.index, dtype=dtype)

    def at(ns: int | None) -> float:
        return (ns - t0_ns) / 1e9 if ns is not None else math.nan

    out["route"] = column(lambda r: r.route or None, "string")
    out["prefill_instance"] = column(lambda r: r.prefill_instance or None, "string")
    out["decode_instance"] = column(lambda r: r.decode_instance, "string")
    out["kv_bytes_sent"] = column(lambda r: float(r.kv_bytes_sent)).fillna(0.0)
    for name in _DURATIONS:
        out[name] = column(lambda r, n=name: getattr(r, n))
    for name in _TIMES:
        out[f"{name}_s"] = column(lambda r, n=name: at(getattr(r, f"{n}_ns")))
    out["server_ttft_s"] = column(lambda r: (r.first_token_ns - r.arrival_ns) / 1e9 if r.first_token_ns else None)
    out["recomputed"] = column(lambda r: r.recomputed, "string")
    out["server_error"] = column(lambda r: r.error, "string")
    return out


def link_timeseries(ts: pd.DataFrame, samples: list[tuple[int, int]], t0_ns: int, capacity_gbps: float,
                    has_link: bool) -> pd.DataFrame:
    """The client time series with egress from the link's own counters, on the run clock's bins."""
    out = ts.copy()
    if not len(out):
        return out
    edges = np.append(out["t_s"].to_numpy(dtype=float), float(out["t_s"].iloc[-1] + out["bin_s"].iloc[-1]))
    if has_link:
        out["egress_gbps"] = egress_per_bin(samples, t0_ns, edges)
        out["link_capacity_gbps"] = capacity_gbps
    else:  # nothing crosses a link: zero egress, as a sim run of homogeneous PD reports
        out["egress_gbps"] = 0.0
    return out


def testbed_meta(layout: Layout, settings: TestbedSettings, testbed: Testbed, router: Any,
                 cfg: DictConfig) -> dict[str, Any]:
    link = float(cfg.link.capacity_gbps)
    return {"deployment": layout.deployment, "mode": "testbed", "model": str(cfg.model.name),
            "n_prfaas": int(layout.has_prfaas), "n_prefill": int(layout.has_local_prefill),
            "n_decode": layout.n_decode,
            "threshold_tokens": float(getattr(router, "threshold_tokens", None) or math.nan),
            "link_capacity_gbps": link if layout.has_prfaas else math.nan,
            "testbed": {"prefix": testbed.prefix, "slots": settings.slots, "threads": settings.threads,
                        "tbf_burst_bytes": settings.tbf_burst_bytes, "tbf_latency_ms": settings.tbf_latency_ms,
                        "engines": ",".join(layout.roles)}}


def run_testbed(cfg: DictConfig, out: Path) -> RunResult:
    """Up (in the main thread: its children die with this process), drive, down; the run's result."""
    from harness.testbed.faults import parse_faults
    from harness.testbed.service import build_router

    settings, layout = settings_of(cfg), layout_of(cfg.deployment)
    router = build_router(cfg.deployment.router, settings.threshold_tokens)  # bad config before anything exists
    parse_faults(settings.faults, layout.roles)
    testbed = Testbed(settings, layout, float(cfg.link.capacity_gbps), out / "testbed", kind="run")
    testbed.up()
    print(f"testbed {testbed.prefix} up: {', '.join(layout.roles)}; link {testbed.link_gbps:g} Gbit/s "
          f"(logs {testbed.log_dir})", file=sys.stderr, flush=True)
    try:
        return _drive(cfg, out, testbed, router, layout, settings)
    finally:
        testbed.down()


def _drive(cfg: DictConfig, out: Path, testbed: Testbed, router: Any, layout: Layout,
           settings: TestbedSettings) -> RunResult:
    from harness.runs.http import drive_url
    from harness.testbed.faults import FaultInjector, parse_faults
    from harness.testbed.service import ServiceThread

    thread = ServiceThread(testbed, router, model_name=str(cfg.model.name))
    injector = FaultInjector(testbed, parse_faults(settings.faults, layout.roles))
    try:
        url = thread.start()
        url_cfg = cast(DictConfig, OmegaConf.merge(cfg, {"target": {"url": url, "name": layout.deployment}}))
        injector.start()
        result = asyncio.run(drive_url(url_cfg, out, mode="testbed"))
    finally:
        injector.stop()
        thread.stop()
    service = thread.service
    assert service is not None
    t0 = int(result.t0_ns or 0)
    result.requests = join_records(result.requests, service.front.handoff.records, t0)
    samples = service.monitor.samples if service.monitor is not None else []
    result.timeseries = link_timeseries(result.timeseries, samples, t0, testbed.link_gbps, layout.has_prfaas)
    result.meta.update(testbed_meta(layout, settings, testbed, router, cfg))
    if injector.faults:
        result.meta["testbed"]["faults"] = json.dumps(injector.events(t0))
    return result
