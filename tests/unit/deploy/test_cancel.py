"""Cancelling a request (a client that left): it leaves wherever it is, the capacity it held goes to
the others at the cancel time, and it ends in exactly one record with no callback for it afterwards.

Timelines are worked by hand on the fake profiles of conftest.py (prefill = base + 1 ms/token,
decode step = step_s + per_seq_s x batch), on a VirtualClock.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from harness.clock import VirtualClock
from harness.deploy.aggregated import AggregatedDeployment
from harness.deploy.deployment import Deployment
from harness.deploy.link import Link
from harness.deploy.router.base import LOCAL, PRFAAS, Route
from harness.deploy.router.homogeneous import HomogeneousRouter
from harness.deploy.router.naive import NaiveRouter
from harness.deploy.router.prfaas import PrfaasRouter
from harness.workload.request import Request


def _request(rid, tokens, out=2, t=0.0):
    return Request(request_id=rid, arrival_s=t, input_tokens=tokens, output_tokens=out)


class Watch:
    """A deployment's records and first tokens by request id, and the jobs `submit` returned."""

    def __init__(self, clock, dep):
        self.clock, self.dep = clock, dep
        self.records: list[dict] = []
        self.first_tokens: Counter = Counter()
        self.jobs: dict = {}
        dep.on_record = self.records.append
        dep.on_first_token = lambda job: self.first_tokens.update([job.request.request_id])

    def submit_at(self, t, request):
        self.clock.call_at(t, lambda: self.jobs.__setitem__(request.request_id, self.dep.submit(request)))

    def cancel_at(self, t, rid, reason="client disconnected"):
        out = {}
        self.clock.call_at(t, lambda: out.setdefault("ok", self.dep.cancel(self.jobs[rid], reason)))
        return out

    def finish(self):
        self.clock.run()
        self.dep.close()  # anything left in flight would get a second kind of record here
        counts = Counter(r["request_id"] for r in self.records)
        assert set(counts) == set(self.jobs) and all(n == 1 for n in counts.values()), counts  # one each
        return {r["request_id"]: r for r in self.records}


def _pd(profile, *, n_prefill=1, n_decode=1, n_prfaas=0, router=None, cross_gbps=None, **kw):
    clock = VirtualClock()
    cross = Link(clock, cross_gbps) if cross_gbps is not None else None
    dep = Deployment(name="t", clock=clock, router=router or HomogeneousRouter(), local_profile=profile,
                     n_prefill=n_prefill, n_decode=n_decode, prfaas_profile=profile, n_prfaas=n_prfaas,
                     cross_link=cross, rdma_link=Link(clock, 800.0), **kw)
    return clock, dep, Watch(clock, dep)


def _cancelled(rec):
    assert rec["error"] == "client disconnected" and rec["output_tokens"] == 0
    assert math.isnan(rec["finish_s"])


def test_a_request_queued_for_prefill_leaves_the_queue_and_the_load_routing_sees(fake_profile):
    """One instance, three 1 s prefills at t=0: cancelling the second at 0.5 s starts the third at 1 s, not
    2 s, and the instance's free_at (what least-loaded routing reads) drops by the second's 1 s at once."""
    clock, dep, w = _pd(fake_profile(per_token_s=0.001, bs_max=8))
    for rid in (1, 2, 3):
        w.submit_at(0.0, _request(rid, 1000))
    seen = {}
    w.cancel_at(0.5, 2)
    clock.call_at(0.5, lambda: seen.setdefault("free_at", dep.prefill["local"][0].free_at))
    recs = w.finish()
    assert seen["free_at"] == pytest.approx(2.0)  # was 3.0 with the second still queued
    assert recs[3]["prefill_start_s"] == pytest.approx(1.0)
    _cancelled(recs[2])
    assert math.isnan(recs[2]["prefill_start_s"])
    assert w.first_tokens[2] == 0 and recs[1]["error"] is None and recs[3]["error"] is None


def test_least_loaded_routing_sees_the_queue_a_cancel_shortened(fake_profile):
    """Two instances: X holds a 1 s prefill and a 1 s one queued (free at 2 s), Y a 1.5 s one. Cancelling
    the queued one at 0.4 s frees X at 1 s, so a request arriving at 0.5 s goes to X and starts at 1 s
    (it would have gone to Y, at 1.5 s)."""
    _, _, w = _pd(fake_profile(per_token_s=0.001, bs_max=8), n_prefill=2)
    for rid, tokens in ((1, 1000), (2, 1500), (3, 1000)):
        w.submit_at(0.0, _request(rid, tokens))
    w.submit_at(0.5, _request(4, 100, t=0.5))
    w.cancel_at(0.4, 3)
    recs = w.finish()
    assert recs[3]["prefill_instance"] == recs[1]["prefill_instance"] != recs[2]["prefill_instance"]
    assert recs[4]["prefill_instance"] == recs[1]["prefill_instance"]
    assert recs[4]["prefill_start_s"] == pytest.approx(1.0)
    _cancelled(recs[3])


