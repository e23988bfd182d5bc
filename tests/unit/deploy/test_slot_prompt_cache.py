"""llama-server's prefix reuse from the slot a task takes and its host-memory prompt cache (restores move an
entry out of that cache: `slot_layout.SlotTable(prompt_cache=True)`), and the aggregated instance that takes
a request's cached prefix from it (`deployment.slot_prompt_cache`), on a virtual clock."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from harness.clock import VirtualClock
from harness.deploy.aggregated import build_aggregated
from harness.deploy.slot_layout import SlotTable
from harness.errors import InputError

from .test_aggregated import HARDWARE, MODEL, T, _deployment, _offer, _req, profile  # noqa: F401

P = 7  # the shared prompt's block id (512 tokens)


def _table(**kw):
    return SlotTable(2, similarity=0.1, block_tokens=512, prompt_cache=True, **kw)


def test_a_restored_entry_leaves_the_host_cache_so_the_next_sharer_misses():
    table = _table()
    assert table.pick((P, 1), 700) == 1  # A: never-used slots are taken 1, 0
    table.release(1, 750)
    assert table.pick((9,), 300) == 0  # B: least recently used (never used); idle slot 1 (A) saved to the host
    table.release(0, 320)
    assert table.pick((11,), 300) == 1  # D shares nothing: LRU slot 1, A's prompt overwritten (a copy in the host)
    assert table.reused_tokens == 0
    assert table.pick((P, 2), 700) == 0  # C: slot 0 holds B; A's entry (512 of its 750 tokens) restored into it
    assert table.reused_tokens == 512 and table.restores == 1
    table.release(1, 320)  # D done; C (and every copy of the shared prompt) still busy on slot 0
    assert table.pick((P, 3), 700) == 1  # E: slot 1 holds D; the host no longer holds A: the prefix is computed
    assert table.reused_tokens == 0 and table.restores == 1


def test_an_idle_slot_holding_the_prefix_is_reused_and_entries_sharing_under_a_quarter_are_skipped():
    table = _table()
    table.pick((P, 1, 2, 3, 4), 2500)  # slot 1: a long prompt opening with the shared block
    table.release(1, 2600)
    assert table.pick((P, 5), 700) == 1  # similarity (512 / 700): the slot's own prompt, no restore
    assert table.reused_tokens == 512 and table.restores == 0
    skip = _table()
    skip.pick((P, 1, 2, 3, 4), 2500)
    skip.release(1, 2600)
    skip.pick((9,), 300)  # slot 0; idle slot 1 saved (2,600 tokens)
    skip.release(0, 320)
    skip.pick((11,), 300)  # LRU slot 1: the long prompt survives only in the host
    assert skip.pick((P, 5), 700) == 0  # 512 / 2,600 < 0.25 of that entry: not restored
    assert skip.reused_tokens == 0 and skip.restores == 0


@pytest.mark.parametrize("host_tokens, reused", [(1000, 0), (None, 512)])
def test_the_host_cache_evicts_its_oldest_entries_past_its_size(host_tokens, reused):
    table = _table(host_tokens=host_tokens)
    assert table.pick((P, 1), 700) == 1  # A
    table.release(1, 750)
    assert table.pick((9,), 300) == 0  # B; idle slot 1 (A, 750 tokens) saved
    assert table.pick((11,), 300) == 1  # D overwrites A's slot: A only in the host
    table.release(0, 320)
    assert table.pick((12,), 300) == 0  # B's slot saved (320): past 1,000 tokens A, the oldest, goes
    assert [e.held for e in table.host] == ([320] if host_tokens else [750, 320])
    table.release(1, 320)
    assert table.pick((P, 2), 700) == 1  # the shared prompt: restored only if A survived
    assert table.reused_tokens == reused


def test_a_request_sharing_a_prompt_held_only_by_a_busy_slot_computes_it_again(profile):  # noqa: F811
    """R1 (shared prompt + its own) decodes for long; R2 ends; R3 shares R1's prompt while R1 is busy: the engine
    finds it in no idle slot and no host entry, so R3 computes all 700 tokens (the block pool found 512). After
    R1 ends, R4 finds its prompt in R1's idle slot."""
    reqs = [_req(1, 0.0, 700, 400, (P, 1)), _req(2, 0.0, 300, 2, (9,)), _req(3, 0.5, 700, 2, (P, 3)),
            _req(4, 5.0, 700, 2, (P, 4))]
    kw = dict(chunk_tokens=2048, separate_passes=True, slot_layout=True)
    engine = _offer(*_deployment(profile, slots=3, slot_prompt_cache=True, **kw), reqs)
    pool = _offer(*_deployment(profile, slots=3, **kw), reqs)
    assert pool[3]["cached_tokens"] == 512
    assert engine[3]["cached_tokens"] == 0
    assert engine[4]["cached_tokens"] == 512 == pool[4]["cached_tokens"]
    assert engine[3]["ttft_s"] > pool[3]["ttft_s"] + (T(700) - T(188)) * 0.5  # the shared 512 tokens computed again


def test_slot_prompt_cache_needs_the_slot_layout_and_a_size_in_mib():
    cfg = OmegaConf.create({"deployment": {"name": "agg", "builder": "x", "hardware": HARDWARE, "slots": 4,
                                           "chunk_tokens": 2048, "slot_prompt_cache": True},
                            "model": MODEL, "workload": {}, "cache": {}})
    with pytest.raises(InputError, match="slot_prompt_cache needs slot_layout"):
        build_aggregated(cfg, VirtualClock())
    cfg.deployment.separate_passes = cfg.deployment.slot_layout = True
    cfg.deployment.host_cache_mib = -1
    with pytest.raises(InputError, match="host_cache_mib must be null"):
        build_aggregated(cfg, VirtualClock())
    cfg.deployment.host_cache_mib = 1  # 1 MiB of 9,216-byte tokens (6 layers x K, V x 384 x 2 bytes)
    dep = build_aggregated(cfg, VirtualClock()).deployment
    assert dep.instances[0].slots.host_tokens == pytest.approx(2**20 / 9216)
