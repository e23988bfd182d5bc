"""Eq. 2 scale-out projections from each model's Table 3 KV throughput (paper §2.3)."""

from __future__ import annotations

import pytest

from harness.errors import InputError
from harness.planner.projection import egress_gbps, measured_phi, projection_rows


def b_out(compose_cfg, model, gpus, tokens):
    phi, _ = measured_phi(compose_cfg([f"model={model}"]).model)
    return float(egress_gbps(phi(tokens), gpus, 8))


@pytest.mark.parametrize(
    ("model", "gpus", "tokens", "target_gbps", "rel"),
    [
        ("minimax_m25", 512, 32768, 3800, 0.03),  # "3.8 Tbps"
        ("qwen3_235b", 512, 32768, 2100, 0.03),  # "2.1 Tbps"
        ("ring_25_1t", 512, 32768, 170, 0.03),  # "~170 Gbps"
        ("ring_25_1t", 10000, 131072, 1800, 0.03),  # "~1.8 Tbps" for a 10,000-GPU datacenter
    ],
)
def test_paper_projections(compose_cfg, model, gpus, tokens, target_gbps, rel):
    assert b_out(compose_cfg, model, gpus, tokens) == pytest.approx(target_gbps, rel=rel)


def test_routing_only_long_requests_keeps_ring_under_100_gbps(compose_cfg):
    assert b_out(compose_cfg, "ring_25_1t", 512, 131072) < 100


def test_projection_rows_and_models_without_a_table(compose_cfg):
    phi, table = measured_phi(compose_cfg(["model=minimax_m25"]).model)
    rows = projection_rows("minimax_m25", phi, [8192, 32768], [512, 10000], 8, "measured", table["hardware"])
    assert len(rows) == 4 and rows[1]["instances"] == 64 and rows[1]["phi_kv_gbps"] == 59.93
    assert measured_phi(compose_cfg(["model=kimi_k2"]).model) is None
    with pytest.raises(InputError, match="gpus_per_instance must be >= 1"):
        egress_gbps(1.0, 512, 0)
