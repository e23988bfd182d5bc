"""harness-profile against an engine without llama.cpp's fields (the fake engine, vLLM's preset): it sends
none of cache_prompt, timings_per_token or id_slot, takes the engine's prompt times from /metrics, and
recovers the fake's prefill curve (held-out lengths within 10%) and decode step."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from harness.errors import InputError
from harness.profile import profile_endpoint
from harness.schema import register_configs

from .fake_engine import FakeEngine
from .test_engine_agnostic_calibration import prefill_s, step_s

CONF = str(Path(__file__).resolve().parents[3] / "conf")
ARCH = ("profile.architecture={hidden_size: 384, layers: 6, q_heads: 6, kv_heads: 6, head_dim: 64, params_b: 0.035, "
        "weight_dtype_bytes: 2, kv_dtype_bytes: 2}")
DESIGN = ["profile.slots=4", "profile.slot_probe.probe=false", "profile.prefill.lengths=[128,512,1024,2048]",
          "profile.prefill.repeats=1", "profile.prefill.holdout_lengths=[384,1536]",
          "profile.prefill.holdout_repeats=1", "profile.cached.prefix_tokens=[512]", "profile.cached.new_tokens=[64]",
          "profile.cached.repeats=1", "profile.decode.batches=[1,2,4]", "profile.decode.holdout_batches=[3]",
          "profile.decode.prompt_tokens=[64,384]", "profile.decode.output_tokens=16", "profile.decode.repeats=1", ARCH]


def _cfg(url: str, tmp_path: Path, *overrides: str):
    register_configs("profile")
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return compose("profile", overrides=[f"target.url={url}", f"profile.out_dir={tmp_path}", *DESIGN, *overrides])


def test_profile_of_an_engine_without_llama_fields(tmp_path):
    with FakeEngine(prefill_s, step_s) as engine:
        doc = profile_endpoint(_cfg(engine.url, tmp_path, "engine=vllm"), tmp_path / "run")
    for body in engine.bodies:
        assert not {"cache_prompt", "timings_per_token", "id_slot"} & set(body), body
        assert body["min_tokens"] == body["max_tokens"] and body["ignore_eos"] is True
    held = [c for c in doc["holdout"] if c["probe"] == "prefill"]
    assert [c["input_tokens"] for c in held] == [384, 1536]
    assert all(abs(c["rel_error"]) < 0.10 for c in held) and all(c["pass"] for c in doc["holdout"]), doc["holdout"]
    rows = pd.read_parquet(tmp_path / "run" / "probes.parquet")
    pre = rows[rows["probe"] == "prefill"]
    assert (pre["server_prompt_ms"] / 1e3 - pre["input_tokens"].map(prefill_s)).abs().max() < 0.005  # /metrics
    dec = rows[(rows["probe"] == "decode") & (rows["stream"] == 0)]
    assert set(dec["step_source"]) == {"metrics"}
    for b, step in zip(dec["batch"], dec["step_s"], strict=True):
        assert step == pytest.approx(step_s(int(b)), rel=0.15)


def test_pinning_slots_on_an_engine_without_id_slot_is_refused(tmp_path):
    from harness.profiling.design import check_design

    with pytest.raises(InputError, match=r"profile.decode.pin_slots=true needs an engine that takes `id_slot`"):
        check_design(_cfg("http://127.0.0.1:9", tmp_path, "engine=vllm", "profile.decode.pin_slots=true"))
    check_design(_cfg("http://127.0.0.1:9", tmp_path, "engine=vllm"))  # its default: not pinned
