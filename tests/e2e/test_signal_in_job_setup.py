"""A signal the moment a run's job directory appears (inside Hydra's job set-up, before the harness's run has
begun): the stopped run still has its summary, `interrupted` set (harness/hydra_entry.py holds the signal from the
command's start; the run stops at its first event).
Real processes: the window is Hydra's own start of a job."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_signal_as_the_job_directory_appears_leaves_a_stopped_run_with_its_summary(tmp_path):
    stopped = 0
    for trial in range(4):
        run_dir = tmp_path / f"run{trial}"
        argv = ["-m", "harness", "workload.num_requests=50", f"hydra.run.dir={run_dir}", "analysis.figures=false",
                "loadgen.progress=false"]
        proc = subprocess.Popen([sys.executable, *argv], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 120
            while not (run_dir / ".hydra").exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.0005)
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode in (0, 130), err[-2000:]
        assert "Traceback" not in err
        summary = json.loads((run_dir / "summary.json").read_text())  # a stopped run has its summary too
        assert summary["interrupted"] is (proc.returncode == 130)
        stopped += proc.returncode == 130
    assert stopped >= 1  # at least one signal landed before the run ended
