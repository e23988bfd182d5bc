"""The KV hand-off options (harness/deploy/handoff.py): store-and-forward, save and restore costs, the bytes
beyond the KV, and the per-request columns; their defaults leave a run as it was, bit for bit.

Timelines are worked by hand on the fake profiles of conftest.py (prefill = base + per_token x tokens,
KV = kv_per_token x tokens) on a VirtualClock.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
from omegaconf import OmegaConf

from harness.clock import VirtualClock
from harness.deploy.deployment import Deployment
from harness.deploy.handoff import Handoff
from harness.deploy.link import Link
from harness.deploy.router.homogeneous import HomogeneousRouter
from harness.deploy.router.naive import NaiveRouter
from harness.errors import InputError
from harness.workload.request import Request
from tests.unit.deploy.test_cancel import Watch

# 1000 tokens: prefill 1.0 s; KV 1 MB + 192 + 16 x 1000 bytes; save 0.01 + 1e-5 x 1000; restore 0.005 + 2e-6 x 1000
SAVE, RESTORE, NBYTES = 0.02, 0.007, 1_000_000 + 192 + 16 * 1000
EFF = 1448 / 1514
HANDOFF = Handoff(store_and_forward=True, save_base_s=0.01, save_per_token_s=1e-5, restore_base_s=0.005,
                  restore_per_token_s=2e-6, fixed_bytes=192, per_token_bytes=16)


def _naive(profile, handoff, *, gbps=0.08, efficiency=EFF, n_decode=1):
    """Every prefill on one remote instance; the cross link at `gbps` (0.08: 10 MB/s) with `efficiency`."""
    clock = VirtualClock()
    dep = Deployment(name="t", clock=clock, router=NaiveRouter(), local_profile=profile, n_prefill=0,
                     n_decode=n_decode, prfaas_profile=profile, n_prfaas=1,
                     cross_link=Link(clock, gbps, efficiency=efficiency), rdma_link=Link(clock, 800.0),
                     handoff=handoff)
    return clock, dep


def _run(clock, dep, requests):
    """Records by request id, one each (`Watch.finish` checks)."""
    watch = Watch(clock, dep)
    for r in requests:
        watch.submit_at(r.arrival_s, r)
    return watch.finish()


def test_store_and_forward_one_transfer_is_prefill_save_link_restore_in_turn(fake_profile):
    """Closed form: first token = prefill + save + bytes / (rate x efficiency) + restore."""
    clock, dep = _naive(fake_profile(per_token_s=0.001), HANDOFF)
    rec = _run(clock, dep, [Request(1, 0.0, 1000, 2)])[1]
    link_s = NBYTES / (0.08e9 / 8 * EFF)
    assert rec["prefill_end_s"] == pytest.approx(1.0)
    assert rec["kv_save_s"] == pytest.approx(SAVE)
    assert rec["kv_transfer_s"] == pytest.approx(link_s)
    assert rec["kv_ready_s"] == pytest.approx(1.0 + SAVE + link_s)
    assert rec["kv_restore_s"] == pytest.approx(RESTORE)
    assert rec["first_token_s"] == pytest.approx(1.0 + SAVE + link_s + RESTORE)
    assert rec["kv_bytes_sent"] == NBYTES
    assert dep.cross_link.bytes_sent == pytest.approx(NBYTES / EFF)  # on the wire


def test_layerwise_with_the_same_costs_streams_during_the_prefill(fake_profile):
    """Layer-wise, the 0.106 s of KV streams over the 1 s prefill: it has landed when the save ends."""
    handoff = Handoff(**{**HANDOFF.__dict__, "store_and_forward": False})
    clock, dep = _naive(fake_profile(per_token_s=0.001), handoff)
    rec = _run(clock, dep, [Request(1, 0.0, 1000, 2)])[1]
    assert rec["kv_ready_s"] == pytest.approx(1.0 + SAVE)
    assert rec["first_token_s"] == pytest.approx(1.0 + SAVE + RESTORE)
    assert rec["kv_transfer_s"] == pytest.approx(1.0)  # on the link from the prefill's start to its end


def test_the_save_occupies_the_prefill_instance(fake_profile):
    """llama-server saves on its main loop: the second prefill starts when the first one's save ends."""
    clock, dep = _naive(fake_profile(per_token_s=0.001), HANDOFF)
    recs = _run(clock, dep, [Request(1, 0.0, 1000, 2), Request(2, 0.0, 1000, 2)])
    assert recs[2]["prefill_start_s"] == pytest.approx(1.0 + SAVE)
    assert dep.prefill["prfaas"][0].busy_s == pytest.approx(2 * (1.0 + SAVE))


