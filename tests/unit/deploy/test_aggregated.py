"""Aggregated deployment: prefill and decode share an engine's slots (continuous batching, chunked
prompts, FIFO beyond the slots, prefix cache), with times from a real InstanceProfile."""

from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf, open_dict

from harness.clock import VirtualClock
from harness.costmodel import build_profile
from harness.deploy.aggregated import AggregatedDeployment, build_aggregated
from harness.errors import InputError
from harness.workload.request import Request

HARDWARE = {"name": "cpu_local", "peak_bf16_flops_per_s": 1e11, "hbm_bandwidth_bytes_per_s": 2e10,
            "hbm_capacity_bytes": 4e9, "price_per_gpu": 0.0, "memory_utilisation": 0.9, "prefill_mfu": 0.3,
            "prefill_overhead_s": 0.0, "decode_hbm_efficiency": 0.6, "decode_overhead_s": 0.0,
            "decode_reference_context_tokens": 1024}
# T(l) = 0.01 + 2e-4 l + 1e-7 l^2 (super-linear); decode step = 4 ms + 1 ms/seq + 1e-6 s/context token.
PREFILL = [0.01, 2e-4, 1e-7]
DECODE = {"kind": "linear", "base_s": 0.004, "per_seq_s": 0.001, "per_token_s": 1e-6, "bs_max": 4}
MODEL = {"name": "tiny_llama", "family": "dense", "hidden_size": 384, "total_params_b": 0.035,
         "active_params_b": 0.035, "weight_dtype_bytes": 2.0, "kv_dtype_bytes": 2.0,
         "full_attention": {"layers": 6, "kind": "gqa", "q_heads": 6, "kv_heads": 6, "k_head_dim": 64,
                            "v_head_dim": 64},
         "profiles": {"cpu_local": {"gpus_per_instance": 1, "prefill": {"kind": "polynomial", "coefficients": PREFILL},
                              "decode": DECODE}}}


def T(l):
    return PREFILL[0] + PREFILL[1] * l + PREFILL[2] * l * l


def step(batch, context):
    return DECODE["base_s"] + DECODE["per_seq_s"] * batch + DECODE["per_token_s"] * context


@pytest.fixture(scope="module")
def profile():
    return build_profile(OmegaConf.create(MODEL), OmegaConf.create(HARDWARE), gpus_per_instance=1)


def _deployment(profile, slots=4, chunk_tokens=None, **kw):
    clock = VirtualClock()
    dep = AggregatedDeployment(name="agg", clock=clock, profile=profile, instances=1, slots=slots,
                               chunk_tokens=chunk_tokens, **kw)
    return clock, dep


def _req(rid, t, n_in, n_out, hash_ids=()):
    return Request(request_id=rid, arrival_s=t, input_tokens=n_in, output_tokens=n_out, hash_ids=tuple(hash_ids))


def _offer(clock, dep, requests):
    for r in requests:
        clock.call_at(r.arrival_s, lambda r=r: dep.submit(r))
    clock.run()
    return {rec["request_id"]: rec for rec in dep.records}


def test_lone_request_ttft_is_the_profile_prefill_and_tokens_follow_one_step_each(profile):
    clock, dep = _deployment(profile)
    rec = _offer(clock, dep, [_req(1, 0.5, 1000, 4)])[1]
    assert rec["ttft_s"] == pytest.approx(T(1000))
    # 3 more tokens, one decode step each, reading a KV of 1000, 1001, 1002 tokens (batch of 1)
    expected = step(1, 1000) + step(1, 1001) + step(1, 1002)
    assert rec["finish_s"] - rec["first_token_s"] == pytest.approx(expected)
    assert rec["tpot_s"] == pytest.approx(expected / 3)
    assert rec["error"] is None and rec["output_tokens"] == 4


