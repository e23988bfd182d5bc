"""A probe design that does not cover the configuration being predicted is refused with one line, before
the engine starts: decode batches short of (or beyond) the deployment's slots, probe lengths that do not
span the validation workload's prompts."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from harness.errors import InputError
from harness.validation.coverage import check_coverage, check_probe_design


@pytest.mark.parametrize(("batches", "lengths", "slots", "message"), [
    ([1, 2, 3, 4], [32, 3072], 6, "experiment.calibration.batches=[1, 2, 3, 4] reach 4 streams together but "
                                  "deployment.slots=6: the decode step of 5..6 streams would be extrapolated"),
    ([1, 2, 4, 8], [32, 3072], 4, "experiment.calibration.batches=[1, 2, 4, 8] run 8 streams together but "
                                  "deployment.slots=4"),
    ([1, 2, 3, 4], [128, 1024], 4, "experiment.calibration.lengths span 128..1024 tokens but the workload's "
                                   "prompts span 64..2560"),
])
def test_a_design_short_of_the_configuration_is_refused(batches, lengths, slots, message):
    cal = OmegaConf.create({"batches": batches, "lengths": lengths})
    with pytest.raises(InputError) as err:
        check_coverage(cal, slots=slots, input_tokens=[64, 900, 2560])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_shipped_design_covers_its_own_configuration(compose_cfg):
    check_probe_design(compose_cfg(["experiment=validate_engine"]))


def test_six_slots_with_the_shipped_probes_is_refused(compose_cfg):
    """The issue's out-of-sample run (6 slots, probes for batches 1-4) would have been refused."""
    with pytest.raises(InputError, match=r"deployment.slots=6: the decode step of 5..6 streams"):
        check_probe_design(compose_cfg(["experiment=validate_engine", "deployment.slots=6"]))
    check_probe_design(compose_cfg(["experiment=validate_engine", "deployment.slots=6",
                                                  "experiment.calibration.batches=[1,2,3,4,5,6]"]))
