"""Sweep job directory names stay short and stable however many overrides a job has (harness/job_dirs.py)."""

from __future__ import annotations

import pytest

from harness.job_dirs import MAX_NAME_BYTES, job_subdir


def test_a_short_name_is_hydras_own():
    assert job_subdir(3, "deployment=prfaas_pd,loadgen.rate_rps=2.0") == "3_deployment=prfaas_pd,loadgen.rate_rps=2.0"
    assert job_subdir(0, "") == "0"


@pytest.mark.parametrize("n", [14, 30, 200])
def test_a_long_name_is_cut_hashed_and_stable(n):
    overrides = ",".join(f"planner.key_{i:03d}=value_{i}" for i in range(n)) + ",deployment=naive_hetero"
    name = job_subdir(12, overrides)
    assert len(name.encode()) <= MAX_NAME_BYTES and name.startswith("12_deployment=naive_hetero,planner.key_000=")
    assert name == job_subdir(12, overrides)  # stable
    assert name != job_subdir(12, overrides.replace("value_1,", "value_x,"))  # any override changes the hash


def test_multibyte_values_are_cut_on_a_character():
    name = job_subdir(1, "workload.name=" + "é" * 300)
    assert len(name.encode()) <= MAX_NAME_BYTES
    name.encode().decode()  # whole characters