def test_the_restore_holds_the_decode_slot(fake_profile):
    """One slot: the second request's restore starts when the first leaves the slot, and its first token
    comes a restore later."""
    profile = fake_profile(per_token_s=0.001, step_s=0.1, bs_max=1)
    clock, dep = _naive(profile, HANDOFF, gbps=100.0, efficiency=1.0)
    recs = _run(clock, dep, [Request(1, 0.0, 1000, 21), Request(2, 0.0, 1000, 2)])  # 1 decodes 2 s
    assert recs[2]["first_token_s"] == pytest.approx(recs[1]["finish_s"] + RESTORE)


def test_the_local_hand_off_over_rdma_pays_the_same_costs(fake_profile):
    clock = VirtualClock()
    dep = Deployment(name="t", clock=clock, router=HomogeneousRouter(), local_profile=fake_profile(), n_prefill=1,
                     n_decode=1, rdma_link=Link(clock, 0.08), handoff=HANDOFF)
    rec = _run(clock, dep, [Request(1, 0.0, 1000, 2)])[1]
    assert rec["first_token_s"] == pytest.approx(1.0 + SAVE + NBYTES / 1e7 + RESTORE)


def test_records_carry_the_hand_off_columns_only_with_a_modelled_hand_off(fake_profile):
    for handoff, has in ((None, False), (HANDOFF, True)):
        clock, dep = _naive(fake_profile(), handoff)
        rec = _run(clock, dep, [Request(1, 0.0, 100, 2)])[1]
        assert ("kv_transfer_s" in rec) is has and ("kv_save_s" in rec) is has and ("kv_restore_s" in rec) is has


def test_from_config_is_none_at_the_defaults_and_reads_every_option():
    assert Handoff.from_config(OmegaConf.create({})) is None
    assert Handoff.from_config(OmegaConf.create({"kv_handoff": "layerwise", "kv_save_s": {"base_s": 0}})) is None
    cfg = OmegaConf.create({"kv_handoff": "store_and_forward", "kv_save_s": {"base_s": 0.01, "per_token_s": 1e-5},
                            "kv_restore_s": {"base_s": 0.005, "per_token_s": 2e-6},
                            "kv_bytes_overhead": {"fixed_bytes": 192, "per_token_bytes": 16}})
    assert Handoff.from_config(cfg) == HANDOFF


@pytest.mark.parametrize(("cfg", "message"), [
    ({"kv_handoff": "pipelined"}, "deployment.kv_handoff must be one of layerwise, store_and_forward"),
    ({"kv_save_s": {"base_s": -1}}, "deployment.kv_save_s.base_s must be a finite number >= 0"),
    ({"kv_restore_s": {"per_token_s": "x"}}, "deployment.kv_restore_s.per_token_s must be"),
    ({"kv_bytes_overhead": {"bytes": 1}}, "deployment.kv_bytes_overhead: unknown key 'bytes'"),
])
def test_bad_hand_off_options_name_the_key(cfg, message):
    with pytest.raises(InputError, match=message.replace(".", r"\.")):
        Handoff.from_config(OmegaConf.create(cfg))


_SHORT = ["workload.num_requests=150", "loadgen.rate_rps=3.0", "loadgen.progress=false"]
_DEFAULTS_SPELLED_OUT = ["deployment.kv_handoff=layerwise", "deployment.kv_save_s.base_s=0",
                         "deployment.kv_save_s.per_token_s=0", "deployment.kv_restore_s.base_s=0",
                         "deployment.kv_bytes_overhead.per_token_bytes=0", "link.efficiency=1.0",
                         "link.sharing=fair"]


def test_the_defaults_spelled_out_give_the_same_run_bit_for_bit(compose_cfg):
    from harness.sim import run_sim

    plain = run_sim(compose_cfg(_SHORT))
    spelled = run_sim(compose_cfg([*_SHORT, *_DEFAULTS_SPELLED_OUT]))
    pd.testing.assert_frame_equal(plain.requests, spelled.requests, check_exact=True)
    pd.testing.assert_frame_equal(plain.timeseries, spelled.timeseries, check_exact=True)
    assert plain.meta["sim_events"] == spelled.meta["sim_events"]
    assert "kv_transfer_s" not in plain.requests.columns


def test_a_store_and_forward_run_records_its_hand_off(compose_cfg):
    from harness.sim import run_sim

    run = run_sim(compose_cfg([*_SHORT, "deployment.kv_handoff=store_and_forward", "deployment.kv_save_s.base_s=0.5",
                               "link.sharing=fifo", "link.efficiency=0.9"]))
    df = run.requests
    done = df[df["error"].isna()]
    assert len(done) and (done["kv_save_s"] == 0.5).all() and (done["kv_transfer_s"] > 0).all()
    remote = done[done["route"] == "prfaas"]
    sent = remote["kv_ready_s"] - remote["kv_transfer_s"]  # the KV left after the prefill and its save
    assert len(remote) and (remote["prefill_end_s"] + 0.5 <= sent + 1e-9).all()
    assert not math.isnan(float(done["kv_restore_s"].iloc[0]))