def test_two_prompts_share_one_step_and_chunks_split_a_long_prompt(profile):
    """Two 600-token prompts at t=0, budget 2048: one step computes both (fixed cost paid once)."""
    clock, dep = _deployment(profile, chunk_tokens=2048)
    recs = _offer(clock, dep, [_req(1, 0.0, 600, 2), _req(2, 0.0, 600, 2)])
    shared = T(0) + 2 * (T(600) - T(0))
    assert recs[1]["ttft_s"] == pytest.approx(shared)
    assert recs[2]["ttft_s"] == pytest.approx(shared)
    assert shared < 2 * T(600)  # cheaper than back to back, dearer than one alone
    # A 3000-token prompt with budget 1024: chunks of 1024, 1024, 952 on a growing context.
    clock, dep = _deployment(profile, chunk_tokens=1024)
    rec = _offer(clock, dep, [_req(3, 0.0, 3000, 1)])[3]
    chunks = (T(1024) - T(0)) + (T(2048) - T(1024)) + (T(3000) - T(2048)) + 3 * T(0)
    assert rec["ttft_s"] == pytest.approx(chunks)


def test_decoding_request_is_slowed_by_a_prefill_in_its_step(profile):
    """A decodes alone; B's 800-token prompt arrives: that step carries A's token and B's prompt."""
    clock, dep = _deployment(profile, chunk_tokens=2048)
    recs = _offer(clock, dep, [_req(1, 0.0, 100, 50), _req(2, 0.1, 800, 2)])
    a, b = recs[1], recs[2]
    assert b["ttft_s"] > T(800)  # B waited for A's step boundary, then paid A's decode in its step
    assert b["ttft_s"] < T(800) + 2 * step(1, 200) + step(1, 200)
    alone_tpot = step(1, 125)
    assert a["tpot_s"] > alone_tpot * 1.5  # one of A's steps took ~T(800)


def test_mixed_prompt_factor_scales_prompt_work_only_in_steps_beside_decodes(profile):
    """A lone prompt costs T(n) whatever the factor; a prompt arriving while another request decodes
    costs its work times the factor in that step (B's TTFT grows by (factor - 1) x its work)."""
    reqs = [_req(1, 0.0, 100, 50), _req(2, 0.1, 800, 2)]
    plain = _offer(*_deployment(profile, chunk_tokens=2048), reqs)
    slow = _offer(*_deployment(profile, chunk_tokens=2048, mixed_prompt_factor=1.25), reqs)
    assert slow[1]["ttft_s"] == pytest.approx(T(100))  # request 1 prefilled alone
    assert slow[2]["ttft_s"] - plain[2]["ttft_s"] == pytest.approx(0.25 * (T(800) - T(0)))
    assert slow[1]["tpot_s"] > plain[1]["tpot_s"]  # the decoder waited through the longer step


def test_separate_passes_charge_each_prompt_its_fixed_cost_and_the_decodes_their_step(profile):
    """separate_passes: two prompts in one step cost two alone (each pays T(0)); a prompt beside a
    decoding request costs its decode step on top; a lone prompt still costs exactly T(n)."""
    clock, dep = _deployment(profile, chunk_tokens=2048, separate_passes=True)
    recs = _offer(clock, dep, [_req(1, 0.0, 600, 2), _req(2, 0.0, 600, 2)])
    assert recs[1]["ttft_s"] == pytest.approx(2 * T(600)) and recs[2]["ttft_s"] == pytest.approx(2 * T(600))
    reqs = [_req(1, 0.0, 100, 50), _req(2, 0.1, 800, 2)]
    sep = _offer(*_deployment(profile, chunk_tokens=2048, separate_passes=True, mixed_prompt_factor=1.25), reqs)
    shared = _offer(*_deployment(profile, chunk_tokens=2048, mixed_prompt_factor=1.25), reqs)
    assert sep[1]["ttft_s"] == pytest.approx(T(100))
    # B's step: A's decode step + B's own T(0) + 1.25 x its work, where the shared pass charged
    # max(T(0), A's step) + 1.25 x its work (T(0) = 10 ms > A's step ~5 ms here)
    wait = sep[2]["ttft_s"] - shared[2]["ttft_s"]
    assert wait == pytest.approx(step(1, 100 + 1 + round((0.1 - T(100)) / step(1, 100))), rel=0.05)
    assert sep[1]["tpot_s"] > shared[1]["tpot_s"]


def test_requests_beyond_slots_queue_fifo(profile):
    clock, dep = _deployment(profile, slots=2)
    recs = _offer(clock, dep, [_req(i, 0.0, 200, 20) for i in range(1, 5)])
    first_two_end = max(recs[1]["finish_s"], recs[2]["finish_s"])
    for rid in (3, 4):
        assert recs[rid]["prefill_start_s"] == pytest.approx(first_two_end)
        assert recs[rid]["ttft_s"] > first_two_end
    assert recs[3]["first_token_s"] <= recs[4]["first_token_s"]


