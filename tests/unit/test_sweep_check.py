"""The sweep check (harness/sweep_check.py): the jobs it composes are the sweep's, in the sweeper's order, and a
job that cannot run is named by the override that makes it so. (tests/e2e/test_exit_codes.py runs it in a
command: a job out of range or an unknown option stops the sweep before any job runs, in one line.)"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from harness.resources import help_config_groups
from harness.sweep_check import job_label, sweep_jobs


def _sweep(params: dict[str, str], task: list[str]) -> DictConfig:
    return OmegaConf.create({"hydra": {"sweeper": {"params": params}, "overrides": {"task": task}}})


def test_jobs_are_every_combination_with_the_command_line_winning():
    config = _sweep({"deployment": "a,b", "loadgen.rate_rps": "1,2"},
                    ["loadgen.rate_rps=5", "workload.num_requests=3,4", "~experiment"])
    jobs = sweep_jobs(config)
    assert jobs == [
        ["loadgen.rate_rps=5", "~experiment", "deployment=a", "workload.num_requests=3"],
        ["loadgen.rate_rps=5", "~experiment", "deployment=a", "workload.num_requests=4"],
        ["loadgen.rate_rps=5", "~experiment", "deployment=b", "workload.num_requests=3"],
        ["loadgen.rate_rps=5", "~experiment", "deployment=b", "workload.num_requests=4"],
    ]


def test_a_sweep_whose_values_cannot_be_listed_checks_the_other_keys():
    jobs = sweep_jobs(_sweep({}, ["deployment=glob(*)", "workload.seed=1,2"]))
    assert jobs == [["workload.seed=1"], ["workload.seed=2"]]


def test_a_job_is_named_by_the_override_the_message_names():
    job = ["loadgen.progress=false", "workload.num_requests=-1", "deployment=a"]
    assert job_label(job, "workload.num_requests must be >= 1, got -1") == "workload.num_requests=-1"
    assert job_label(job, "something else") == " ".join(job)


def test_the_help_pages_list_the_options_a_user_picks():
    lines = help_config_groups().splitlines()
    deployment = next(line for line in lines if line.startswith("  deployment: "))
    assert "prfaas_pd" in deployment and "base_deployment" not in deployment
    assert not any(line.lstrip().startswith(("hydra", "local")) for line in lines)
