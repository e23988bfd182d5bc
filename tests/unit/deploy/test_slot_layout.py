"""llama-server's slot choice and ubatch split (harness/deploy/slot_layout.py), and the aggregated
instance that costs its steps by them (`slot_layout`), on a virtual clock."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from harness.deploy.slot_layout import SlotTable, common_prefix_tokens, decode_cost, ubatches
from harness.errors import InputError
from harness.validation.calibrate import mixed_parts

from .test_aggregated import HARDWARE, MODEL, T, _deployment, _offer, _req, profile, step  # noqa: F401


def test_fresh_slots_are_taken_from_the_highest_index_down():
    """Never-used slots tie as least recently used; the engine's `<=` scan keeps the last of them."""
    table = SlotTable(4)
    assert [table.pick((), 100) for _ in range(4)] == [3, 2, 1, 0]


def test_the_least_recently_released_idle_slot_is_taken():
    table = SlotTable(4)
    for _ in range(4):
        table.pick((), 100)
    table.release(1)
    table.release(3)
    table.release(0)
    assert table.pick((), 100) == 1  # released first
    assert table.pick((), 100) == 3
    table.release(2)
    assert table.pick((), 100) == 0  # released before 2
    assert table.pick((), 100) == 2


def test_a_prompt_similar_enough_to_a_slots_cached_prompt_takes_that_slot():
    table = SlotTable(4, similarity=0.1, block_tokens=512)
    table.pick((7, 8), 1000)  # slot 3 now caches blocks 7, 8
    table.pick((5,), 300)  # slot 2
    table.release(3)
    table.release(2)
    # LRU would give slot 1 (never used); 512 of 700 tokens shared with slot 3's prompt: slot 3
    assert table.pick((7, 9), 700) == 3
    # 512 of 6,000 tokens (8.5%) is under the threshold: least recently used (slot 1, never used)
    assert table.pick((5, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20), 6000) == 1
    off = SlotTable(4, similarity=0.0)
    off.pick((7, 8), 1000)
    off.release(3)
    assert off.pick((7, 9), 700) == 2  # similarity off: never-used slot 2 is older than released 3


def test_common_prefix_counts_whole_equal_blocks_up_to_either_length():
    assert common_prefix_tokens((1, 2, 3), 1200, (1, 2, 4), 1100, 512) == 1024
    assert common_prefix_tokens((1, 2), 700, (1, 2, 3), 1100, 512) == 700
    assert common_prefix_tokens((1,), 512, (2,), 512, 512) == 0


def test_ubatches_are_runs_of_consecutive_slots_with_equal_tokens():
    assert ubatches([(0, 1), (1, 1), (2, 1)]) == [[(0, 1), (1, 1), (2, 1)]]
    assert ubatches([(0, 1), (2, 1)]) == [[(0, 1)], [(2, 1)]]
    assert ubatches([(0, 1), (1, 1), (3, 1)]) == [[(0, 1), (1, 1)], [(3, 1)]]
    # a prompt in the slot after a decoding one lends it its first token; one before it does not
    assert ubatches([(0, 1), (2, 1), (1, 300)]) == [[(0, 1), (1, 1)], [(2, 1)], [(1, 299)]]
    assert ubatches([(3, 1), (2, 300)]) == [[(3, 1)], [(2, 300)]]
    # two prompts side by side: equal shares of n_ubatch while both have tokens left; a long one alone
    assert ubatches([(1, 300), (2, 500)], 512) == [[(1, 256), (2, 256)], [(1, 44), (2, 44)], [(2, 200)]]
    assert ubatches([(0, 1200)], 512) == [[(0, 512)], [(0, 512)], [(0, 176)]]


def test_decode_cost_is_one_decode_step_per_ubatch_holding_decodes():
    def f(n, ctx):
        return 0.001 * n * n + 1e-6 * ctx

    assert decode_cost([(0, 100.0), (1, 200.0)], [], f) == pytest.approx(f(2, 300))
    assert decode_cost([(0, 100.0), (2, 200.0)], [], f) == pytest.approx(f(1, 100) + f(1, 200))
    assert decode_cost([(0, 100.0)], [(1, 800)], f) == pytest.approx(f(2, 100))  # the prompt's first token rides
    assert decode_cost([(3, 100.0)], [(2, 800)], f) == pytest.approx(f(1, 100))
    assert decode_cost([], [(0, 800)], f) == 0.0