def test_step_time_grows_with_the_batch(profile):
    """The same request decodes slower beside three others than alone."""
    clock, dep = _deployment(profile)
    alone = _offer(clock, dep, [_req(1, 0.0, 100, 64)])[1]["tpot_s"]
    clock, dep = _deployment(profile, chunk_tokens=2048)
    together = _offer(clock, dep, [_req(i, 0.0, 100, 64) for i in range(1, 5)])
    for rec in together.values():
        assert rec["tpot_s"] > alone
        assert rec["tpot_s"] == pytest.approx(step(4, 4 * 132), rel=0.05)


def test_prefix_cache_reuse_once_computed_or_once_finished(profile):
    prefix = [11, 12, 13]  # 3 blocks of 512 = 1536 shared tokens
    clock, dep = _deployment(profile)
    recs = _offer(clock, dep, [_req(1, 0.0, 1600, 2, [*prefix, 1]), _req(2, 5.0, 1600, 2, [*prefix, 2])])
    assert recs[1]["cached_tokens"] == 0
    assert recs[2]["cached_tokens"] == 1536
    assert recs[2]["ttft_s"] == pytest.approx(T(1600) - T(1536) + T(0))
    # A prefix computed by a request still decoding is reusable (the default, as llama-server does) ...
    clock, dep = _deployment(profile)
    recs = _offer(clock, dep, [_req(1, 0.0, 1600, 200, [*prefix, 1]), _req(2, 0.5, 1600, 2, [*prefix, 2])])
    assert recs[2]["cached_tokens"] == 1536
    # ... but not one still being computed (512-token steps: request 2 joins while request 1 prefills) ...
    clock, dep = _deployment(profile, chunk_tokens=512)
    recs = _offer(clock, dep, [_req(1, 0.0, 1600, 200, [*prefix, 1]), _req(2, 0.01, 1600, 2, [*prefix, 2])])
    assert recs[2]["cached_tokens"] == 0
    # ... and with `finish`, only once its owner has ended.
    clock, dep = _deployment(profile, shared_after="finish")
    recs = _offer(clock, dep, [_req(1, 0.0, 1600, 200, [*prefix, 1]), _req(2, 0.5, 1600, 2, [*prefix, 2])])
    assert recs[2]["cached_tokens"] == 0


def test_every_request_ends_in_one_record_even_when_cut_short(profile):
    clock, dep = _deployment(profile, slots=2)
    for i in range(6):
        clock.call_at(0.01 * i, lambda i=i: dep.submit(_req(i, 0.01 * i, 300, 500)))
    clock.run(until=1.0)
    dep.close("run ended")
    ids = sorted(rec["request_id"] for rec in dep.records)
    assert ids == list(range(6))
    failed = [rec for rec in dep.records if rec["error"] is not None]
    assert failed and all(rec["output_tokens"] == 0 for rec in failed)


def test_decode_runs_are_one_event_not_one_per_token(profile):
    clock, dep = _deployment(profile)
    _offer(clock, dep, [_req(1, 0.0, 100, 1000)])
    assert clock.events_run < 10
    assert dep.instances[0].steps == 999 + 1


def test_arrival_cuts_a_decode_run_at_the_next_step_boundary(profile):
    clock, dep = _deployment(profile)
    recs = _offer(clock, dep, [_req(1, 0.0, 100, 1000), _req(2, 1.0, 100, 2)])
    start = recs[2]["prefill_start_s"]
    assert 1.0 <= start < 1.0 + step(1, 1200)
    assert recs[1]["output_tokens"] == 1000 and recs[1]["error"] is None


def test_build_names_bad_keys(compose_cfg):
    cfg = OmegaConf.create({"deployment": {"name": "agg", "builder": "x", "hardware": HARDWARE, "slots": 4,
                                           "chunk_tokens": 0},
                            "model": MODEL, "workload": {}, "cache": {}})
    with pytest.raises(InputError, match="chunk_tokens"):
        build_aggregated(cfg, VirtualClock())
    cfg.deployment.chunk_tokens = 512
    cfg.deployment.slot = 3
    with pytest.raises(InputError, match="unknown key 'slot'"):
        build_aggregated(cfg, VirtualClock())


