"""The validation calibration's prefill table fit, its held-out and mixed-step checks, and the
niceness option (no engine: probe rows are made here)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from omegaconf import OmegaConf

from harness.costmodel import build_profile
from harness.engine.server import set_niceness
from harness.errors import InputError
from harness.validation.calibrate import checks, fit, fit_mixed, prefill_curve

from .test_aggregated import HARDWARE, MODEL

LENGTHS = (32, 64, 128, 192, 256, 384, 512, 640, 768, 1024, 1536, 2048)


def _ubatch_curve(n: float) -> float:
    """A llama.cpp-like prefill: a per-token cost, a per-512-token-ubatch cost, attention growing with n."""
    return 0.002 + 2.5e-4 * n + 0.004 * np.ceil(n / 512) + 8e-8 * n * n


def _round(curve, noise=0.0, seed=0, holdout=(96, 320, 896, 1280)):
    rng = np.random.default_rng(seed)
    pre = [{"input_tokens": n, "role": role, "ttft_s": curve(n) * (1 + noise * rng.standard_normal())}
           for role, ls in (("fit", LENGTHS), ("holdout", holdout)) for n in ls for _ in range(3)]
    dec = [{"batch": b, "prompt_tokens": p, "context_tokens": b * (p + 32), "step_s": s}
           for b, s in ((1, 0.002), (2, 0.007), (3, 0.0085), (4, 0.009)) for p in (128, 448)]
    return {"prefill": pre, "decode": dec, "cached": [], "mixed": []}


def test_table_fit_through_every_length_reproduces_the_probe_medians():
    block = fit([_round(_ubatch_curve)], hardware="h", slots=4, source="t")["h"]["prefill"]
    assert block["kind"] == "table" and block["tokens"] == list(LENGTHS)
    assert block["seconds"] == pytest.approx([_ubatch_curve(n) for n in LENGTHS], rel=1e-6)


def test_table_with_corners_predicts_held_out_lengths_of_an_ubatch_curve():
    """Held-out lengths (never fitted) are predicted from the fitted corners, within 5% here."""
    rounds = [_round(_ubatch_curve)]
    knots = [32, 128, 256, 512, 1024, 2048]
    table = fit(rounds, hardware="h", slots=4, source="t", knots=knots)["h"]
    assert table["prefill"]["tokens"] == knots
    held = checks(rounds, table)["prefill_holdout"]
    assert [c["input_tokens"] for c in held] == [96, 320, 896, 1280]
    assert max(abs(c["rel_error"]) for c in held) < 0.05


def test_table_fit_is_non_decreasing_on_noisy_probes_and_builds_a_profile():
    block = fit([_round(_ubatch_curve, noise=0.15, seed=4)], hardware="cpu_local", slots=4, source="t",
                knots=[32, 128, 512, 2048, 9999])
    pre = block["cpu_local"]["prefill"]
    assert pre["tokens"] == [32, 128, 512, 2048]  # corners beyond the probed lengths are dropped
    assert all(b >= a for a, b in zip(pre["seconds"], pre["seconds"][1:], strict=False))
    profile = build_profile(OmegaConf.create({**MODEL, "profiles": block}), OmegaConf.create(HARDWARE),
                            gpus_per_instance=1)
    assert profile.prefill_s(512) == pytest.approx(pre["seconds"][2])
    assert profile.prefill_s(100, 412) == pytest.approx(pre["seconds"][2] - prefill_curve(pre)(412) +
                                                        prefill_curve(pre)(0))


def test_mixed_check_compares_the_measured_prompt_with_the_models_mixed_step():
    rd = _round(_ubatch_curve)
    rd["mixed"] = [{"decoders": 3, "input_tokens": 256, "ttft_s": 0.2, "server_prompt_s": 0.19}] * 2
    block = fit([rd], hardware="h", slots=4, source="t")["h"]
    (c,) = checks([rd], block)["mixed"]
    (s,) = checks([rd], block, separate=True)["mixed"]
    t = prefill_curve(block["prefill"])
    # the engine's own prompt time (no client overhead measured: the prefill rows carry no engine timings)
    assert c["measured_s"] == 0.19 and c["prompts"] == 1  # rows without `prompts` are one prompt each
    assert checks([rd], block, clock="client")["mixed"][0]["measured_s"] == 0.2
    # shared pass: the decode step of 3 sequences (8.5 ms) exceeds T(0) (~6 ms): the model charges the
    # difference; separate passes: the whole step
    assert t(256) + 0.001 < c["predicted_s"] < t(256) + 0.0085
    assert s["predicted_s"] == pytest.approx(t(256) + 0.0085, rel=0.01)
    assert s["other_form_s"] == c["predicted_s"] and c["rel_error"] == pytest.approx(c["predicted_s"] / 0.19 - 1)


def test_mixed_factor_recovers_how_much_slower_a_prompt_runs_beside_decodes():
    """Probes made by the model's own mixed step with the prompt work 1.2x: the fit finds 1.2, and
    a prompt that ran no slower than alone fits 1 (the factor never goes below 1)."""
    rd = _round(_ubatch_curve)
    block = fit([rd], hardware="h", slots=4, source="t")["h"]
    t = prefill_curve(block["prefill"])
    rd["mixed"] = [{"decoders": 3, "input_tokens": n, "ttft_s": 1.0, "server_prompt_s": None} for n in (256, 1024)]
    base = {c["input_tokens"]: c["predicted_s"] - (t(c["input_tokens"]) - t(0)) for c in checks([rd], block)["mixed"]}
    rd["mixed"] = [{"decoders": 3, "input_tokens": n, "ttft_s": base[n] + 1.2 * (t(n) - t(0)), "server_prompt_s": None}
                   for n in (256, 1024)]
    factor, rms = fit_mixed([rd], block)
    assert factor == pytest.approx(1.2, rel=1e-9) and rms == pytest.approx(0.0, abs=1e-9)
    rd["mixed"] = [{"decoders": 3, "input_tokens": n, "ttft_s": t(n), "server_prompt_s": None} for n in (256, 1024)]
    assert fit_mixed([rd], block)[0] == 1.0
    rd["mixed"] = []
    assert fit_mixed([rd], block)[0] == 1.0  # no mixed probes: the model's own step


def _emulated_mixed_probes(factor: float, separate: bool) -> list[dict]:
    """The mixed probes (k decoding streams of 64-token prompts, then m prompts of n tokens together
    0.15 s later) run on the aggregated instance itself: the prompts' TTFT per (k, m, n)."""
    from harness.clock import VirtualClock
    from harness.deploy.aggregated import AggregatedDeployment
    from harness.workload.request import Request

    profile = build_profile(OmegaConf.create(MODEL), OmegaConf.create(HARDWARE), gpus_per_instance=1)
    rows = []
    for k, m in ((1, 1), (2, 1), (3, 1), (1, 2), (2, 2), (1, 3)):
        for n in (256, 1024):
            clock = VirtualClock()
            dep = AggregatedDeployment(name="a", clock=clock, profile=profile, instances=1, slots=4, chunk_tokens=2048,
                                       mixed_prompt_factor=factor, separate_passes=separate)
            reqs = [Request(i, 0.0, 64, 160, ()) for i in range(k)] + [Request(k + j, 0.15, n, 1, ()) for j in range(m)]
            for r in reqs:
                clock.call_at(r.arrival_s, lambda r=r, dep=dep: dep.submit(r))
            clock.run()
            # the engine's prompt time starts with the step that admits the prompt (its prefill start)
            rows += [{"decoders": k, "prompts": m, "input_tokens": n, "ttft_s": rec["ttft_s"],
                      "server_prompt_s": rec["first_token_s"] - rec["prefill_start_s"]}
                     for rec in dep.records if rec["request_id"] >= k]
    return rows


