"""A sim run's memory does not grow with its length, and the bounded-memory path writes the same files.

Each run is the CLI (`python -m harness`) in its own process (forked from the CLI zygote: tests/e2e/
peak_rss.py), measured by that process's peak RSS. Before the streamed path a request cost ~14 KB (the
workload list, the records, the prefix pool's blocks), so 12,000 more requests were ~170 MB more (175 MB
measured forked, with those three put back in harness/runs/sim.py; streamed: 24-29 MB); the bound below
is a third of that, generous for noise.
"""

from __future__ import annotations

import json
from pathlib import Path

import cli_zygote  # tools/cli_zygote.py, loaded by tests/conftest.py
import pandas as pd

from harness.analysis.frames import requests_frame

REPO = Path(__file__).resolve().parents[2]


def _cli_rss_mb(tmp_path: Path, n: int, *overrides: str) -> tuple[float, Path]:
    out = tmp_path / f"n{n}"
    peak = tmp_path / f"peak-n{n}.txt"
    done = cli_zygote.run(["-m", "tests.e2e.peak_rss", str(peak), "harness", f"workload.num_requests={n}",
                           "loadgen.rate_rps=3", "loadgen.progress=false", "analysis.figures=false",
                           f"hydra.run.dir={out}", *overrides], cwd=REPO, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(peak.read_text()) / (1 << 20), out


def test_peak_rss_does_not_grow_with_the_run(tmp_path):
    small, _ = _cli_rss_mb(tmp_path, 1_000)
    large, out = _cli_rss_mb(tmp_path, 13_000)
    assert large - small < 60.0, f"peak RSS {small:.0f} MB at 1,000 requests, {large:.0f} MB at 13,000"
    assert len(pd.read_parquet(out / "requests.parquet")) == 13_000
    assert not (out / "requests.parquet.parts").exists()


def test_streamed_run_writes_what_the_in_memory_run_computes(tmp_path):
    """The run directory (parts -> sorted file, analysis from it) equals run_sim kept in memory."""
    from hydra import compose, initialize_config_dir

    from harness.analysis.summary import summarize
    from harness.runs.sim import run_sim
    from harness.schema import register_configs

    overrides = ["workload.num_requests=1500", "loadgen.rate_rps=3", "loadgen.progress=false",
                 "analysis.figures=false", "recording.flush_every=97"]
    _, out = _cli_rss_mb(tmp_path, 1500, "recording.flush_every=97")
    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        cfg = compose("config", overrides=overrides)
    memory = run_sim(cfg)  # no run directory: the records are kept in memory and sorted there
    assert not memory.requests_written
    pd.testing.assert_frame_equal(pd.read_parquet(out / "requests.parquet"), requests_frame(memory.requests),
                                  check_exact=True)
    ts = pd.read_parquet(out / "timeseries.parquet")
    assert ts["egress_gbps"].sum() > 0 and ts["decode_running"].max() > 0
    want = summarize(requests_frame(memory.requests), ts, memory.meta, cfg.analysis)
    got = json.loads((out / "summary.json").read_text())
    for key in ("n_requests", "completed", "ttft_p99_s", "tpot_mean_s", "e2e_p90_s", "offload_fraction",
                "egress_gbps_mean", "throughput_rps", "prefill_tokens_computed"):
        assert got[key] == want[key], key
