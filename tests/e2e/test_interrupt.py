"""A long run stopped midway keeps every record it made: SIGTERM loses nothing, SIGKILL at most a buffer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis.frames import read_parquet

ROOT = Path(__file__).resolve().parents[2]
LONG = ["workload.num_requests=200000", "loadgen.rate_rps=3.0", "loadgen.progress=false", "analysis.figures=false"]


def _start(run_dir: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "harness", f"hydra.run.dir={run_dir}", *LONG], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_parts(run_dir: Path, proc: subprocess.Popen, timeout_s: float = 90.0) -> None:
    parts = run_dir / "requests.parquet.parts"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if parts.is_dir() and len(list(parts.glob("part-*.parquet"))) >= 2:
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended before it could be interrupted: {proc.stderr.read()[-500:]}")
        time.sleep(0.2)
    proc.kill()
    pytest.fail("no records were streamed to disk in time")


def test_sigterm_midway_records_every_sent_request(tmp_path):
    proc = _start(tmp_path)
    _wait_for_parts(tmp_path, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-500:]
    assert "interrupted at" in out
    df = pd.read_parquet(tmp_path / "requests.parquet")
    summary = pd.read_parquet(tmp_path / "summary.parquet").iloc[0]
    assert bool(summary["interrupted"]) and 0 < len(df) < 200_000
    assert df["request_id"].is_unique
    # every request sent so far has its record: ids 0..n-1, none missing
    assert sorted(df["request_id"]) == list(range(len(df)))
    assert df["error"].fillna("").str.startswith("interrupted").any()
    assert not (tmp_path / "requests.parquet.parts").exists()


def test_sigkill_midway_leaves_readable_parts(tmp_path):
    proc = _start(tmp_path)
    _wait_for_parts(tmp_path, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    df = read_parquet(tmp_path / "requests.parquet")  # falls back to the parts
    assert len(df) >= 2 and df["request_id"].is_unique
    completed = df[df["error"].isna()]
    assert (completed["ttft_s"] > 0).all() and (completed["e2e_s"] >= completed["ttft_s"]).all()