def test_instance_costs_decodes_by_the_slots_its_requests_hold(profile):  # noqa: F811
    """A, B, C arrive together and take slots 3, 2, 1; B ends after one decode step, leaving A and C
    in slots 3 and 1: two ubatches of one, not one of two."""
    reqs = [_req(1, 0.0, 100, 10), _req(2, 0.0, 100, 2), _req(3, 0.0, 100, 10)]
    lay = _offer(*_deployment(profile, chunk_tokens=2048, separate_passes=True, slot_layout=True), reqs)
    flat = _offer(*_deployment(profile, chunk_tokens=2048, separate_passes=True), reqs)
    prefill = 3 * T(100)  # three prompts, each its own passes
    first = step(3, 300)  # slots 1, 2, 3: one ubatch of three, 100 tokens each in KV
    assert lay[2]["finish_s"] == pytest.approx(prefill + first)
    # 8 more steps of A and C, each two ubatches of one (mean context 101 + 3.5)
    assert lay[1]["finish_s"] == pytest.approx(prefill + first + 8 * 2 * step(1, 104.5))
    assert flat[1]["finish_s"] == pytest.approx(prefill + first + 8 * step(2, 209))
    assert lay[1]["finish_s"] > flat[1]["finish_s"]  # the test profile: 2 x step(1) > step(2)


def test_instance_reuses_the_slot_holding_a_similar_prompt(profile):  # noqa: F811
    """X (long) takes slot 3 and A slot 2; A ends. B shares A's first block (512 of 600 tokens): by
    similarity it takes A's slot 2 and decodes beside X as one ubatch {2, 3}; with similarity off the
    least recently used slot is never-used 1, and B and X decode as two ubatches {1}, {3}."""
    reqs = [_req(1, 0.0, 100, 400, (30,)), _req(2, 0.0, 600, 2, (7, 8)), _req(3, 1.0, 600, 50, (7, 9))]
    sim = _offer(*_deployment(profile, chunk_tokens=2048, separate_passes=True, slot_layout=True), reqs)
    off = _offer(*_deployment(profile, chunk_tokens=2048, separate_passes=True, slot_layout=True,
                              slot_similarity=0.0), reqs)
    assert sim[1]["finish_s"] > sim[3]["finish_s"]  # X decodes through all of B's steps
    # per step: step(1, cx) + step(1, cb) - step(2, cx + cb) = base_s (4 ms) in the test profile
    assert off[3]["tpot_s"] - sim[3]["tpot_s"] == pytest.approx(0.004, rel=0.02)
    assert sim[3]["ttft_s"] == pytest.approx(off[3]["ttft_s"], rel=0.05)  # same prefix hit either way


def test_slot_layout_needs_separate_passes(compose_cfg):
    cfg = compose_cfg(["deployment=aggregated", "model=random_llama_35m", "deployment.slot_layout=true",
                       "deployment.separate_passes=false"])
    from harness.clock import VirtualClock
    from harness.deploy.aggregated import build_aggregated

    with pytest.raises(InputError, match="slot_layout: true needs separate_passes"):
        build_aggregated(cfg, VirtualClock())


def test_mixed_probe_step_with_the_layout_carries_the_prompts_first_tokens():
    """Pinned mixed probe: decodes on slots 0..k-1, prompts on k..k+m-1: one decode ubatch of k + m
    sequences (each prompt lends its first token), then each prompt's own passes."""
    block = {"prefill": {"kind": "polynomial", "coefficients": [0.01, 2e-4, 0.0]},
             "decode": {"kind": "per_batch", "batch_step_s": [0.002, 0.007, 0.0076, 0.0083], "per_token_s": 0.0}}
    fixed, work = mixed_parts(block, 2, 1, 256, separate=True, layout=True)
    assert fixed == pytest.approx(0.0076 + 0.01)  # ubatch of 3 (2 decodes + the prompt's token) + T(0)
    assert work == pytest.approx(2e-4 * 256)
    fixed2, _ = mixed_parts(block, 1, 2, 256, separate=True, layout=True)
    assert fixed2 == pytest.approx(0.0076 + 2 * 0.01)
    plain, _ = mixed_parts(block, 2, 1, 256, separate=True)
    assert plain == pytest.approx(0.007 + 0.01)  # without the layout: the decodes' step of 2


def test_config_group_defaults_keep_the_layout_off():
    conf = OmegaConf.load("conf/deployment/aggregated.yaml")
    assert conf.slot_layout is False and conf.slot_similarity == 0.1 and conf.ubatch_tokens == 512
    assert MODEL and HARDWARE  # the shared test model (imported for the instance tests)