def test_a_prefilling_request_stops_and_the_instance_starts_the_next_at_the_cancel_time(fake_profile):
    clock, dep, w = _pd(fake_profile(per_token_s=0.001, bs_max=8))
    w.submit_at(0.0, _request(1, 1000))
    w.submit_at(0.0, _request(2, 500))
    seen = {}
    ok = w.cancel_at(0.3, 1)

    def look():
        seen["flows"] = dep.rdma_link.active_flows
        seen["transfer"] = dep.pools["local"].transfer_bytes

    clock.call_at(0.3, look)
    recs = w.finish()
    assert ok["ok"] is True
    assert recs[2]["prefill_start_s"] == pytest.approx(0.3)  # not 1.0, when the first would have ended
    assert recs[2]["prefill_end_s"] == pytest.approx(0.8)
    _cancelled(recs[1])
    assert recs[1]["prefill_start_s"] == 0.0 and recs[1]["prefill_end_s"] == pytest.approx(0.3)
    assert seen["flows"] == 1 and seen["transfer"] == pytest.approx(500_000)  # only the second's KV
    assert w.first_tokens[1] == 0
    assert dep.prefill["local"][0].busy_s == pytest.approx(0.3 + 0.5)


def test_a_batched_pass_goes_on_without_the_cancelled_request_and_ends_sooner(fake_profile):
    """Behind a 0.2 s prompt, two 1000-token prompts go in one pass: 0.1 + 2 x 1.0 = 2.1 s, from 0.2 s.
    Cancelling one at 0.9 s leaves two thirds of the pass, less the cancelled one's 1.0 s share: the
    other's prefill ends at 0.9 + 1.1 x 2/3 (2.3 s uncancelled)."""
    def deployment():
        _, _, w = _pd(fake_profile(base_s=0.1, per_token_s=0.001, bs_max=8), max_batch_tokens=4096)
        for rid, tokens in ((0, 100), (1, 1000), (2, 1000)):
            w.submit_at(0.0, _request(rid, tokens))
        return w

    w, alone = deployment(), deployment()
    w.cancel_at(0.9, 1)
    recs, uncancelled = w.finish(), alone.finish()
    assert uncancelled[1]["prefill_start_s"] == pytest.approx(0.2)
    assert uncancelled[2]["prefill_end_s"] == pytest.approx(2.3)
    assert recs[2]["prefill_end_s"] == pytest.approx(0.9 + 1.1 * 2 / 3)
    _cancelled(recs[1])
    assert recs[1]["prefill_end_s"] == pytest.approx(0.9) and w.first_tokens[1] == 0


def test_a_shortened_pass_brings_the_others_kv_and_first_token_forward(fake_profile):
    """The pass above, with 1 MB of KV per prompt over an 80 Mbit/s (10 MB/s) RDMA link, streamed as the
    pass computes it (the link keeps pace: the KV lands as the pass ends). Cancelling one member at
    0.9 s ends the pass at 0.9 + 1.1 x 2/3; the other's KV is produced by then, so it lands then and
    its first token comes then, not at 2.3 s as uncancelled."""
    def deployment():
        clock = VirtualClock()
        profile = fake_profile(base_s=0.1, per_token_s=0.001, bs_max=8)
        dep = Deployment(name="t", clock=clock, router=HomogeneousRouter(), local_profile=profile, n_prefill=1,
                         n_decode=1, prfaas_profile=profile, n_prfaas=0, cross_link=None,
                         rdma_link=Link(clock, 0.08), max_batch_tokens=4096)
        w = Watch(clock, dep)
        for rid, tokens in ((0, 100), (1, 1000), (2, 1000)):
            w.submit_at(0.0, _request(rid, tokens))
        return w

    w, alone = deployment(), deployment()
    w.cancel_at(0.9, 1)
    recs, uncancelled = w.finish(), alone.finish()
    end = 0.9 + 1.1 * 2 / 3
    assert uncancelled[2]["kv_ready_s"] == pytest.approx(2.3)  # produced at 1 MB/2.1 s: the link keeps pace
    assert recs[2]["prefill_end_s"] == pytest.approx(end)
    # by 0.9 s a third of its 1 MB was produced and sent; the rest, produced by `end`, goes at < 1 MB/s
    assert recs[2]["kv_ready_s"] == pytest.approx(end, abs=1e-9)
    assert recs[2]["ttft_s"] == pytest.approx(end, abs=1e-9)


