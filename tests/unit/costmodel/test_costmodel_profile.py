"""Instance profiles: measured tables, inferred curves, roofline fill-in, decode and bad inputs."""

from __future__ import annotations

import numpy as np
import pytest

from harness.costmodel import build_profile
from harness.errors import InputError

MIB = 2**20
TABLE5 = [  # tokens, S_kv MiB, T_prefill s  (paper Table 5, 8xH200)
    (1024, 190.8, 0.44),
    (8192, 308.9, 0.72),
    (32768, 701.3, 1.84),
    (131072, 2316.3, 7.40),
]
MODELS = ["internal_1t", "kimi_linear_48b", "mimo_v2_flash", "qwen35_397b", "ring_25_1t", "minimax_m25",
          "qwen3_235b", "kimi_k2"]
FITS = [(m, hw) for m in MODELS for hw in ("h200", "h20") if (m, hw) != ("ring_25_1t", "h20")]


@pytest.fixture(scope="module")
def internal(compose_cfg, hardware):
    model = compose_cfg([]).model
    return {hw: build_profile(model, hardware[hw], gpus_per_instance=8) for hw in ("h200", "h20")}


@pytest.mark.parametrize(("tokens", "mib", "seconds"), TABLE5)
def test_table5_is_reproduced_at_its_own_points(internal, tokens, mib, seconds):
    prof = internal["h200"]
    assert prof.prefill_s(tokens) == pytest.approx(seconds, abs=1e-12)
    assert prof.kv_bytes(tokens) == pytest.approx(mib * MIB, rel=1e-12)


def test_table5_interpolates_linearly_between_and_extrapolates_beyond(internal):
    prof = internal["h200"]
    assert prof.prefill_s(20480) == pytest.approx((0.72 + 1.84) / 2)
    assert prof.prefill_s(262144) == pytest.approx(7.40 + (7.40 - 1.84) / 98304 * 131072)
    assert 0.39 < prof.prefill_s(0) < 0.44


def test_kv_bytes_are_the_same_on_both_sides_of_the_link(internal):
    lengths = np.array([0, 500, 1024, 19456, 45000, 131072, 200000])
    np.testing.assert_allclose(internal["h20"].kv_bytes(lengths), internal["h200"].kv_bytes(lengths))
    # the linear decomposition is the fit of Table 5: ~17,143 B/token + ~172 MiB [paper-facts 12.2]
    assert internal["h200"].kv_bytes_per_token == pytest.approx(17_143, rel=0.01)
    assert internal["h200"].state_bytes / MIB == pytest.approx(172.0, abs=2.0)


@pytest.mark.parametrize(("tokens", "seconds"), [(1024, 0.60), (8192, 1.55), (19400, 3.10), (32768, 5.05),
                                                 (65536, 10.25), (131072, 22.6)])
def test_inferred_h20_curve(internal, tokens, seconds):
    """paper-facts 12.6 lists the inferred H20 curve's values (2-3 significant digits)."""
    assert internal["h20"].prefill_s(tokens) == pytest.approx(seconds, abs=0.05)
    assert "INFERRED" in internal["h20"].provenance["prefill_s"]
    assert "fitted to Table 6" in internal["h20"].provenance["prefill_s"]  # calibration, said where it lives


def test_inferred_h20_decode_is_the_slo_constant(internal):
    prof = internal["h20"]
    assert (prof.bs_max, prof.t_decode_s) == (20, 0.025)
    assert prof.decode_step_s(1, 1000) == prof.decode_step_s(20, 2_000_000) == 0.025
    assert prof.bs_max / (prof.t_decode_s * 1024) == pytest.approx(0.78125)  # req/s per decode instance


def test_a_cached_prefix_costs_the_marginal_compute_plus_one_pass_overhead(internal):
    """Prefilling a+b tokens in two passes costs one pass plus one extra fixed overhead T(0)."""
    for prof in internal.values():
        t0 = prof.prefill_s(0)
        for a, b in [(1000, 5000), (30000, 2000), (64000, 64000)]:
            assert prof.prefill_s(a) + prof.prefill_s(b, cached_tokens=a) == pytest.approx(prof.prefill_s(a + b) + t0)
        assert prof.prefill_s(4000, cached_tokens=0) == prof.prefill_s(4000)
        assert prof.prefill_s(4000, cached_tokens=60000) > prof.prefill_s(4000)  # attention over the cache


@pytest.mark.parametrize(("model", "hw"), FITS)
def test_profiles_are_monotone_and_scalar_matches_vector(compose_cfg, hardware, model, hw):
    prof = build_profile(compose_cfg([f"model={model}"]).model, hardware[hw])
    l = np.array([0, 1, 100, 1024, 5000, 32768, 100000, 131072, 400000], dtype=float)
    t, kv = prof.prefill_s_vec(l), prof.kv_bytes(l)
    assert np.all(np.diff(t) >= 0) and np.all(t > 0)
    assert np.all(np.diff(kv) >= 0) and np.all(kv >= 0)
    np.testing.assert_allclose(t, [prof.prefill_s(int(x)) for x in l], rtol=1e-12)
    np.testing.assert_allclose(kv, [prof.kv_bytes(int(x)) for x in l], rtol=1e-12)
    steps = [prof.decode_step_s(b, b * ctx) for b in (1, 8, 64) for ctx in (1000, 32768)]
    assert steps == sorted(steps) or all(s == steps[0] for s in steps)
    assert prof.bs_max >= 1 and prof.price_per_instance > 0


