"""Probe results -> the overrides of a calibrated emulator run (harness/testbed_model.py): they compose, and
the composed config holds exactly the probed values."""

from __future__ import annotations

import pytest

from harness.deploy.handoff import Handoff
from harness.errors import InputError
from harness.testbed_model import overrides

PROBES = {
    "deployment.kv_handoff": "store_and_forward",
    "deployment.kv_save_s": {"base_s": 0.0031, "per_token_s": 6.2e-06},
    "deployment.kv_restore_s": {"base_s": 0.0049, "per_token_s": 4.4e-06},
    "deployment.kv_bytes_overhead": {"fixed_bytes": 192, "per_token_bytes": 16},
    "link.efficiency": 0.956,
    "link.sharing": "fifo",
    "prefill": {"kind": "polynomial", "coefficients": [0.011, 0.00025, 1.7e-07],
                "provenance": "[M] probed: 5 lengths x 3, it's 'cold'"},
    "decode": {"base_s": 2.0e-06, "per_seq_s": 0.0021, "per_token_s": 1.5e-06, "bs_max": 4},
}


def test_the_overrides_compose_to_the_probed_values(compose_cfg):
    args = overrides(PROBES)
    assert "link.sharing=fifo" in args and "deployment.kv_save_s.per_token_s=6.2e-06" in args
    cfg = compose_cfg(["experiment=testbed_scale", "deployment=prfaas_pd", *args])
    assert Handoff.from_config(cfg.deployment) == Handoff(True, 0.0031, 6.2e-06, 0.0049, 4.4e-06, 192, 16)
    assert cfg.link.efficiency == 0.956 and cfg.link.sharing == "fifo"
    prefill = cfg.model.profiles.cpu_local.prefill
    assert list(prefill.coefficients) == [0.011, 0.00025, 1.7e-07]
    assert prefill.provenance == PROBES["prefill"]["provenance"]
    decode = cfg.model.profiles.cpu_local.decode
    assert (decode.per_seq_s, decode.per_token_s, decode.bs_max) == (0.0021, 1.5e-06, 4)


def test_an_unknown_probe_key_names_the_valid_ones():
    with pytest.raises(InputError, match=r"testbed probe 'link\.burst' is not an emulator option; valid keys: "
                                         r"deployment\.kv_handoff, .*, prefill, decode"):
        overrides({"link.burst": 1})


def test_a_value_hydra_cannot_take_is_refused():
    with pytest.raises(InputError, match=r"link\.efficiency: nan is not a finite number"):
        overrides({"link.efficiency": float("nan")})