def test_a_cancelled_transfer_gives_its_share_of_the_link_to_the_others(fake_profile):
    """Two 4 MB KV transfers from PrfaaS share a 1 MB/s link (8 s for both). At 2 s each has sent 1 MB
    (less what 0.1 s of prefill held back); cancelling one lets the other take the whole link."""
    profile = fake_profile(per_token_s=0.0001, kv_per_token=4000.0, bs_max=8)
    clock, dep, w = _pd(profile, n_prefill=0, n_prfaas=2, router=NaiveRouter(), cross_gbps=0.008)
    w.submit_at(0.0, _request(1, 1000))
    w.submit_at(0.0, _request(2, 1000))
    seen = {}

    def look():
        seen["flows"] = dep.cross_link.active_flows
        seen["rate"] = dep.cross_link.rate_gbps

    w.cancel_at(2.0, 1)
    clock.call_at(2.0, look)
    recs = w.finish()
    assert seen["flows"] == 1 and seen["rate"] == pytest.approx(0.008)
    assert recs[2]["kv_ready_s"] == pytest.approx(5.0, abs=0.01)  # 3 MB left at 1 MB/s; was 8 s
    assert dep.pools["prfaas"].transfer_bytes == pytest.approx(0.0)
    _cancelled(recs[1])
    assert w.first_tokens[1] == 0 and math.isnan(recs[1]["kv_ready_s"])


def test_two_cancels_in_one_batched_pass_each_drop_what_was_left_of_their_share(fake_profile):
    """Three 1000-token prompts in one pass from 0.2 s: 0.1 + 3 x 1.0 = 3.1 s. At 0.51 s 90% of every
    share is left: dropping one's 0.9 s ends the pass at 2.4 s. At 1.0 s two thirds are left: dropping
    the second's 2/3 s leaves the third's 2/3 x (1.0 + the pass's 0.1)."""
    clock, dep, w = _pd(fake_profile(base_s=0.1, per_token_s=0.001, bs_max=8), max_batch_tokens=4096)
    for rid, tokens in ((0, 100), (1, 1000), (2, 1000), (3, 1000)):
        w.submit_at(0.0, _request(rid, tokens))
    seen = []
    w.cancel_at(0.51, 1)
    clock.call_at(0.51, lambda: seen.append(dep.prefill["local"][0].free_at))
    w.cancel_at(1.0, 2)
    recs = w.finish()
    assert seen == [pytest.approx(2.4)]
    assert recs[3]["prefill_start_s"] == pytest.approx(0.2)
    assert recs[3]["prefill_end_s"] == pytest.approx(1.0 + 1.1 * 2 / 3)
    _cancelled(recs[1])
    _cancelled(recs[2])


class _FetchRouter:
    """The first request to PrfaaS; later ones local, fetching the longer prefix PrfaaS holds first."""

    def __init__(self):
        self.n = 0

    def route(self, request, view):
        self.n += 1
        return Route(PRFAAS) if self.n == 1 else Route(LOCAL, fetch_prefix_from=PRFAAS)

    def configure(self, threshold_tokens):
        pass


def test_a_request_fetching_a_prefix_stops_its_fetch_and_never_prefills(fake_profile):
    """The second request fetches the first's 1024 cached tokens (1 MB) from PrfaaS over a 1 MB/s link,
    from 3 s; cancelled at 3.5 s, its flow leaves the link and no prefill runs for it."""
    clock, dep, w = _pd(fake_profile(per_token_s=0.001), n_prfaas=1, router=_FetchRouter(), cross_gbps=0.008)
    w.submit_at(0.0, Request(1, 0.0, 1024, 2, (10, 11)))
    w.submit_at(3.0, Request(2, 3.0, 1500, 2, (10, 11, 12)))
    seen = []
    clock.call_at(3.4, lambda: seen.append(dep.cross_link.active_flows))
    w.cancel_at(3.5, 2)
    clock.call_at(3.5, lambda: seen.append(dep.cross_link.active_flows))
    recs = w.finish()
    assert seen == [1, 0]
    assert recs[2]["fetched_tokens"] == 1024 and math.isnan(recs[2]["prefill_start_s"])
    assert dep.prefill["local"][0].busy_s == 0.0
    _cancelled(recs[2])


