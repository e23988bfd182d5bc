"""A sim run on a nearly full filesystem (a tiny tmpfs): one line naming the path, exit status 2,
and every record it managed to stream stays readable (by `read_parquet` and `harness-report`)."""

from __future__ import annotations

import subprocess

import pandas as pd
import pytest

from harness.analysis.frames import read_parquet

from .cli import python as _python


@pytest.fixture
def tiny_fs(tmp_path):
    mount = tmp_path / "tiny"
    mount.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(mount)],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        pytest.skip(f"cannot mount a tmpfs here: {err}")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True, timeout=30, check=False)


def test_sim_run_on_a_full_disk_is_one_line_and_keeps_its_records(tiny_fs, tmp_path):
    run_dir = tiny_fs / "run"
    proc = _python("-m", "harness", "workload.num_requests=20000", "recording.flush_every=200",
                   "loadgen.progress=false", "analysis.figures=false", f"hydra.run.dir={run_dir}")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert lines[0].startswith(f"error: cannot write {run_dir}") and "No space left" in lines[0]
    assert not (run_dir / "summary.parquet").exists()
    df = read_parquet(run_dir / "requests.parquet")  # the parts written before the disk filled
    assert 200 <= len(df) < 20000 and df["request_id"].is_unique
    assert not list((run_dir / "requests.parquet.parts").glob(".*tmp*"))  # no half-written part left

    out = tmp_path / "report"
    report = _python("-m", "harness.report", str(run_dir), "--no-figures", "--out", str(out))
    assert report.returncode == 0, report.stderr[-2000:]
    row = pd.read_parquet(out / "report.parquet").iloc[0]
    assert bool(row["incomplete"]) and row["n_requests"] == len(df)
