"""llama-server's prompt-cache copies at launch (`deployment.cache_save_token_s`), the slots' starting
order (`deployment.slot_order`) and the calibration of the copy cost, on a virtual clock."""

from __future__ import annotations

import pytest

from harness.deploy.slot_layout import SlotTable
from harness.errors import InputError
from harness.validation.calibrate import client_overhead, fit_cache_save, prefill_rows

from .test_aggregated import T, _deployment, _offer, _req, profile, step  # noqa: F401

C = 50e-6  # s per token copied (large, so the test's differences are far above float noise)


def test_a_pick_saves_the_slots_released_since_the_last_one():
    table = SlotTable(4)
    assert [table.pick((), 100) for _ in range(3)] == [3, 2, 1]
    assert table.saved_tokens == 0  # nothing released yet
    table.release(3, 150)
    table.release(2, 90)
    assert table.pick((), 100) == 0  # never-used slot 0 is the least recently used
    assert table.saved_tokens == 240  # both idle slots copied once
    table.release(0, 30)
    assert table.pick((), 100) == 3  # LRU takes slot 3: only slot 0 is new to the cache
    assert table.saved_tokens == 30


def test_a_slot_reused_by_similarity_is_not_saved_unless_it_keeps_under_half():
    table = SlotTable(4, block_tokens=512)
    table.pick((7, 8), 1000)  # slot 3
    table.release(3, 1060)
    assert table.pick((7, 9), 700) == 3  # 512 of its 1,060 tokens kept (48%): the engine saves it first
    assert table.saved_tokens == 1060
    table.release(3, 740)
    assert table.pick((7, 10), 600) == 3  # 512 of 740 kept (69%): reused as it is, nothing copied
    assert table.saved_tokens == 0


def test_slot_order_sets_the_least_recently_used_order():
    table = SlotTable(4, order=[3, 0, 1, 2])
    assert [table.pick((), 10) for _ in range(4)] == [3, 0, 1, 2]


def test_a_launch_stalls_the_step_by_the_tokens_it_copies(profile):  # noqa: F811
    """A (slot 3) ends holding 100 + 3 - 1 tokens; B (slot 2) decodes when C arrives and takes slot 1:
    the engine copies A's 102 tokens first, so C's TTFT and B's token gap across C's prompt step grow by
    exactly C x 102; with the save cost off nothing changes but that."""
    reqs = [_req(1, 0.0, 100, 3), _req(2, 0.001, 100, 150), _req(3, 0.3, 200, 5)]
    kw = {"chunk_tokens": 2048, "separate_passes": True, "slot_layout": True}
    on = _offer(*_deployment(profile, cache_save_token_s=C, **kw), reqs)
    off = _offer(*_deployment(profile, **kw), reqs)
    assert on[3]["ttft_s"] - off[3]["ttft_s"] == pytest.approx(C * 102, rel=1e-6)
    # B's decode time grows by the same stall (one launch while it decodes), nothing else moves
    assert on[2]["finish_s"] - off[2]["finish_s"] == pytest.approx(C * 102, rel=1e-6)
    assert on[1]["finish_s"] == off[1]["finish_s"] and on[1]["ttft_s"] == off[1]["ttft_s"]
    # a lone request on a fresh engine copies nothing: its TTFT is the prefill curve alone
    lone = _offer(*_deployment(profile, cache_save_token_s=C, **kw), [_req(9, 0.0, 300, 2)])
    assert lone[9]["ttft_s"] == pytest.approx(T(300))


def test_the_save_cost_needs_the_slot_layout(compose_cfg):
    from harness.clock import VirtualClock
    from harness.deploy.aggregated import build_aggregated

    base = ["deployment=aggregated", "model=random_llama_35m"]
    with pytest.raises(InputError, match="cache_save_token_s needs slot_layout"):
        build_aggregated(compose_cfg([*base, "deployment.cache_save_token_s=1e-6"]), VirtualClock())
    with pytest.raises(InputError, match="slot_order must be null or a permutation"):
        build_aggregated(compose_cfg([*base, "deployment.separate_passes=true", "deployment.slot_layout=true",
                                      "deployment.slot_order=[0,1,1,2]"]), VirtualClock())


def test_the_calibration_recovers_the_save_cost_from_probes_the_instance_answered(profile):  # noqa: F811
    """Back-to-back single prompts (max_tokens 1) answered by the aggregated instance with a save cost:
    its TTFT = C x the previous probe's tokens + T(n). Given the engine-clock prompt time T(n) - H (the
    client's own H inside the curve), the fit finds C and H, and the overhead it leaves is H."""
    lengths = [128, 1536, 256, 1024, 64, 768, 512, 2048, 96, 320, 896, 1280]
    h = 0.002
    clock, dep = _deployment(profile, chunk_tokens=2048, separate_passes=True, slot_layout=True,
                             cache_save_token_s=C)
    rows, t = [], 0.0
    warm = _req(0, 0.0, 64, 4)
    clock.call_at(0.0, lambda: dep.submit(warm))
    clock.run()
    for i, n in enumerate(lengths, start=1):
        t = clock.now() + 0.01
        clock.call_at(t, lambda i=i, n=n: dep.submit(_req(i, clock.now(), n, 1)))
        clock.run()
        rec = dep.records[-1]
        rows.append({"input_tokens": n, "role": "fit", "ttft_s": rec["ttft_s"], "server_prompt_s": T(n) - h})
    rounds = [{"prefill": rows}]
    slope, intercept, pairs = fit_cache_save(rounds)
    assert pairs == len(lengths)
    assert slope == pytest.approx(C, rel=1e-6) and intercept == pytest.approx(h, rel=1e-6)
    assert client_overhead(prefill_rows(rounds), slope) == pytest.approx(h, rel=1e-6)
    # without the save term the overhead is the median of h + C x the previous tokens: well above h
    assert client_overhead(prefill_rows(rounds)) > h + C * 200
