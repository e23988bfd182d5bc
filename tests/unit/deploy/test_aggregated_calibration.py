"""The validation's built-in calibration fits (probe rows -> profile block) and its workload."""

from __future__ import annotations

import numpy as np
import pytest
from omegaconf import OmegaConf

from harness.costmodel import build_profile
from harness.validation.calibrate import fit
from harness.validation.workload import SharedPromptWorkload
from harness.workload.arrivals import Poisson
from harness.workload.lengths import Fixed, Uniform

from .test_aggregated import HARDWARE, MODEL


def _rounds(c, d, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    pre = [{"input_tokens": n, "ttft_s": (c[0] + c[1] * n + c[2] * n * n) * (1 + noise * rng.standard_normal())}
           for n in (64, 256, 512, 1024, 2048) for _ in range(2)]
    dec = [{"batch": b, "prompt_tokens": p, "context_tokens": b * (p + 32),
            "step_s": d[0] + d[1] * b + d[2] * b * (p + 32)} for b in (1, 2, 3, 4) for p in (128, 448)]
    return [{"prefill": pre, "decode": dec}]


def test_fit_recovers_known_curves_and_builds_a_profile():
    c, d = (0.02, 6e-4, 3e-7), (0.003, 0.0012, 2e-7)
    block = fit(_rounds(c, d), hardware="cpu_local", slots=4, source="test", decode_kind="linear",
                prefill_kind="polynomial")
    got = block["cpu_local"]
    assert got["prefill"]["coefficients"] == pytest.approx(list(c), rel=1e-6)
    assert [got["decode"][k] for k in ("base_s", "per_seq_s", "per_token_s")] == pytest.approx(list(d), rel=1e-6)
    assert got["decode"]["bs_max"] == 4 and "[M]" in got["prefill"]["provenance"]
    model = OmegaConf.create({**MODEL, "profiles": block})
    profile = build_profile(model, OmegaConf.create(HARDWARE), gpus_per_instance=1)
    assert profile.prefill_s(1000) == pytest.approx(c[0] + c[1] * 1000 + c[2] * 1e6)
    assert profile.decode_step_s(2, 1000) == pytest.approx(d[0] + 2 * d[1] + 1000 * d[2])


def test_per_batch_fit_recovers_a_step_that_is_not_linear_in_the_batch():
    rows = [{"batch": b, "prompt_tokens": p, "context_tokens": b * (p + 32), "step_s": s + 1e-6 * b * (p + 32)}
            for b, s in ((1, 0.002), (2, 0.007), (4, 0.009)) for p in (128, 448)]
    block = fit([{"prefill": _rounds((0.02, 6e-4, 3e-7), (0, 0, 0))[0]["prefill"], "decode": rows}],
                hardware="cpu_local", slots=4, source="test")
    dec = block["cpu_local"]["decode"]
    assert dec["kind"] == "per_batch" and dec["per_token_s"] == pytest.approx(1e-6, rel=1e-6)
    assert dec["batch_step_s"] == pytest.approx([0.002, 0.007, 0.008, 0.009], rel=1e-6)  # 3: interpolated
    profile = build_profile(OmegaConf.create({**MODEL, "profiles": block}), OmegaConf.create(HARDWARE),
                            gpus_per_instance=1)
    assert profile.decode_step_s(1, 500) == pytest.approx(0.002 + 5e-4)
    assert profile.decode_step_s(2, 0) == pytest.approx(0.007)
    assert profile.decode_step_s(6, 0) == pytest.approx(0.009 + 2 * 0.001)  # the last increment continues


def test_fit_never_returns_negative_terms_on_noisy_probes():
    block = fit(_rounds((0.0, 6e-4, 1e-9), (0.003, 0.0, 0.0), noise=0.1, seed=3), hardware="h", slots=2, source="t",
                decode_kind="linear", prefill_kind="polynomial")
    assert min(block["h"]["prefill"]["coefficients"]) >= 0
    assert min(block["h"]["decode"][k] for k in ("base_s", "per_seq_s", "per_token_s")) >= 0


def test_shared_prompt_workload_shares_whole_blocks_and_offsets_ids():
    kw = {"input_lengths": Uniform(100, 900), "output_lengths": Fixed(8), "arrivals": Poisson(1.0), "num_requests": 400,
              "seed": 1, "block_tokens": 512, "shared_prompts": 2, "shared_prompt_tokens": 1024, "shared_fraction": 0.5}
    reqs = SharedPromptWorkload(**kw).generate()
    assert SharedPromptWorkload(**kw).unique_blocks is False  # a sim run's pools must keep its blocks
    shared = [r for r in reqs if r.hash_ids[0] >= 1 << 40]
    assert 0.4 < len(shared) / len(reqs) < 0.6
    assert {r.hash_ids[:2] for r in shared} == {r.hash_ids[:2] for r in shared[:50]} and \
        len({r.hash_ids[:2] for r in shared}) == 2
    for r in reqs:
        assert len(r.hash_ids) == -(-r.input_tokens // 512)
    own = [h for r in reqs for h in r.hash_ids if h < 1 << 40]
    assert len(own) == len(set(own))  # nothing else is shared
    moved = SharedPromptWorkload(**kw, id_offset=10**7).generate()
    assert not {h for r in moved for h in r.hash_ids} & {h for r in reqs for h in r.hash_ids}
    assert [r.input_tokens for r in moved] == [r.input_tokens for r in reqs]


def _engine_rows(prompts, wobble=0.0, cached=False):
    """Decode probe rows of an engine whose step is T(b) + slope x total context (llama-server's shape,
    pinned grid 11:46 UTC: T = 2.3/7.0/7.5/8.0 ms, 0.91 us/token); `wobble`: the busy machine's error,
    +wobble on the shorter prompt and -wobble on the longer one (the worst case for the slope)."""
    steps, slope = (0.0023, 0.0070, 0.0075, 0.0080), 0.91e-6
    rows = []
    for b in (1, 2, 3, 4):
        for i, p in enumerate(prompts):
            ctx = b * (p + 32)
            extra = {"cached_tokens": p - 16, "server_cache_n": p - 16} if cached else {}
            rows.append({"batch": b, "prompt_tokens": p, "context_tokens": ctx, **extra,
                         "step_s": (steps[b - 1] + slope * ctx) * (1 + (wobble if i == 0 else -wobble))})
    return rows


def test_long_context_decode_probes_pin_the_slope_a_busy_machine_leaves_loose():
    prefill = _rounds((0.02, 6e-4, 3e-7), (0, 0, 0))[0]["prefill"]

    def slope(rows):
        block = fit([{"prefill": prefill, "decode": rows}], hardware="h", slots=4, source="test")
        return block["h"]["decode"]["per_token_s"], block["h"]["decode"]["batch_step_s"]

    # exact rows, short and long (cached-prefix rows carry extra keys): the engine's shape comes back
    got, steps = slope(_engine_rows((128, 448)) + _engine_rows((1040, 2064), cached=True))
    assert got == pytest.approx(0.91e-6, rel=1e-6) and steps == pytest.approx([0.0023, 0.0070, 0.0075, 0.0080])
    # 3% of measurement error on each probe: short probes alone (160-480 tokens a stream) misfit the slope
    # by tens of percent; with the long ones (1-2K tokens a stream) it stays within 10%
    short, _ = slope(_engine_rows((128, 448), wobble=0.03))
    both, _ = slope(_engine_rows((128, 448), wobble=0.03) + _engine_rows((1040, 2064), wobble=0.03, cached=True))
    assert abs(short / 0.91e-6 - 1) > 0.3
    assert abs(both / 0.91e-6 - 1) < 0.1
