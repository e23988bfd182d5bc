"""What the commands import before they do anything: `--help` needs neither Hydra nor numpy, and a
run that draws no figures imports no plotting library. (Import sets, not timings: these hold on a
busy machine; benchmarks/bench_startup.py reports the times.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules_after(code: str) -> set[str]:
    done = subprocess.run([sys.executable, "-c", code + "\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.splitlines()[-1].split())


def test_help_imports_neither_hydra_nor_numpy():
    loaded = _modules_after("import sys\nsys.argv = ['harness', '--help']\nfrom harness.cli import main\nmain()")
    assert "harness.cli" in loaded
    assert not {"hydra", "omegaconf", "numpy", "pandas"} & loaded


def test_run_without_figures_imports_no_plotting_and_no_scipy_stats(tmp_path):
    loaded = _modules_after(
        "import sys\n"
        f"sys.argv = ['harness', 'workload.num_requests=5', 'hydra.run.dir={tmp_path}', 'analysis.figures=false',"
        " 'loadgen.progress=false']\n"
        "from harness.cli import main\nmain()")
    assert (tmp_path / "summary.parquet").is_file()
    assert not {"matplotlib", "seaborn", "scipy.stats"} & loaded