def test_a_request_waiting_for_a_decode_slot_leaves_and_its_landed_bytes_are_freed(fake_profile):
    """One decode slot: the first request decodes 10 s; the second's KV lands and waits. Cancelled, its
    landed bytes go; the third takes the slot when the first ends."""
    clock, dep, w = _pd(fake_profile(per_token_s=0.001, step_s=0.1, bs_max=1), n_prefill=3)
    w.submit_at(0.0, _request(1, 100, out=101))
    w.submit_at(0.0, _request(2, 100, out=5))
    w.submit_at(0.0, _request(3, 100, out=5))
    seen = {}
    clock.call_at(1.0, lambda: seen.setdefault("before", dep.landed_bytes))
    w.cancel_at(1.0, 2)
    clock.call_at(1.0, lambda: seen.setdefault("after", dep.landed_bytes))
    recs = w.finish()
    assert seen["before"] == pytest.approx(2 * 105_000) and seen["after"] == pytest.approx(105_000)
    assert recs[3]["first_token_s"] == pytest.approx(recs[1]["finish_s"])
    _cancelled(recs[2])
    assert recs[2]["kv_ready_s"] == pytest.approx(0.1) and w.first_tokens[2] == 0


def test_a_request_whose_kv_holds_its_prefill_instance_releases_it(fake_profile):
    """Decode memory for one request (111 kB of 120): the KV of the second and third (prefilled by 0.3 s)
    cannot land, so the prefill instance holds twice and starts nothing new. Cancelling both releases it:
    the fourth prefills at the second cancel, not when the first's decode ends (1.1 s)."""
    profile = fake_profile(per_token_s=0.001, step_s=0.1, bs_max=1, kv_capacity_bytes=120_000)
    clock, dep, w = _pd(profile)
    for rid in (1, 2, 3, 4):
        w.submit_at(0.0, _request(rid, 100, out=11))
    seen = []
    instance = dep.prefill["local"][0]
    clock.call_at(0.5, lambda: seen.append((len(dep.blocked), instance.holds)))
    w.cancel_at(0.5, 2)
    clock.call_at(0.5, lambda: seen.append((len(dep.blocked), instance.holds)))
    w.cancel_at(0.6, 3)
    recs = w.finish()
    assert seen == [(2, 2), (1, 1)]
    assert recs[4]["prefill_start_s"] == pytest.approx(0.6)
    _cancelled(recs[2])
    _cancelled(recs[3])
    assert w.first_tokens[2] == w.first_tokens[3] == 0


def test_a_decoding_request_leaves_the_batch_and_the_step_time_drops(fake_profile):
    """Two requests decode together from 0.1 s, a step of 0.1 + 0.05 x 2 = 0.2 s, 10 steps each (2.1 s).
    Cancelling one at 0.55 s: the step in flight ends at 0.7 as timed, then the other steps alone at
    0.15 s for its last 7 steps: it finishes at 0.7 + 1.05."""
    profile = fake_profile(per_token_s=0.001, step_s=0.1, per_seq_s=0.05, bs_max=4)
    clock, dep, w = _pd(profile, n_prefill=2)
    w.submit_at(0.0, _request(1, 100, out=11))
    w.submit_at(0.0, _request(2, 100, out=11))
    seen = {}

    def look():
        d = dep.decode[0]
        seen.update(reserved=d.reserved, kv=d.kv_bytes_used, tokens=d.tokens_done(w.jobs[2], 0.69))

    w.cancel_at(0.55, 1)
    clock.call_at(0.55, look)
    recs = w.finish()
    assert recs[2]["finish_s"] == pytest.approx(0.7 + 7 * 0.15)  # 2.1 without the cancel
    assert seen["reserved"] == 1 and seen["kv"] == pytest.approx(111_000)  # its slot and KV: free at once
    assert seen["tokens"] == 3  # the step in flight still ends at 0.7: 1 + 2 steps done by 0.69
    _cancelled(recs[1])
    assert recs[1]["first_token_s"] == pytest.approx(0.1) and w.first_tokens[1] == 1


