"""Sweep experiments and launchers: every experiment composes (with each swept value), the launcher
configs swap in cleanly, and a tiny real threshold sweep runs through the Hydra CLI with `-m`
(joblib, PlanCallback, ReportCallback) and yields one report and the Fig. 5(b) comparison."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import commands  # tests/commands.py
import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from harness.schema import register_configs

ROOT = Path(__file__).resolve().parents[2]
CONF = ROOT / "conf"
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
REPORT = "harness.analysis.callback.ReportCallback"
PLAN = "harness.plan.PlanCallback"


_COMPOSED: dict[tuple[str, ...], bytes] = {}


def compose_cfg(*overrides: str) -> DictConfig:
    """Composed once per override list in this module (several tests compose `experiment=<name>`
    alone); each caller gets its own copy: the composed config the first time, then one unpickled
    from it (flags and parents as composed; ~2 ms against ~15 ms for a deep copy)."""
    if overrides in _COMPOSED:
        cfg: DictConfig = pickle.loads(_COMPOSED[overrides])
        return cfg
    register_configs()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose("config", overrides=list(overrides), return_hydra_config=True)
    _COMPOSED[overrides] = pickle.dumps(cfg, protocol=pickle.HIGHEST_PROTOCOL)
    return cfg


def swept(cfg) -> dict[str, list[str]]:
    parsed = OverridesParser.create().parse_overrides([f"{k}={v}" for k, v in cfg.hydra.sweeper.params.items()])
    return {o.get_key_element(): list(o.sweep_string_iterator()) for o in parsed if o.is_sweep_override()}


def same(value, text: str) -> bool:
    try:
        return float(value) == float(text)
    except (TypeError, ValueError):
        return str(value).lower() == text.lower()


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_composes_at_its_first_and_last_sweep_point(name):
    """Each swept key is a real config path: composing a run with its first and last value works."""
    cfg = compose_cfg(f"experiment={name}")
    params = swept(cfg)
    assert params, f"{name}: no hydra.sweeper.params"
    callbacks = [c["_target_"] for c in (cfg.hydra.callbacks or {}).values()]
    if PLAN in callbacks:  # the report reads the planner's files: they must be written first
        assert REPORT in callbacks and callbacks.index(PLAN) < callbacks.index(REPORT)
    for pick in (0, -1):
        run = compose_cfg(f"experiment={name}", *(f"{k}={v[pick]}" for k, v in params.items()))
        for key, values in params.items():
            if key in run.hydra.runtime.choices:  # a config group: the option chosen
                assert run.hydra.runtime.choices[key] == values[pick], key
                continue
            node = run
            for part in key.split("."):
                node = node[part]
            assert same(node, values[pick]), key


@pytest.mark.parametrize(("name", "keys"), [
    ("threshold_sweep", ["deployment.router.threshold_tokens"]),
    ("split_sweep", ["deployment.local.n_prefill"]),
    ("bandwidth_sweep", ["deployment", "link.capacity_gbps"]),
    ("burstiness_sweep", ["deployment", "workload.arrivals.cv"]),
    ("threshold_bandwidth", ["deployment.router.threshold_tokens", "link.capacity_gbps"]),
])
def test_sweep_experiments_run_two_jobs_at_a_time_and_vary_what_they_say(name, keys):
    cfg = compose_cfg(f"experiment={name}")
    assert list(swept(cfg)) == keys
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher") and cfg.hydra.launcher.n_jobs == 2
    assert cfg.hydra.runtime.choices["hydra/launcher"] == "local_parallel"


def test_sweeps_fix_what_the_figures_assume():
    t = compose_cfg("experiment=threshold_sweep")
    assert (t.deployment.name, t.deployment.local.n_prefill, t.deployment.local.n_decode) == ("prfaas_pd", 3, 5)
    assert t.loadgen.rate_rps == float("inf")
    burst = compose_cfg("experiment=burstiness_sweep")
    assert burst.workload.name == "gamma_bursty" and burst.loadgen.rate_rps == 1.5


@pytest.mark.parametrize(("launcher", "target", "key"), [
    ("slurm", "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher", "submitit_folder"),
    ("ray_cluster", "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher", "ray"),
])
def test_cluster_launchers_compose_with_a_sweep_experiment_and_replace_joblib(launcher, target, key):
    cfg = compose_cfg("experiment=threshold_sweep", f"hydra/launcher={launcher}", "hydra.sweep.dir=/shared/t")
    assert cfg.hydra.launcher._target_ == target
    assert "n_jobs" not in cfg.hydra.launcher  # no joblib keys leak into another launcher's kwargs
    assert key in cfg.hydra.launcher
    if launcher == "slurm":
        assert cfg.hydra.launcher.submitit_folder == "/shared/t/.submitit/%j"
    else:
        assert cfg.hydra.launcher.ray.init.address == "auto"


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "t"
    # No figures per run (none is read here; each joblib worker would import matplotlib for two PNGs per
    # run, ~1.7 s of CPU); the sweep report's own figures stay on (its callback's `figures`).
    proc = commands.run(
        ["-m", "harness", "-m", "experiment=threshold_sweep",
         "deployment.router.threshold_tokens=5000,20000,50000", "workload.num_requests=400",
         f"hydra.sweep.dir={out}", "loadgen.progress=false", "analysis.figures=false",
         "+hydra.callbacks.report.figures=true"],
        cwd=ROOT, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return out, proc.stdout


def test_tiny_threshold_sweep_runs_in_parallel_and_reports_once(tiny_sweep):
    out, stdout = tiny_sweep
    assert "Joblib.Parallel(n_jobs=2" in stdout
    assert stdout.count("swept: deployment.router.threshold_tokens") == 1  # the report callback fired once
    assert stdout.count("planner: wrote") == 1
    report = pd.read_parquet(out / "report.parquet")
    assert sorted(report["deployment.router.threshold_tokens"]) == [5000, 20000, 50000]
    assert (report["n_prefill"] == 3).all() and (report["n_decode"] == 5).all()
    assert len(list(out.glob("*/summary.parquet"))) == 3 and not list(out.glob("*/*.png"))  # figures=false held
    for name in ("fig_sweep_threshold_tokens.png", "fig_sweep_threshold_tokens_ttft.png", "fig_plan_threshold.png",
                 "fig_kv_throughput.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG" and (out / name).stat().st_size > 5000, name


def test_tiny_threshold_sweep_peaks_where_the_planner_says(tiny_sweep):
    """Capacity at t = 20K beats both a low t (PrfaaS flooded with short requests) and a high t (PD-P
    flooded with long ones); each run's planner Lambda sits on the PlanCallback's Lambda-vs-t curve."""
    out, _ = tiny_sweep
    report = pd.read_parquet(out / "report.parquet").set_index("deployment.router.threshold_tokens")
    cap = report["steady_throughput_rps"]
    assert cap[20000] > cap[5000] and cap[20000] > cap[50000]
    curve = pd.read_parquet(out / "plan_sweep_threshold.parquet")
    assert set(curve["deployment"]) == {"prfaas_pd"} and set(curve["n_prefill"]) == {3}
    on_curve = np.interp(report.index.to_numpy(float), curve["threshold_tokens"], curve["lambda_rps"])
    assert report["plan_lambda_max_rps"].to_numpy() == pytest.approx(on_curve, rel=0.01)
    best = curve.loc[curve["lambda_rps"].idxmax(), "threshold_tokens"]
    assert 5000 < best < 50000
    plan = json.loads((out / "plan.json").read_text())
    assert set(plan) == {"prfaas_pd", "ratios"} and plan["prfaas_pd"]["n_prefill"] == 3
