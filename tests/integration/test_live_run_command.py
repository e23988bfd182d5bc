"""`python -m harness mode=live` as a user runs it, in a subprocess: the run directory, then
`harness-report` and `harness-gate` on it, unchanged; and bad live settings as one-line errors.
"""

from __future__ import annotations

import json
import os
import re

import pandas as pd
import pytest

from .cli import SMALL
from .cli import python as _python


def test_python_m_harness_mode_live_writes_a_run_directory(tmp_path):
    run_dir = tmp_path / "live"
    proc = _python("-m", "harness", "mode=live", "server.time_scale=20", *SMALL, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.search(r"listening on http://127\.0\.0\.1:\d+", proc.stderr)
    for name in ("requests.parquet", "timeseries.parquet", "summary.parquet", "summary.json", "chunks.parquet"):
        assert (run_dir / name).exists(), name
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["mode"] == "live" and summary["completed"] == 30 and summary["failed"] == 0
    assert summary["time_scale"] == 20 and "loadgen_valid" in summary and "server_lag_p99_ms" in summary
    assert summary["median_ttft_ms"] > 0  # vllm-bench names too
    df = pd.read_parquet(run_dir / "requests.parquet")
    assert {"scheduled_s", "sent_s", "lateness_s", "route", "server_ttft_s"} <= set(df.columns)

    report = _python("-m", "harness.report", str(run_dir), "--no-figures")
    assert report.returncode == 0, report.stderr[-2000:]
    assert "prfaas_pd" in report.stdout
    gate_file = tmp_path / "gate.yaml"
    gate_file.write_text("name: live_smoke\ndescription: nothing failed, link not saturated\nchecks:\n"
                         "  - {metric: failed, deployment: prfaas_pd, max: 0}\n"
                         "  - {metric: egress_gbps_mean, deployment: prfaas_pd, max: link_capacity_gbps}\n")
    gate = _python("-m", "harness.gate", str(run_dir), "--gate", str(gate_file))
    assert gate.returncode == 0, gate.stdout + gate.stderr[-2000:]
    assert "2/2 checks passed" in gate.stdout


def test_url_mode_without_url_is_a_one_line_input_error(tmp_path):
    proc = _python("-m", "harness", "mode=url", *SMALL, f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: mode=url needs target.url")


@pytest.mark.parametrize("override", ["server.time_scale=0", "target.api=grpc"])
def test_bad_live_settings_exit_2(tmp_path, override):
    proc = _python("-m", "harness", "mode=live", *SMALL, override, f"hydra.run.dir={tmp_path}",
                   env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 2, proc.stderr[-1500:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ")
