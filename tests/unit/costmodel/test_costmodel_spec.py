"""Model specs: KV bytes per token and fixed per-request state derived from the architecture."""

from __future__ import annotations

import pytest

from harness.costmodel import ModelSpec
from harness.errors import InputError

MIB = 2**20

# paper-facts 13.2 (bf16 KV, MLA = 576 elements/token/layer, GQA = 2 x kv_heads x head_dim).
KV_PER_TOKEN = [
    ("minimax_m25", 253_952),
    ("qwen3_235b", 192_512),
    ("qwen35_397b", 30_720),
    ("mimo_v2_flash", 23_040),
    ("ring_25_1t", 11_520),
    ("kimi_linear_48b", 8_064),
    ("kimi_k2", 70_272),
]

# Fixed per-request state (linear-attention recurrent state in fp32 + short conv; SWA window), MiB.
FIXED_STATE_MIB = [
    ("minimax_m25", 0.0, 0.01),
    ("qwen3_235b", 0.0, 0.01),
    ("kimi_k2", 0.0, 0.01),
    ("qwen35_397b", 183.0, 0.5),
    ("mimo_v2_flash", 24.4, 0.1),
    ("ring_25_1t", 280.0, 0.5),
    ("kimi_linear_48b", 41.4, 0.1),
]


@pytest.mark.parametrize(("model", "expected"), KV_PER_TOKEN)
def test_kv_bytes_per_token_matches_the_architecture(compose_cfg, model, expected):
    assert ModelSpec(compose_cfg([f"model={model}"]).model).kv_bytes_per_token == expected


@pytest.mark.parametrize(("model", "mib", "tol"), FIXED_STATE_MIB)
def test_fixed_state_per_request(compose_cfg, model, mib, tol):
    spec = ModelSpec(compose_cfg([f"model={model}"]).model)
    fixed = spec.kv_bytes(1_000_000) - spec.kv_bytes_per_token * 1_000_000  # beyond any SWA window
    assert fixed / MIB == pytest.approx(mib, abs=tol)


def test_swa_layers_ship_only_the_window(compose_cfg):
    """MiMo's SWA layers add per-token KV up to the 128-token window, then nothing."""
    spec = ModelSpec(compose_cfg(["model=mimo_v2_flash"]).model)
    per_swa_token = 39 * 8 * (192 + 128) * 2
    assert spec.kv_bytes(64) == pytest.approx(64 * (23_040 + per_swa_token))
    assert spec.kv_bytes(10_128) - spec.kv_bytes(10_000) == pytest.approx(128 * 23_040)


def test_hybrids_ship_far_less_kv_than_a_dense_model_at_32k(compose_cfg):
    """Table 2's point: at 32K the dense GQA model ships several times the bytes of every hybrid."""
    dense = ModelSpec(compose_cfg(["model=minimax_m25"]).model).kv_bytes(32_768)
    for hybrid in ("kimi_linear_48b", "mimo_v2_flash", "qwen35_397b", "ring_25_1t"):
        assert dense / ModelSpec(compose_cfg([f"model={hybrid}"]).model).kv_bytes(32_768) > 5


def test_prefill_flops_are_quadratic_only_through_full_attention(compose_cfg):
    """Doubling l doubles the linear part; the l^2 part comes from full-attention layers only."""
    spec = ModelSpec(compose_cfg(["model=minimax_m25"]).model)
    a, b, c, _ = spec.prefill_flops_coefficients()
    assert a == 2 * 10e9 and c == 0
    assert b == 62 * 48 * (128 + 128)
    linear_only = ModelSpec(compose_cfg(["model=kimi_linear_48b", "model.full_attention=null"]).model)
    assert linear_only.prefill_flops_coefficients()[1] == 0
    assert linear_only.prefill_flops(2000.0) == pytest.approx(2 * linear_only.prefill_flops(1000.0))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (["model.full_attention.kind=mqa"], "kind must be one of gqa, mla"),
        (["model.full_attention.q_heads=0"], "q_heads must be >= 1"),
        (["model.active_params_b=2000"], "exceeds total_params_b"),
        (["model.kv_dtype_bytes=0"], "kv_dtype_bytes must be > 0"),
    ],
)
def test_bad_specs_name_the_field(compose_cfg, override, message):
    with pytest.raises(InputError, match=message):
        ModelSpec(compose_cfg(["model=minimax_m25", *override]).model)


def test_a_model_without_attention_layers_is_rejected(compose_cfg):
    cfg = compose_cfg(["model=minimax_m25", "model.full_attention=null"]).model
    with pytest.raises(InputError, match="no attention layers"):
        ModelSpec(cfg)