@pytest.mark.parametrize("separate", [True, False])
def test_mixed_fit_recovers_the_factor_of_the_aggregated_instance_it_calibrates(separate):
    """Probes answered by the emulator's own aggregated instance (prompt work 1.15x beside decodes,
    several prompts and decoders per step): the calibration's step form for the same
    `separate_passes` finds 1.15 within 2%, and the other form fits these probes worse."""
    from .test_aggregated import DECODE, PREFILL

    block = {"prefill": {"kind": "polynomial", "coefficients": PREFILL}, "decode": DECODE}
    rd = {"prefill": [], "decode": [], "cached": [], "mixed": _emulated_mixed_probes(1.15, separate)}
    factor, rms = fit_mixed([rd], block, separate=separate)
    assert factor == pytest.approx(1.15, rel=0.02) and rms < 0.01
    _, other_rms = fit_mixed([rd], block, separate=not separate)
    assert other_rms > 2 * rms
    found = checks([rd], block, separate=separate)["mixed"]
    assert {(c["decoders"], c["prompts"]) for c in found} == {(1, 1), (2, 1), (3, 1), (1, 2), (2, 2), (1, 3)}


def test_niceness_is_applied_or_refused_in_one_line(monkeypatch):
    now = os.getpriority(os.PRIO_PROCESS, 0)
    assert set_niceness(now + 1, "experiment.engine.nice") == {"before": now, "after": now + 1}

    def refuse(which, who, value):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "setpriority", refuse)
    with pytest.raises(InputError, match=r"^experiment.engine.nice=-10: cannot set .*Operation not permitted.*null$"):
        set_niceness(-10, "experiment.engine.nice")