@pytest.mark.parametrize(("model", "hw"), [f for f in FITS if f[0] != "internal_1t" or f[1] != "h20"])
def test_roofline_bs_max_is_the_largest_batch_meeting_the_slo(compose_cfg, hardware, model, hw):
    prof = build_profile(compose_cfg([f"model={model}"]).model, hardware[hw])
    ctx = hardware[hw].decode_reference_context_tokens
    assert prof.decode_step_s(prof.bs_max, prof.bs_max * ctx) <= 0.025
    per_seq = prof.kv_bytes(ctx)
    next_too_slow = prof.decode_step_s(prof.bs_max + 1, (prof.bs_max + 1) * ctx) > 0.025
    next_too_big = (prof.bs_max + 1) * per_seq > prof.kv_capacity_bytes
    assert next_too_slow or next_too_big


TABLE3 = {  # Phi_kv Gbps at 1K/8K/32K/128K, 8xH200, SGLang [P]
    "kimi_linear_48b": [1.19, 2.29, 3.87, 4.88],
    "mimo_v2_flash": [0.82, 2.85, 4.66, 4.71],
    "qwen35_397b": [4.13, 6.28, 8.25, 7.47],
    "ring_25_1t": [7.27, 4.47, 2.59, 1.46],
    "minimax_m25": [4.94, 32.87, 59.93, 47.82],
    "qwen3_235b": [4.12, 22.42, 33.35, 21.50],
}


@pytest.mark.parametrize("model", sorted(TABLE3))
def test_roofline_h200_kv_throughput_is_within_2x_of_table3(compose_cfg, hardware, model):
    """The roofline was fitted on the internal model only; Table 3 is independent data for six others."""
    prof = build_profile(compose_cfg([f"model={model}"]).model, hardware["h200"])
    assert prof.provenance["prefill_s"].startswith("roofline")
    ratio = prof.phi_kv_gbps(np.array([1024, 8192, 32768, 131072.0])) / np.array(TABLE3[model])
    assert np.all((ratio > 0.5) & (ratio < 2.0)), ratio


def test_faster_hardware_prefills_faster(compose_cfg, hardware):
    model = compose_cfg(["model=minimax_m25"]).model
    t = {hw: build_profile(model, hardware[hw]).prefill_s(65536) for hw in ("h20", "h200", "b200", "rubin_cpx")}
    assert t["h20"] > t["h200"] > t["b200"] > t["rubin_cpx"]


def test_more_gpus_per_instance_prefill_faster_under_the_roofline(compose_cfg, hardware):
    model = compose_cfg(["model=minimax_m25"]).model
    t16, t8 = (build_profile(model, hardware["h200"], gpus).prefill_s(65536) for gpus in (16, 8))
    assert t16 < t8


def test_a_profile_taken_at_another_gpu_count_falls_back_to_the_roofline(internal, compose_cfg, hardware):
    prof = build_profile(compose_cfg([]).model, hardware["h200"], gpus_per_instance=16)
    assert prof.provenance["prefill_s"].startswith("roofline")
    assert "8 GPUs per instance" in prof.provenance["profile"]
    assert prof.kv_bytes(8192) == internal["h200"].kv_bytes(8192)  # measured S_kv is model-level


def test_price_scales_with_gpus(internal):
    assert internal["h200"].price_per_instance == 2 * internal["h20"].price_per_instance == 16.0


