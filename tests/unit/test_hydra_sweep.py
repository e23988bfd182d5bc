"""A sweep composes each job's config once (harness/hydra_sweep.py): the configs the validation
composed are the ones the jobs run with, equal to what Hydra composes on its own, and a bad override
in any job is still reported before the first job runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_automatic_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from harness.errors import InputError
from harness.hydra_sweep import after_validation, sweep_composes_once
from harness.schema import validate_config

JOBS = ["workload.num_requests=10,20,30", "deployment=b", "loadgen.rate_rps=1.5"]


def _conf(root: Path) -> Path:
    """A config with a group, nested keys and an interpolation (a sweep of the harness's own
    configs would run its plan and report callbacks: seconds, for nothing this tests)."""
    (root / "deployment").mkdir(parents=True)
    (root / "config.yaml").write_text("defaults:\n  - deployment: a\n  - _self_\n"
                                      "workload: {num_requests: 5, seed: 0}\n"
                                      "loadgen: {rate_rps: 1.0, started: '${now:%H}'}\n")
    (root / "deployment" / "a.yaml").write_text("name: a\n")
    (root / "deployment" / "b.yaml").write_text("name: b\nrequests: ${workload.num_requests}\n")
    return root


@pytest.fixture
def multirun(tmp_path, monkeypatch):
    """Run a sweep through Hydra's own sweeper and basic launcher; the task only notes each job's
    config. Returns (the configs as YAML, in job order; how many times Hydra loaded a config)."""
    conf = _conf(tmp_path / "conf")
    loads: list[int] = []
    load = ConfigLoaderImpl.load_configuration

    def counted(self, *args, **kwargs):
        loads.append(1)
        return load(self, *args, **kwargs)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counted)

    seen: list[str] = []
    out_dirs: list[Path] = []

    def run(overrides: list[str], sweep_dir: str) -> tuple[list[str], int]:
        loads.clear()
        seen.clear()
        out_dirs.clear()

        def task(cfg) -> None:
            seen.append(OmegaConf.to_yaml(cfg, resolve=True) + OmegaConf.to_yaml(HydraConfig.get().job))
            out_dirs.append(Path(HydraConfig.get().runtime.output_dir))

        hydra = Hydra.create_main_hydra2(task_name="t", config_search_path=create_automatic_config_search_path(
            None, None, str(conf)))
        try:
            hydra.multirun(config_name="config", task_function=task,
                           overrides=[*overrides, f"hydra.sweep.dir={tmp_path / sweep_dir}",
                                      "hydra/job_logging=none", "hydra/hydra_logging=none"])
        finally:
            GlobalHydra.instance().clear()
        return list(seen), len(loads)

    run.seen = seen  # type: ignore[attr-defined]  # what the jobs saw, also when the sweep raised
    run.out_dirs = out_dirs  # type: ignore[attr-defined]
    return run


def test_each_job_is_composed_once_and_runs_with_hydras_own_config(multirun):
    own, own_loads = multirun(JOBS, "own")
    with sweep_composes_once():
        once, once_loads = multirun(JOBS, "once")
    assert len(own) == len(once) == 3
    assert [c.replace("/once", "/own") for c in once] == own  # the same configs, job by job
    assert own_loads == 1 + 2 * 3  # the sweep's config, then each job's twice: validation, launch
    assert once_loads == 1 + 3


def test_a_kept_config_resolves_now_as_the_sweep_did(multirun, tmp_path):
    """The sweep's folder is named by `${now:}` to the microsecond: each job resolves it from the cache
    copied from the sweep's config when it was composed (Hydra's `copy_cache`), so a kept config must
    carry that cache through its pickling, or the job writes to a folder of its own moment."""
    with sweep_composes_once():
        multirun(["workload.num_requests=10,20"], "stamped/${now:%H-%M-%S.%f}")
    (sweep_dir,) = (tmp_path / "stamped").iterdir()
    assert [d.parent for d in multirun.out_dirs] == [sweep_dir, sweep_dir]


def test_a_bad_override_in_the_last_job_stops_the_sweep_before_any_job_runs(multirun):
    with sweep_composes_once(), pytest.raises(ConfigCompositionException):
        multirun(["deployment=a,b,no_such_deployment"], "bad")
    assert multirun.seen == []


def test_a_job_out_of_range_stops_the_sweep_before_any_job_runs(multirun):
    with sweep_composes_once(validate_config), \
            pytest.raises(InputError, match=r"^job workload.num_requests=-1: workload.num_requests must be"):
        multirun(["workload.num_requests=10,-1", "deployment=b"], "range")
    assert multirun.seen == []


def test_a_held_line_is_written_once_the_jobs_are_validated_and_dropped_if_one_is_not(multirun, capsys):
    with sweep_composes_once():
        after_validation("held: the jobs are fine")
        multirun(["deployment=a,b"], "good")
    with pytest.raises(ConfigCompositionException), sweep_composes_once():
        after_validation("held: a job is not")  # e.g. the planner's view of the same bad override
        multirun(["deployment=a,no_such_deployment"], "bad")
    err = capsys.readouterr().err
    assert "held: the jobs are fine" in err and "held: a job is not" not in err


def test_hydras_own_methods_are_back_after_the_context():
    from hydra.plugins.sweeper import Sweeper

    load, validate = ConfigLoaderImpl.load_sweep_config, Sweeper.validate_batch_is_legal
    with sweep_composes_once():
        assert ConfigLoaderImpl.load_sweep_config is not load
    assert (ConfigLoaderImpl.load_sweep_config, Sweeper.validate_batch_is_legal) == (load, validate)
