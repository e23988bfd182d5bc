"""A sim run's memory does not grow with its length, and the bounded-memory path writes the same files.

Each run is the CLI (`python -m harness`) in its own process (tests/e2e/peak_rss.py), measured by that
process's peak RSS. Before the streamed path a request cost ~14 KB (the
workload list, the records, the prefix pool's blocks), so 11,500 more requests were ~160 MB more (168 MB
measured, with those three put back in harness/runs/sim.py; streamed: 20-31 MB); the bound below
is a third of that, generous for noise. The short run is the one the in-memory comparison reads (parts of
97 records; the long run's default 5,000 buffers more, which only adds to the difference).
"""

from __future__ import annotations

import json
from pathlib import Path

import commands  # tests/commands.py
import pandas as pd
import pytest

from harness.analysis.frames import requests_frame

REPO = Path(__file__).resolve().parents[2]
COMMON = ["loadgen.rate_rps=3", "loadgen.progress=false", "analysis.figures=false"]
SHORT_N, SHORT_EXTRA = 1500, ["recording.flush_every=97"]  # the short run: records in parts of 97


def _cli_rss_mb(tmp_path: Path, n: int, *overrides: str) -> tuple[float, Path]:
    out = tmp_path / f"n{n}"
    peak = tmp_path / f"peak-n{n}.txt"
    done = commands.run(["-m", "tests.e2e.peak_rss", str(peak), "harness", f"workload.num_requests={n}", *COMMON,
                         f"hydra.run.dir={out}", *overrides], cwd=REPO, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(peak.read_text()) / (1 << 20), out


@pytest.fixture(scope="module")
def short_run(tmp_path_factory) -> tuple[float, Path]:
    """The CLI's short run: (its peak RSS in MB, its run directory)."""
    return _cli_rss_mb(tmp_path_factory.mktemp("short"), SHORT_N, *SHORT_EXTRA)


def test_peak_rss_does_not_grow_with_the_run(tmp_path, short_run):
    small, _ = short_run
    large, out = _cli_rss_mb(tmp_path, 13_000)
    assert large - small < 60.0, f"peak RSS {small:.0f} MB at 1,500 requests, {large:.0f} MB at 13,000"
    assert len(pd.read_parquet(out / "requests.parquet")) == 13_000
    assert not (out / "requests.parquet.parts").exists()


def test_streamed_run_writes_what_the_in_memory_run_computes(short_run):
    """The run directory (parts -> sorted file, analysis from it) equals run_sim kept in memory."""
    from hydra import compose, initialize_config_dir

    from harness.analysis.summary import summarize
    from harness.runs.sim import run_sim
    from harness.schema import register_configs

    _, out = short_run
    register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        cfg = compose("config", overrides=[f"workload.num_requests={SHORT_N}", *COMMON, *SHORT_EXTRA])
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
