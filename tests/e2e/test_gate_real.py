"""`harness-gate` on real emulator runs: the CI-sized paper case suite passes conf/gates/paper_case.yaml;
the same suite with PrfaaS-PD sending every prefill remote (threshold 0) fails it, exit 1, naming the
checks that caught it. Nothing here is synthetic: the numbers come out of the emulator."""

from __future__ import annotations

import subprocess
from pathlib import Path

import commands  # tests/commands.py
import pytest

ROOT = Path(__file__).resolve().parents[2]
PAPER_CASE = ROOT / "conf" / "gates" / "paper_case.yaml"


def cli(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return commands.run(["-m", *args], cwd=ROOT, timeout=timeout)


def suite(out: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    proc = cli("harness", "-m", "experiment=paper_case_ci", f"hydra.sweep.dir={out}", *overrides)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("gate") / "good"
    proc = suite(out)
    assert proc.stdout.count("9 runs, 3 deployment(s)") == 1  # the report callback printed the suite once
    return out


def failed_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if " FAIL " in line]


def test_paper_case_gate_passes_on_the_real_ci_suite(good):
    proc = cli("harness.gate", str(good), "--gate", str(PAPER_CASE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert failed_lines(proc.stdout) == []
    assert "gate paper_case: 13/13 checks passed" in proc.stdout
    # Predictions are shown apart from invariants (checks that hold whatever the numbers).
    assert "by kind: prediction 7/7, invariant 6/6 passed" in proc.stdout
    kinds = [line.split()[1] for line in proc.stdout.splitlines() if line[:3].strip().isdigit()]
    assert kinds == sorted(kinds, key=["prediction", "calibration", "invariant"].index)


def test_everything_remote_prfaas_fails_the_gate_with_exit_1_and_names_the_checks(good, tmp_path):
    """t = 0 turns PrfaaS-PD into naive heterogeneous PD with idle local prefill instances: its
    capacity falls to the remote cluster's, and every request is offloaded."""
    bad = tmp_path / "bad"
    suite(bad, "deployment=prfaas_pd", "deployment.router.threshold_tokens=0")
    baselines = sorted(str(d.parent) for d in good.glob("*/summary.parquet") if "prfaas" not in d.parent.name)
    assert len(baselines) == 6
    proc = cli("harness.gate", *baselines, str(bad), "--gate", str(PAPER_CASE))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    failed = "\n".join(failed_lines(proc.stdout))
    assert "capacity_rps prfaas_pd / homogeneous_pd" in failed
    assert "capacity_rps prfaas_pd / naive_hetero" in failed
    assert "offload_fraction prfaas_pd @lowest_load" in failed
    verdict = proc.stdout.strip().splitlines()[-1]
    assert verdict.startswith("gate paper_case: ") and "FAILED: #0 capacity_rps prfaas_pd / homogeneous_pd" in verdict