def test_a_request_admitted_but_not_yet_joined_never_joins(fake_profile):
    """The second request's KV lands mid-step (0.15 s, steps at 0.1 + 0.1k): it is admitted to join at
    0.2 s. Cancelled at 0.17 s, it never emits a token, and the first's steps keep their time."""
    profile = fake_profile(per_token_s=0.001, step_s=0.1, bs_max=4)
    clock, dep, w = _pd(profile, n_prefill=2)
    w.submit_at(0.0, _request(1, 100, out=11))
    w.submit_at(0.0, _request(2, 150, out=11))
    seen = {}
    clock.call_at(0.16, lambda: seen.setdefault("reserved_before", dep.decode[0].reserved))
    w.cancel_at(0.17, 2)
    clock.call_at(0.17, lambda: seen.setdefault("reserved_after", dep.decode[0].reserved))
    recs = w.finish()
    assert seen == {"reserved_before": 2, "reserved_after": 1}
    assert w.first_tokens[2] == 0 and math.isnan(recs[2]["first_token_s"])
    assert recs[1]["finish_s"] == pytest.approx(0.1 + 10 * 0.1)
    _cancelled(recs[2])


def test_a_request_held_for_a_prfaas_outage_leaves_the_hold(fake_profile):
    """No local prefill: during the outage a request waits for PrfaaS. Cancelled, it is not routed when
    PrfaaS comes back (no prefill runs for it)."""
    clock, dep, w = _pd(fake_profile(per_token_s=0.001), n_prefill=0, n_prfaas=1, router=NaiveRouter(),
                        cross_gbps=100.0)
    clock.call_at(0.0, lambda: dep.set_prfaas_reachable(False))
    w.submit_at(0.1, _request(1, 1000))
    seen = {}
    clock.call_at(0.2, lambda: seen.setdefault("held", len(dep.held)))
    w.cancel_at(0.5, 1)
    clock.call_at(1.0, lambda: dep.set_prfaas_reachable(True))
    recs = w.finish()
    assert seen["held"] == 1 and dep.held == []
    assert dep.prefill["prfaas"][0].busy_s == 0.0
    _cancelled(recs[1])


def test_cancel_after_the_end_is_refused_and_writes_nothing(fake_profile):
    _, _, w = _pd(fake_profile(per_token_s=0.001))
    w.submit_at(0.0, _request(1, 100))
    ok = w.cancel_at(5.0, 1)
    recs = w.finish()
    assert ok["ok"] is False and recs[1]["error"] is None and len(w.records) == 1


def test_cancel_reaches_the_retry_of_a_request_restarted_by_an_outage(fake_profile):
    """The outage re-prefills the request locally (a new attempt); cancelling with the job `submit`
    returned ends the retry, whose prefill stops."""
    profile = fake_profile(per_token_s=0.001, kv_per_token=4000.0)
    clock, dep, w = _pd(profile, n_prefill=1, n_prfaas=1, router=PrfaasRouter(threshold_tokens=500),
                        cross_gbps=0.008)
    w.submit_at(0.0, _request(1, 1000))
    clock.call_at(0.5, lambda: dep.set_prfaas_reachable(False))
    ok = w.cancel_at(0.8, 1)
    recs = w.finish()
    assert ok["ok"] is True and recs[1]["retries"] == 1 and recs[1]["route"] == "local"
    assert recs[1]["prefill_end_s"] == pytest.approx(0.8)
    assert dep.prefill["local"][0].busy_s == pytest.approx(0.3)


# -- aggregated ---------------------------------------------------------------------------------


def _agg(profile, slots=1, chunk_tokens=None):
    clock = VirtualClock()
    dep = AggregatedDeployment(name="agg", clock=clock, profile=profile, instances=1, slots=slots,
                               chunk_tokens=chunk_tokens)
    return clock, dep, Watch(clock, dep)


def test_aggregated_a_cancelled_prompt_frees_its_slot_for_the_next_request_now(fake_profile):
    _, dep, w = _agg(fake_profile(per_token_s=0.001, step_s=0.1, bs_max=1))
    w.submit_at(0.0, _request(1, 1000))
    w.submit_at(0.0, _request(2, 200))
    w.cancel_at(0.3, 1)
    recs = w.finish()
    assert recs[2]["prefill_start_s"] == pytest.approx(0.3) and recs[2]["first_token_s"] == pytest.approx(0.5)
    _cancelled(recs[1])
    assert recs[1]["prefill_end_s"] == pytest.approx(0.3) and w.first_tokens[1] == 0
    assert dep.instances[0].busy_s == pytest.approx(0.3 + 0.2 + 0.1)


