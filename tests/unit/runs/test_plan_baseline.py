"""harness-plan's planner.baseline: a deployment planned, or the default left out of a shorter list."""

from __future__ import annotations

import pytest

from harness.errors import InputError
from harness.runs.plan import _check_baseline

PLANNED = ["naive_hetero", "prfaas_pd"]


def test_a_planned_baseline_is_kept():
    _check_baseline("prfaas_pd", PLANNED, [])


def test_the_default_baseline_may_be_left_out_of_a_shorter_list():
    _check_baseline("homogeneous_pd", PLANNED, ["planner.deployments=[naive_hetero,prfaas_pd]"])


@pytest.mark.parametrize(("baseline", "overrides"),
                         [("foo", ["planner.baseline=foo"]),
                          ("homogeneous_pd", ["planner.baseline=homogeneous_pd"]),  # chosen, yet not planned
                          ("foo", [])])  # set elsewhere (an experiment file)
def test_a_baseline_not_planned_is_refused_naming_the_valid_ones(baseline, overrides):
    with pytest.raises(InputError, match=rf"^planner.baseline='{baseline}' is not a deployment planned; "
                                         r"valid: naive_hetero, prfaas_pd"):
        _check_baseline(baseline, PLANNED, overrides)
