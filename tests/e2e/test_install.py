"""A normal (not editable) install works from any directory: build the wheel, install it into a fresh
venv, and run the console scripts from a directory outside the source tree. Configs (`conf/`) and the
sample traces must come from the installed package, not from the checkout.

Offline: the wheel is built without build isolation (setuptools' PEP 517 backend from this environment,
called directly: what `pip wheel --no-build-isolation` runs, without pip's two extra interpreters), the
venv gets no pip, and its dependencies are this environment's site-packages through a `.pth` file (the
wheel itself is installed with `--no-deps`), so nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv as venv_module
import zipfile
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.install

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ("harness", "conf", "traces", "pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE")
TIMEOUT_S = 300


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv bin dir, a working directory outside the repo, env, wheel path)."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "local")
    for name in SOURCE:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy2)(ROOT / name, src / name, **(
            {"ignore": ignore} if (ROOT / name).is_dir() else {}))
    (tmp / "dist").mkdir()
    backend = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"
    build = _run([sys.executable, "-c", backend, str(tmp / "dist")], cwd=src)
    assert build.returncode == 0, f"wheel build failed (needs setuptools>=77, the test extra):\n{build.stderr}"
    (wheel,) = (tmp / "dist").glob("prfaas_harness-*.whl")

    venv = tmp / "venv"
    venv_module.create(venv, with_pip=False)  # what `python -m venv --without-pip` does, in this process
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    new_python = bin_dir / "python"
    site = _run([str(new_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp)
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    # Dependencies from this environment; .pth files in it (an editable install of the checkout) are
    # not processed for a directory added this way, so `harness` can only come from the wheel.
    (Path(site.stdout.strip()) / "_harness_test_deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    # --no-compile: the commands compile what they import (under `make test`'s PYTHONPYCACHEPREFIX the .pyc
    # files pip would write beside the sources are never read anyway).
    install = _run([sys.executable, "-m", "pip", "--python", str(new_python), "install", "--no-deps", "--no-index",
                    "--no-compile", "-q", str(wheel)], cwd=tmp)
    assert install.returncode == 0, install.stderr

    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return bin_dir, elsewhere, env, wheel


def test_wheel_carries_configs_and_traces(installed):
    *_, wheel = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "harness/conf/config.yaml" in names and "harness/conf/deployment/prfaas_pd.yaml" in names
    assert "harness/traces/mooncake_conversation_trace.jsonl.gz" in names
    assert not any(n.startswith("harness/conf/local/") for n in names)  # machine-local overrides stay local


def test_package_is_the_installed_one(installed):
    bin_dir, cwd, env, _ = installed
    done = _run([str(bin_dir / "python"), "-c", "import harness, harness.resources as r; "
                 "print(harness.__file__); print(r.conf_dir())"], cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    module, conf = done.stdout.split()
    venv = bin_dir.parent.resolve()
    assert Path(module).resolve().is_relative_to(venv) and Path(conf).resolve().is_relative_to(venv)


def test_help_lists_the_config_groups(installed):
    bin_dir, cwd, env, _ = installed
    done = _run([str(bin_dir / "harness"), "--help"], cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    assert "homogeneous_pd, naive_hetero, prfaas_dynamic, prfaas_pd" in done.stdout and "== Usage ==" in done.stdout


def test_sim_run_and_trace_replay_from_another_directory(installed):
    bin_dir, cwd, env, _ = installed
    common = ["workload.num_requests=5", "loadgen.progress=false", "analysis.figures=false"]
    for workload, out in (("paper_lognormal", "run_synthetic"), ("mooncake_conversation", "run_trace")):
        done = _run([str(bin_dir / "harness"), f"workload={workload}", f"hydra.run.dir={out}", *common], cwd=cwd,
                    env=env)
        assert done.returncode == 0, done.stderr
        summary = pd.read_parquet(cwd / out / "summary.parquet").iloc[0]
        assert summary["n_requests"] == 5 and summary["completed"] == 5


def test_plan_from_another_directory(installed):
    bin_dir, cwd, env, _ = installed
    done = _run([str(bin_dir / "harness-plan"), "hydra.run.dir=plan"], cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    doc = json.loads((cwd / "plan" / "plan.json").read_text())
    assert {"homogeneous_pd", "naive_hetero", "prfaas_pd"} <= set(doc)


def test_trace_cli_finds_packaged_traces_and_names_a_missing_one(installed):
    bin_dir, cwd, env, _ = installed
    done = _run([str(bin_dir / "harness-trace"), "stats", "traces/azure_sample.csv", "--json"], cwd=cwd, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["n_requests"] > 0
    missing = _run([str(bin_dir / "harness"), "workload=mooncake_conversation", "workload.path=traces/nope.jsonl",
                    "hydra.run.dir=bad"], cwd=cwd, env=env)
    assert missing.returncode == 2
    assert "traces/nope.jsonl" in missing.stderr and "not found" in missing.stderr
    assert "Traceback" not in missing.stderr


def test_gate_finds_packaged_gate_files(installed):
    bin_dir, cwd, env, _ = installed
    done = _run([str(bin_dir / "harness-gate"), "no_results_here", "--gate", "conf/gates/paper_case.yaml"], cwd=cwd,
                env=env)
    assert done.returncode == 2  # the gate file loads; then the missing results folder is the one error
    assert "no_results_here" in done.stderr and "gate file" not in done.stderr
