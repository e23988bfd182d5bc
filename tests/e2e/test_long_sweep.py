"""A sweep whose jobs have 30 overrides runs (their directory names would be ~800 bytes as Hydra joins
them; the limit is 255), the report reads it, and a user's own too-long `hydra.sweep.subdir` is one line."""

from __future__ import annotations

from pathlib import Path

import commands  # tests/commands.py
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
# 29 overrides that keep their defaults, and one swept: 30 in each job's name
SAME = ["server.host=127.0.0.1", "server.port=8000", "server.time_scale=1.0", "server.max_model_len=262144",
        "server.default_max_tokens=16", "server.max_body_bytes=33554432", "server.max_lag_ms=50.0",
        "server.tokens_per_word=1.0", "recording.flush_s=1.0", "recording.flush_every=5000",
        "rebalancer.period_s=60.0", "rebalancer.window_s=120.0", "rebalancer.switch_delay_s=10.0",
        "rebalancer.min_gain=0.05", "rebalancer.min_samples=50", "planner.grid_step_tokens=256",
        "planner.t_max_tokens=131072", "planner.service_time=expected", "planner.slo_tokens_per_s=40.0",
        "planner.tie_rel_tol=1e-09", "planner.baseline=homogeneous_pd", "planner.projection.gpus_per_instance=8",
        "link.capacity_gbps=100", "workload.seed=7", "analysis.timeseries.bin_s=1.0", "loadgen.max_lateness_ms=10",
        "loadgen.max_loop_lag_ms=20", "loadgen.min_rate_fraction=0.95", "analysis.warmup_fraction=0.0"]
SWEEP = ["-m", "experiment=long_sweep", *SAME, "workload.num_requests=2,3"]
EXPERIMENT = """# @package _global_
analysis:
  figures: false
loadgen:
  progress: false
hydra:
  callbacks:
    report:
      _target_: harness.analysis.callback.ReportCallback
"""


def _sweep(tmp_path: Path, *more: str):
    conf = tmp_path / "conf" / "experiment"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "long_sweep.yaml").write_text(EXPERIMENT)
    return commands.run(["-m", "harness", "--config-dir", str(tmp_path / "conf"), *SWEEP,
                           f"hydra.sweep.dir={tmp_path / 'sweep'}", *more], cwd=ROOT, timeout=300)


def test_a_30_override_sweep_runs_and_reports(tmp_path):
    """Before: `OSError: [Errno 36] File name too long`, exit 2, nothing run."""
    sweep = tmp_path / "sweep"
    done = _sweep(tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert len(jobs) == 2 and all(len(p.name.encode()) <= 96 for p in jobs)
    assert all((job / "summary.json").is_file() and (job / ".hydra" / "overrides.yaml").is_file() for job in jobs)
    report = pd.read_parquet(sweep / "report.parquet")
    assert sorted(report["workload.num_requests"]) == [2, 3] and "planner.tie_rel_tol" in report.columns
    again = commands.run(["-m", "harness.report", str(sweep), "--no-figures"], cwd=ROOT, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]


def test_a_too_long_subdir_of_the_users_own_is_one_line(tmp_path):
    done = _sweep(tmp_path, "hydra.sweep.subdir=${hydra.job.num}_${hydra.job.override_dirname}")
    assert done.returncode == 2, done.stderr[-2000:]
    line = done.stderr.strip()
    assert "\n" not in line and "hydra.sweep.subdir" in line and "limit is 255" in line, line
