"""Engine presets (conf/engine/) set the emulator's engine model in validate_engine: llama-server's is
exactly the model the project's engine was validated with; vLLM's is one shared pass per step under a
token budget, no slots to pin, no tiles, a block-pool prefix cache; both compose and run."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf, open_dict

import harness.validation.resolvers as resolvers
from harness.runs.sim import run_sim
from harness.validation.coverage import check_engine

CONF = Path(__file__).resolve().parents[3] / "conf"
KEYS = ("separate_passes", "slot_layout", "slot_prompt_cache", "tile_tokens", "chunk_tokens", "ubatch_tokens",
        "wake_after_s")
# The aggregated model as validated against llama-server (docs/results/engine-validation.md), before presets.
LLAMA = dict(zip(KEYS, (True, True, True, 64, 2048, 512, 0.5), strict=True))
VLLM = dict(zip(KEYS, (False, False, False, 0, 2048, 2048, 0.5), strict=True))


@pytest.mark.parametrize(("engine", "expected", "pinned"), [("llama_server", LLAMA, True), ("vllm", VLLM, False)])
def test_the_preset_sets_the_engine_model(compose_cfg, engine, expected, pinned):
    cfg = compose_cfg(["experiment=validate_engine", f"engine={engine}"])
    assert {k: cfg.deployment[k] for k in KEYS} == expected
    assert cfg.experiment.calibration.pin_slots is pinned  # pinned probes need id_slot


def test_llama_server_is_the_default(compose_cfg):
    assert compose_cfg(["experiment=validate_engine"]).engine.name == "llama_server"


@pytest.mark.parametrize("engine", sorted(p.stem for p in (CONF / "engine").glob("*.yaml")))
def test_each_preset_runs_the_emulator(compose_cfg, engine, monkeypatch):
    """The validation workload through the emulator built from the preset (a measured profile standing in
    for the calibration's), every request served."""
    profiles = yaml.safe_load((CONF / "model" / "random_llama_35m.yaml").read_text())["profiles"]
    monkeypatch.setattr(resolvers, "STATE", {"capacity_rps": 2.0, "profiles": profiles})
    cfg = OmegaConf.create(OmegaConf.to_container(compose_cfg(["experiment=validate_engine", f"engine={engine}",
                                                               "workload.num_requests=20"])))
    with open_dict(cfg):
        cfg.pop("hydra", None)
    frame = run_sim(cfg).requests
    assert len(frame) == 20 and frame["error"].isna().all()


def test_another_engine_needs_its_url(compose_cfg):
    from harness.errors import InputError

    with pytest.raises(InputError, match=r"engine=vllm: validate_engine starts only llama-server .* target.url="):
        check_engine(compose_cfg(["experiment=validate_engine", "engine=vllm"]))
    check_engine(compose_cfg(["experiment=validate_engine", "engine=vllm",
                                                         "target.url=http://127.0.0.1:9"]))
