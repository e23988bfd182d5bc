"""A long run stopped midway keeps every record it made: SIGTERM loses nothing, SIGKILL at most a buffer.

Each run is `python -m harness` in a new process (the harness's own signal handlers, as a user's run has them).
"""

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
# A part every 500 records (or second): the two parts the tests wait for are on disk after ~1,000 records,
# not ~10,000 (default 5,000), and the signal comes as midway (200,000 requests).
LONG = ["workload.num_requests=200000", "loadgen.rate_rps=3.0", "loadgen.progress=false", "analysis.figures=false",
        "recording.flush_every=500"]


class _Run(subprocess.Popen):
    """`python -m harness` on the long workload, in the background; `communicate` returns the status too."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__([sys.executable, "-m", "harness", f"hydra.run.dir={run_dir}", *LONG], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def communicate(self, input=None, timeout=None):  # type: ignore[override]
        try:
            out, err = super().communicate(input, timeout)  # a hang guard, not a timing assert
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        return self.returncode, out, err


def _wait_for_parts(run_dir: Path, proc: _Run, timeout_s: float = 90.0) -> None:
    parts = run_dir / "requests.parquet.parts"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if parts.is_dir() and len(list(parts.glob("part-*.parquet"))) >= 2:
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended before it could be interrupted: {proc.communicate(timeout=30)[2][-500:]}")
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    pytest.fail("no records were streamed to disk in time")


def test_sigterm_midway_records_every_sent_request(tmp_path):
    run_dir = tmp_path / "run"
    proc = _Run(run_dir)
    _wait_for_parts(run_dir, proc)
    os.kill(proc.pid, signal.SIGTERM)
    returncode, out, err = proc.communicate(timeout=120)
    assert returncode == 130, err[-500:]
    assert "interrupted at" in out
    df = pd.read_parquet(run_dir / "requests.parquet")
    summary = pd.read_parquet(run_dir / "summary.parquet").iloc[0]
    assert bool(summary["interrupted"]) and 0 < len(df) < 200_000
    assert df["request_id"].is_unique
    # every request sent so far has its record: ids 0..n-1, none missing
    assert sorted(df["request_id"]) == list(range(len(df)))
    assert df["error"].fillna("").str.startswith("interrupted").any()
    assert not (run_dir / "requests.parquet.parts").exists()


def test_sigkill_midway_leaves_readable_parts(tmp_path):
    run_dir = tmp_path / "run"
    proc = _Run(run_dir)
    _wait_for_parts(run_dir, proc)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.communicate(timeout=60)[0] == -signal.SIGKILL
    df = read_parquet(run_dir / "requests.parquet")  # falls back to the parts
    assert len(df) >= 2 and df["request_id"].is_unique
    completed = df[df["error"].isna()]
    assert (completed["ttft_s"] > 0).all() and (completed["e2e_s"] >= completed["ttft_s"]).all()
