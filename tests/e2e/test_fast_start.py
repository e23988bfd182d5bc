"""What the commands import before they do anything: `--help` needs neither Hydra nor numpy, and a
run that draws no figures imports no plotting library. (Import sets, not timings: these hold on a
busy machine; benchmarks/bench_startup.py reports the times.) The tests that read what start-up imports or
does run new interpreters; the one that only counts a sweep's compositions forks from the CLI zygote."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cli_zygote  # tools/cli_zygote.py, loaded by tests/conftest.py
import pytest

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


def _compositions(args: list[str], forked: bool = False) -> tuple[int, str]:
    """`harness <args>` with its compositions counted (tests/e2e/count_compositions.py): in a new interpreter,
    or, for a test that reads only the count and the files, forked from the CLI zygote (tools/cli_zygote.py:
    ~0.7 s of CPU less, the third-party imports done)."""
    argv = ["-m", "tests.e2e.count_compositions", *args]
    if forked:
        done = cli_zygote.run(argv, cwd=ROOT, timeout=300)
    else:
        done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True, text=True, timeout=300,
                              check=False)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split("compositions")[-1]), done.stdout


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory) -> tuple[Path, int, set[str]]:
    """One run without figures in a new interpreter, for the two tests below: its directory, how many
    times it composed its config, and the modules imported once main() returned."""
    run_dir = tmp_path_factory.mktemp("plain") / "run"
    count, out = _compositions(["workload.num_requests=3", f"hydra.run.dir={run_dir}", "analysis.figures=false",
                                "loadgen.progress=false"])
    (modules,) = [line for line in out.splitlines() if line.startswith("modules ")]
    return run_dir, count, set(modules.split()[1:])


def test_run_without_figures_imports_no_plotting_and_no_scipy_stats(plain_run):
    run_dir, _, loaded = plain_run
    assert (run_dir / "summary.parquet").is_file() and "harness.cli" in loaded
    assert not {"matplotlib", "seaborn", "scipy.stats"} & loaded
    assert "harness.profiling.schema" not in loaded  # harness-profile's schema: stored only for its config


def test_a_run_composes_its_config_once(plain_run):
    """Hydra's get_mode would compose the whole config once more only to read hydra.mode (None)."""
    run_dir, count, _ = plain_run
    assert count == 1
    assert (run_dir / "summary.parquet").is_file()


def test_a_config_that_sets_hydra_mode_still_decides_the_mode(tmp_path):
    """An experiment in a --config-dir that sets hydra.mode=MULTIRUN: the command sweeps without -m,
    as Hydra's own get_mode (a composition) decides."""
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "always_sweep.yaml").write_text(
        "# @package _global_\nhydra:\n  mode: MULTIRUN\n  sweeper:\n    params:\n      workload.num_requests: 2,3\n")
    sweep = tmp_path / "sweep"
    count, out = _compositions(["--config-dir", str(tmp_path / "conf"), "experiment=always_sweep",
                                f"hydra.sweep.dir={sweep}", "analysis.figures=false", "loadgen.progress=false"],
                               forked=True)
    assert count == 2  # Hydra's get_mode composed (the config can set the mode), then the sweep
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())  # hydra.sweep.subdir: <num>_<overrides>
    assert jobs == ["0_workload.num_requests=2", "1_workload.num_requests=3"]
    assert all((sweep / job / "summary.parquet").is_file() for job in jobs)
    assert out.count("completed=") == 2


def test_the_task_runs_with_the_collector_on_and_start_up_frozen(tmp_path):
    """No collections while the command starts; the task runs with the collector on and start-up's
    objects frozen (its collections walk only what it made); main() leaves the collector as it found it."""
    code = (
        "import gc, sys\n"
        "from harness.hydra_entry import hydra_entry\n"
        "seen = {}\n"
        "@hydra_entry(config_name='config')\n"
        "def task(cfg):\n"
        "    seen.update(enabled=gc.isenabled(), frozen=gc.get_freeze_count())\n"
        f"sys.argv = ['task', 'hydra.run.dir={tmp_path}']\n"
        "task()\n"
        "print(seen['enabled'], seen['frozen'], gc.isenabled(), gc.get_freeze_count())\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    enabled, frozen, enabled_after, frozen_after = done.stdout.split()[-4:]
    assert enabled == "True" and int(frozen) > 20_000  # hydra, omegaconf, numpy, pandas, the config
    assert enabled_after == "True" and int(frozen_after) == 0
