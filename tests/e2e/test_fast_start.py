"""What a run imports: one that draws no figures imports no plotting library (seaborn, matplotlib) and no
scipy.stats. (Import sets, not timings: these hold on a busy machine; benchmarks/bench_startup.py reports the
times.) The run that reads what start-up imports runs in a new interpreter; the sweep runs in this process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import commands  # tests/commands.py
import pytest

ROOT = Path(__file__).resolve().parents[2]


def _modules_after(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.splitlines()[-1].split())


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory) -> tuple[Path, set[str]]:
    """One run without figures in a new interpreter: its directory and the modules imported once main() returned."""
    run_dir = tmp_path_factory.mktemp("plain") / "run"
    argv = ["harness", "workload.num_requests=3", f"hydra.run.dir={run_dir}", "analysis.figures=false",
            "loadgen.progress=false"]
    return run_dir, _modules_after(f"import sys\nsys.argv = {argv!r}\nfrom harness.cli import main\nmain()")


def test_run_without_figures_imports_no_plotting_and_no_scipy_stats(plain_run):
    run_dir, loaded = plain_run
    assert (run_dir / "summary.parquet").is_file() and "harness.cli" in loaded
    assert not {"matplotlib", "seaborn", "scipy.stats"} & loaded
    assert "harness.profiling.schema" not in loaded  # harness-profile's schema: stored only for its config


def test_a_config_that_sets_hydra_mode_still_decides_the_mode(tmp_path):
    """An experiment in a --config-dir that sets hydra.mode=MULTIRUN: the command sweeps without -m."""
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "always_sweep.yaml").write_text(
        "# @package _global_\nhydra:\n  mode: MULTIRUN\n  sweeper:\n    params:\n      workload.num_requests: 2,3\n")
    sweep = tmp_path / "sweep"
    done = commands.run(["-m", "harness", "--config-dir", str(tmp_path / "conf"), "experiment=always_sweep",
                           f"hydra.sweep.dir={sweep}", "analysis.figures=false", "loadgen.progress=false"],
                        cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())  # hydra.sweep.subdir: <num>_<overrides>
    assert jobs == ["0_workload.num_requests=2", "1_workload.num_requests=3"]
    assert all((sweep / job / "summary.parquet").is_file() for job in jobs)
    assert out.count("completed=") == 2
