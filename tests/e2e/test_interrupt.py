"""A long run stopped midway keeps every record it made: SIGTERM loses nothing, SIGKILL at most a buffer.

Each run is `python -m harness` forked from the CLI zygote (tools/cli_zygote.py: the harness's own signal
handlers, installed by the command as in a new process), in a thread; `on_fork` tells its pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import cli_zygote  # tools/cli_zygote.py, loaded by tests/conftest.py
import pandas as pd
import pytest

from harness.analysis.frames import read_parquet

ROOT = Path(__file__).resolve().parents[2]
# A part every 500 records (or second): the two parts the tests wait for are on disk after ~1,000 records,
# not ~10,000 (default 5,000), and the signal comes as midway (200,000 requests).
LONG = ["workload.num_requests=200000", "loadgen.rate_rps=3.0", "loadgen.progress=false", "analysis.figures=false",
        "recording.flush_every=500"]


class _Run:
    """The command running in the background: its pid, `poll()` and `communicate()` as a Popen's."""

    def __init__(self, run_dir: Path) -> None:
        self.done: subprocess.CompletedProcess[str] | None = None
        self.failed: BaseException | None = None
        started = threading.Event()
        self.pid = -1

        def forked(pid: int) -> None:
            self.pid = pid
            started.set()

        def run() -> None:
            try:
                self.done = cli_zygote.run(["-m", "harness", f"hydra.run.dir={run_dir}", *LONG], cwd=ROOT,
                                           timeout=300, on_fork=forked)
            except BaseException as err:  # re-raised in the test's thread
                self.failed = err
            finally:
                started.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        started.wait()

    def poll(self) -> int | None:
        return None if self.thread.is_alive() else self.communicate(0)[0]

    def communicate(self, timeout: float) -> tuple[int, str, str]:
        self.thread.join(timeout)  # a hang guard, not a timing assert
        if self.failed is not None:
            raise self.failed
        assert self.done is not None, "the run did not end"
        return self.done.returncode, self.done.stdout, self.done.stderr


def _wait_for_parts(run_dir: Path, proc: _Run, timeout_s: float = 90.0) -> None:
    parts = run_dir / "requests.parquet.parts"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if parts.is_dir() and len(list(parts.glob("part-*.parquet"))) >= 2:
            return
        if proc.poll() is not None:
            pytest.fail(f"the run ended before it could be interrupted: {proc.communicate(0)[2][-500:]}")
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