def test_aggregated_a_queued_request_leaves_the_queue(fake_profile):
    _, _, w = _agg(fake_profile(per_token_s=0.001, step_s=0.1, bs_max=1))
    for rid in (1, 2, 3):
        w.submit_at(0.0, _request(rid, 1000))
    w.cancel_at(0.5, 2)
    recs = w.finish()
    assert recs[3]["prefill_start_s"] == pytest.approx(recs[1]["finish_s"])
    assert recs[3]["prefill_start_s"] == pytest.approx(1.1)  # after the first's 1 s prompt and 1 step
    _cancelled(recs[2])
    assert math.isnan(recs[2]["prefill_start_s"])


def test_aggregated_a_decoder_leaves_the_run_at_the_next_step_and_the_step_time_drops(fake_profile):
    """Two slots, both prompts in one 0.2 s step, then steps of 0.1 + 0.05 x 2 = 0.2 s. Cancelling the
    first at 0.55 s cuts the run at 0.6 s; the second's last 7 steps take 0.15 s each."""
    profile = fake_profile(per_token_s=0.001, step_s=0.1, per_seq_s=0.05, bs_max=2)
    _, _, w = _agg(profile, slots=2)
    w.submit_at(0.0, _request(1, 100, out=11))
    w.submit_at(0.0, _request(2, 100, out=11))
    w.cancel_at(0.55, 1)
    recs = w.finish()
    assert recs[2]["first_token_s"] == pytest.approx(0.2)
    assert recs[2]["finish_s"] == pytest.approx(0.6 + 8 * 0.15)  # 2 steps by 0.6, 8 left; 2.2 s uncancelled
    _cancelled(recs[1])
    assert w.first_tokens[1] == 1


@pytest.mark.parametrize("deployment", ["pd", "aggregated"])
def test_a_prompt_cancelled_mid_prefill_leaves_its_prefix_computed_for_the_next_turn(fake_profile, deployment):
    """One rule in both deployments (harness.deploy.cancel's note): a 1024-token prompt (two 512-token
    blocks) cancelled at 0.3 s, a third into its 1 s prefill, leaves its blocks marked computed, so the
    next turn extending it (arriving at 2 s, when nothing else runs) finds the 1024 tokens cached."""
    profile = fake_profile(per_token_s=0.001, step_s=0.1, bs_max=1)
    if deployment == "pd":
        _, _, w = _pd(profile, prefix_cache=True, block_tokens=512)
    else:
        clock = VirtualClock()
        w = Watch(clock, AggregatedDeployment(name="agg", clock=clock, profile=profile, instances=1, slots=1,
                                              chunk_tokens=None, prefix_cache=True, block_tokens=512))
    w.submit_at(0.0, Request(request_id=1, arrival_s=0.0, input_tokens=1024, output_tokens=2, hash_ids=(7, 8)))
    w.submit_at(2.0, Request(request_id=2, arrival_s=2.0, input_tokens=1536, output_tokens=2, hash_ids=(7, 8, 9)))
    w.cancel_at(0.3, 1)
    recs = w.finish()
    _cancelled(recs[1])
    assert recs[2]["error"] is None and recs[2]["cached_tokens"] == 1024


@pytest.mark.parametrize("deployment", ["pd", "aggregated"])
@pytest.mark.parametrize("stopped", [True, False])
def test_a_request_that_left_without_finishing_says_when(fake_profile, deployment, stopped):
    """`ended_s`, where its time series intervals end: the cancel's time, or the stop's for one cut off
    (`close(interrupted=True)`); a request that finished, or one left when a run ended by itself, has
    no such key (a run without cancels or a stop writes the files it always did)."""
    profile = fake_profile(per_token_s=0.001, step_s=0.1, bs_max=4)
    clock, dep, w = _pd(profile) if deployment == "pd" else _agg(profile, slots=4)
    w.submit_at(0.0, _request(1, 100, out=100))
    w.submit_at(0.0, _request(2, 100, out=100))
    w.submit_at(0.0, _request(3, 100, out=2))  # done well before 2 s
    w.cancel_at(0.5, 1)
    clock.run(until=2.0)
    dep.close("stopped", interrupted=stopped)
    recs = {r["request_id"]: r for r in w.records}
    assert recs[1]["ended_s"] == pytest.approx(0.5) and math.isnan(recs[1]["finish_s"])
    assert recs[3]["error"] is None and "ended_s" not in recs[3]
    if stopped:
        assert recs[2]["ended_s"] == pytest.approx(2.0) and recs[2]["interrupted"] is True
    else:
        assert recs[2]["error"] == "stopped" and "ended_s" not in recs[2]