def test_wake_is_what_idle_gapped_probes_take_beyond_the_back_to_back_curve():
    from harness.validation.calibrate import fit_wake

    rd = _round(_ubatch_curve)
    rd["prefill"] += [{"input_tokens": n, "role": "idle", "ttft_s": _ubatch_curve(n) + extra}
                      for n, extra in ((128, 0.020), (512, 0.030), (1024, 0.025)) for _ in range(2)]
    block = fit([rd], hardware="h", slots=4, source="t")["h"]  # idle probes never enter the curve
    assert block["prefill"]["tokens"] == list(LENGTHS)
    wake, rows = fit_wake([rd], prefill_curve(block["prefill"]))
    assert wake == pytest.approx(0.025, rel=1e-6) and [r["input_tokens"] for r in rows] == [128, 512, 1024]
    assert fit_wake([_round(_ubatch_curve)], prefill_curve(block["prefill"]))[0] == 0.0  # no idle probes: none


def test_server_clock_fit_ignores_client_stalls_the_engine_did_not_see():
    """Probes whose client TTFT stalled (+200 ms on 2 of 3 repeats of the short lengths, the engine's own
    prompt time unmoved, as right after a validation load): the server-clock fit gives the engine's
    curve + the median client overhead (3 ms); the client-clock fit is pulled up by the stalls."""
    rd = _round(_ubatch_curve)
    for i, r in enumerate(rd["prefill"]):
        r["server_prompt_s"] = _ubatch_curve(r["input_tokens"])
        r["ttft_s"] = r["server_prompt_s"] + 0.003 + (0.2 if i % 3 != 2 and r["input_tokens"] <= 256 else 0.0)
    server = prefill_curve(fit([rd], hardware="h", slots=4, source="t")["h"]["prefill"])
    client = prefill_curve(fit([rd], hardware="h", slots=4, source="t", clock="client")["h"]["prefill"])
    for n in (32, 64, 128, 256, 1024):
        assert server(n) == pytest.approx(_ubatch_curve(n) + 0.003, rel=1e-6)
    assert client(32) > _ubatch_curve(32) + 0.05  # 2 of 3 repeats at 32 tokens stalled: the median too


def test_layout_checks_predict_split_slots_as_one_step_per_run_of_consecutive_slots():
    """Streams pinned to slots {0, 2} and {0, 1, 3}: the check predicts step(1) + step(1) and
    step(2) + step(1) from the fitted per-batch steps (context slope 0 here), and reports the one-step
    form beside it."""
    rd = _round(_ubatch_curve)
    rd["layouts"] = [{"slots": [0, 2], "prompt_tokens": 128, "context_tokens": 160, "step_s": 0.0042},
                     {"slots": [0, 1, 3], "prompt_tokens": 128, "context_tokens": 160, "step_s": 0.0090}]
    block = fit([rd], hardware="h", slots=4, source="t")["h"]
    found = {tuple(c["slots"]): c for c in checks([rd], block)["layouts"]}
    steps = block["decode"]["batch_step_s"]
    per_token = block["decode"]["per_token_s"]
    assert found[(0, 2)]["predicted_s"] == pytest.approx(2 * steps[0] + per_token * 320)
    assert found[(0, 1, 3)]["predicted_s"] == pytest.approx(steps[1] + steps[0] + per_token * 480)
    assert found[(0, 2)]["one_ubatch_s"] == pytest.approx(steps[1] + per_token * 320)
    assert abs(found[(0, 2)]["rel_error"]) < abs(found[(0, 2)]["one_ubatch_rel_error"])


def test_decode_probe_step_counts_the_engines_decode_steps_not_its_tokens():
    """llama-server's timings for n generated tokens: the first comes from the prompt's batch at
    t_prompt_last, each later one a decode step of dt after it, predicted_ms = t_gen_last - t_prompt_last."""
    from harness.validation.probes import decode_step_s

    dt_ms, n = 7.5, 64
    stamps = [100.0 + i * dt_ms for i in range(n)]  # when each token was sampled; the first ends the prompt
    row = {"engine_predicted_n": n, "engine_predicted_ms": stamps[-1] - stamps[0]}
    assert decode_step_s(row) == pytest.approx(dt_ms / 1e3)
    assert np.isnan(decode_step_s({"engine_predicted_n": 1, "engine_predicted_ms": 0.001}))
    assert np.isnan(decode_step_s({}))