def test_sim_run_through_the_config_group(compose_cfg, tmp_path):
    from harness.runs.sim import run_sim

    cfg = compose_cfg(["deployment=aggregated", "workload=fixed", "workload.num_requests=40",
                       "workload.input_tokens=300", "workload.output_tokens=16", "loadgen.rate_rps=5",
                       "loadgen.progress=false"]).copy()
    OmegaConf.set_readonly(cfg, False)
    with open_dict(cfg):
        cfg.model = MODEL
    result = run_sim(cfg)
    frame = result.requests
    assert len(frame) == 40 and frame["error"].isna().all()
    assert (frame["ttft_s"] >= T(300) - 1e-9).all()
    assert math.isfinite(result.timeseries["util_decode"].mean())


def test_sim_run_reuses_shared_prompts_of_a_workload_that_shares_blocks(compose_cfg):
    """SharedPromptWorkload re-implements `generate` to share blocks: it must not inherit
    SyntheticWorkload's `unique_blocks` promise, or the sim run's pools forget every block
    (no prefix hit at all: TTFT ~2x the engine's on the shared-prompt requests of validate_engine)."""
    from harness.runs.sim import run_sim

    cfg = compose_cfg(["deployment=aggregated", "workload=fixed", "loadgen.rate_rps=2",
                       "loadgen.progress=false"]).copy()
    OmegaConf.set_readonly(cfg, False)
    with open_dict(cfg):
        cfg.model = MODEL
        cfg.workload = {"_target_": "harness.validation.workload.SharedPromptWorkload", "name": "shared",
                        "num_requests": 40, "seed": 3, "block_tokens": 512, "shared_prompts": 1,
                        "shared_prompt_tokens": 512, "shared_fraction": 0.5,
                        "input_lengths": {"_target_": "harness.workload.lengths.Fixed", "value": 200},
                        "output_lengths": {"_target_": "harness.workload.lengths.Fixed", "value": 8},
                        "arrivals": {"_target_": "harness.workload.arrivals.Poisson", "rate_rps": 1.0}}
    frame = run_sim(cfg).requests
    shared = frame["input_tokens"] > 512
    assert shared.sum() >= 10 and frame["error"].isna().all()
    # every shared-prompt request but the first finds the 512-token prompt in the cache
    assert (frame.loc[shared, "cached_tokens"] == 512).sum() == shared.sum() - 1
    assert (frame.loc[~shared, "cached_tokens"] == 0).all()


def test_a_request_waking_an_instance_idle_long_enough_pays_wake_s_and_only_then(profile):
    """Idle >= wake_after_s before an arrival: its first step starts wake_s late. Arrivals while busy,
    or after a shorter idle spell, start at once."""
    clock, dep = _deployment(profile, wake_s=0.03, wake_after_s=0.5)
    e2e0 = T(100) + 3 * step(1, 100)  # request 0 alone: prefill, then 3 more tokens
    recs = _offer(clock, dep, [_req(0, 0.0, 100, 4),            # the first arrival: idle since ever
                               _req(1, 0.0 + 0.03 + e2e0 + 0.2, 100, 4),   # idle 0.2 s < 0.5 s: no wake
                               _req(2, 10.0, 100, 4),           # idle for seconds: wakes
                               _req(3, 10.01, 100, 4)])         # arrives during request 2's wake-up
    assert recs[0]["ttft_s"] == pytest.approx(0.03 + T(100))
    assert recs[1]["ttft_s"] == pytest.approx(T(100))
    # request 3 joined request 2 in the step after the wake-up: one prefill step of both prompts
    assert recs[2]["ttft_s"] == pytest.approx(0.03 + T(100) + (T(100) - T(0)))
    assert recs[3]["first_token_s"] == pytest.approx(recs[2]["first_token_s"])
    bad = OmegaConf.create({"deployment": {"name": "a", "hardware": HARDWARE, "slots": 2, "wake_s": -1},
                            "model": MODEL, "workload": {}})
    with pytest.raises(InputError, match=r"wake_s must be a number >= 0"):
        build_aggregated(bad, VirtualClock())