def test_user_csv_profile(tmp_path, compose_cfg, hardware):
    csv = tmp_path / "prof.csv"
    csv.write_text("input_tokens,prefill_s,kv_bytes\n8192,1.0,2000\n1024,0.5,1000\n32768,3.0,5000\n")
    cfg = compose_cfg(["model=minimax_m25", f"+model.profiles.h200={{prefill:{{kind:csv,csv:'{csv}'}}}}"])
    prof = build_profile(cfg.model, hardware["h200"])
    assert prof.prefill_s(8192) == 1.0 and prof.prefill_s(4608) == pytest.approx(0.75)
    assert prof.kv_bytes(32768) == 5000.0 and prof.kv_bytes(1024) == 1000.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tokens,prefill_s\n1,2\n", "missing column"),
        ("input_tokens,prefill_s\n1024,0.5\n2048,abc\n", ":3: not a number"),
        ("input_tokens,prefill_s\n1024,0.5\n2048,0.4\n", "must not fall with length"),
        ("input_tokens,prefill_s\n1024,0.5\n", "at least 2 points"),
    ],
)
def test_bad_csv_profiles_are_reported(tmp_path, compose_cfg, hardware, text, message):
    csv = tmp_path / "bad.csv"
    csv.write_text(text)
    cfg = compose_cfg(["model=minimax_m25", f"+model.profiles.h200={{prefill:{{kind:csv,csv:'{csv}'}}}}"])
    with pytest.raises(InputError, match=message):
        build_profile(cfg.model, hardware["h200"])


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model.profiles.h200.prefill.kind=spline"], "kind must be one of table, csv, polynomial, roofline"),
        (["model.profiles.h200.prefill.seconds=[0.44,0.72,0.5,7.4]"], "must not fall with length"),
        (["model.profiles.h20.prefill.coefficients=[1.0,-1e-4]"], "negative or not finite"),
        (["model.profiles.h20.decode.kind=magic"], "decode.kind must be one of constant, linear, per_batch, roofline"),
        (["model.measured_kv.interpolation=cubic"], "interpolation must be one of"),
        (["+model.profiles.h200.prefill.second=[1]"], r"unknown key 'second'; valid keys: kind, tokens, seconds"),
    ],
)
def test_bad_profile_configs_name_the_field(compose_cfg, hardware, overrides, message):
    cfg = compose_cfg(overrides)
    with pytest.raises(InputError, match=message):
        for hw in ("h200", "h20"):
            build_profile(cfg.model, hardware[hw])


def test_weights_that_do_not_fit_are_an_input_error(compose_cfg, hardware):
    with pytest.raises(InputError, match=r"ring_25_1t: weights .* do not fit 8 x h20"):
        build_profile(compose_cfg(["model=ring_25_1t"]).model, hardware["h20"])
    assert build_profile(compose_cfg(["model=ring_25_1t"]).model, hardware["h20"], gpus_per_instance=16).bs_max >= 1


def test_bad_gpu_count_and_missing_hardware(internal, compose_cfg, hardware):
    with pytest.raises(InputError, match="gpus_per_instance must be >= 1"):
        build_profile(compose_cfg([]).model, hardware["h200"], gpus_per_instance=0)
    with pytest.raises(InputError, match="hardware is missing"):
        build_profile(compose_cfg([]).model, None)
    with pytest.raises(InputError, match=r"model.name is missing"):
        build_profile({"name": "???"}, hardware["h200"])


def test_eq1_reproduces_table5_kv_throughput_column(internal):
    """Phi_kv = S_kv / T_prefill with MiB binary and Gbps decimal gives Table 5's 3.61/3.59/3.19/2.62 Gbps."""
    phi = internal["h200"].phi_kv_gbps(np.array([1024, 8192, 32768, 131072.0]))
    np.testing.assert_allclose(phi, [3.61, 3.59, 3.19, 2.62], rtol=0.015)


def test_linear_fit_option_for_measured_kv(compose_cfg, hardware):
    """The least-squares line through Table 5: ~172.0 MiB + ~17,143 B/token (paper-facts 12.2)."""
    prof = build_profile(compose_cfg(["model.measured_kv.interpolation=linear_fit"]).model, hardware["h200"])
    assert prof.kv_bytes(0) / MIB == pytest.approx(172.0, abs=0.5)
    assert prof.kv_bytes(100_000) - prof.kv_bytes(0) == pytest.approx(100_000 * 17_143, rel=0.002)
    assert "linear-fit" in prof.provenance["kv_bytes"]


LINEAR_H20 = ["model.profiles.h20.decode.kind=linear", "+model.profiles.h20.decode.base_s=0.01",
              "+model.profiles.h20.decode.per_seq_s=0.0005", "+model.profiles.h20.decode.per_token_s=1e-8"]


def test_linear_decode_grows_with_batch_and_context(compose_cfg, hardware):
    profile = build_profile(compose_cfg([*LINEAR_H20, "model.profiles.h20.decode.bs_max=32"]).model, hardware["h20"])
    assert profile.bs_max == 32
    one, eight = profile.decode_step_s(1, 1000.0), profile.decode_step_s(8, 1000.0)
    assert one == pytest.approx(0.01 + 0.0005 + 1e-5) and eight > one
    assert profile.decode_step_s(8, 64_000.0) > eight


def test_linear_decode_without_bs_max_is_sized_by_the_slo(compose_cfg, hardware):
    """At 40 tok/s the step budget is 25 ms; at 32K context per sequence each sequence costs
    0.5 ms + 0.33 ms, so (25 - 10) / 0.8277 -> 18 sequences; a slower SLO admits more."""
    model = compose_cfg([*LINEAR_H20, "model.profiles.h20.decode.bs_max=null"]).model
    at40 = build_profile(model, hardware["h20"], slo_tokens_per_s=40.0)
    at20 = build_profile(model, hardware["h20"], slo_tokens_per_s=20.0)
    assert at40.bs_max == 18
    assert at20.bs_max > at40.bs_max
