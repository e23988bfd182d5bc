"""PrfaaS's dynamic mechanisms on real configs: the cache pool, cache- and bandwidth-aware routing,
the long-term rebalancer. Each test runs whole emulated deployments in virtual time."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from harness.analysis.summary import summarize
from harness.runs.sim import run_sim
from harness.workload import build_workload, trace_stats

from .conftest import compose_cfg

TRACE = ("workload=mooncake_conversation", "workload.num_requests=4000", "deployment=homogeneous_pd")
UNLIMITED = (*TRACE, "cache.capacity_tokens=null")  # the default pool: two tests read the same run


@functools.cache
def _run(*overrides):
    """One run per override list in this module: the tests only read what it returns."""
    cfg = compose_cfg(*overrides)
    result = run_sim(cfg)
    return cfg, result, summarize(result.requests, result.timeseries, result.meta, cfg.analysis)


@pytest.fixture(scope="module", autouse=True)
def _forget_runs():
    yield
    _run.cache_clear()  # the frames go with the module


def _pool_hit(result):
    df = result.requests
    return df["cache_hit_tokens"].sum() / df["input_tokens"].sum()


def test_unlimited_pool_hits_what_the_trace_says_it_can():
    """Replayed through homogeneous_pd, the pool's token hit rate is the trace's infinite-cache figure."""
    cfg, result, _ = _run(*UNLIMITED)
    stats = trace_stats(build_workload(cfg.workload), block_tokens=512)
    assert _pool_hit(result) == pytest.approx(stats["prefix_hit_token_frac_infinite"], rel=1e-12)
    assert 0.3 < _pool_hit(result) < 0.45


def test_a_smaller_pool_hits_less_and_never_more_than_plain_lru():
    """Capacity in blocks C: hit rate falls with C, and never beats a block LRU of C blocks (the pool also
    holds transfer-cache blocks, so it can only do worse)."""
    cfg = compose_cfg(*TRACE)
    requests = build_workload(cfg.workload)
    hits = []
    for blocks in (100_000, 10_000, 1_000):
        _, result, _ = _run(*TRACE, f"cache.capacity_tokens={blocks * 512}", "cache.exact_state_match=false")
        lru_hit = trace_stats(requests, block_tokens=512, lru_blocks=(blocks,))["prefix_hit_lru"][str(blocks)]
        hits.append(_pool_hit(result))
        assert hits[-1] <= lru_hit["token_frac"] + 1e-9
    assert hits[0] > hits[1] > hits[2]


def test_hybrid_state_matching_reuses_less_than_it_hits():
    """Linear-attention state only matches at stored checkpoints: skipped prefill <= block-level hits."""
    cfg, _result, summary = _run(*UNLIMITED)
    assert cfg.cache.exact_state_match  # the default: states only at checkpoints
    assert summary["cached_token_frac"] < summary["cache_hit_token_frac"]
    _, _dense_like, dense_summary = _run(*TRACE, "cache.exact_state_match=false")
    assert dense_summary["cached_token_frac"] > summary["cached_token_frac"]


def test_cache_aware_routing_beats_cache_blind_on_agentic_sessions():
    """Cache-blind routes (and plans) on whole prompts: sessions cross t and get recomputed remotely."""
    base = ("workload=agentic", "deployment=prfaas_dynamic", "loadgen.rate_rps=2.0")
    _, _, blind = _run(*base, "deployment.router.cache_aware=false")
    _, aware_result, aware = _run(*base, "deployment.router.cache_aware=true", "deployment.router.cache_transfer=true")
    assert aware["prefill_tokens_computed"] < 0.85 * blind["prefill_tokens_computed"]
    assert aware["ttft_p90_s"] < blind["ttft_p90_s"]
    assert aware_result.requests["fetched_tokens"].sum() > 0  # abundant bandwidth: prefixes moved across


def test_bandwidth_aware_router_rides_out_a_link_drop():
    """The link falls from 100 to 10 Gbps at t=200 s. Threshold-only keeps offloading half the traffic and
    queues KV on the link; the bandwidth-aware router re-solves t for 10 Gbps."""
    base = ("link.capacity_schedule=[[200,10]]", "loadgen.rate_rps=2.3", "workload.num_requests=2000")
    _, _static_result, static = _run("deployment=prfaas_pd", *base)
    _, aware_result, aware = _run("deployment=prfaas_dynamic", *base)
    assert aware["ttft_p90_s"] < 0.9 * static["ttft_p90_s"]
    assert aware["goodput_rps"] >= static["goodput_rps"]
    assert aware["failed"] == 0 and static["failed"] == 0
    ts = aware_result.timeseries
    after = ts[ts["t_s"] >= 200]
    assert (after["egress_gbps"] <= after["link_capacity_gbps"] + 1e-9).all()
    assert aware["offload_fraction"] < static["offload_fraction"]


def test_rebalancer_follows_a_traffic_shift():
    """Prompts shrink mid-run: the rebalancer moves instances to decode and, within 300 s of the shift,
    reaches at least 90% of a static split planned for the new traffic."""
    _, result, _ = _run("workload=traffic_shift", "loadgen.rate_rps=inf", "rebalancer.enabled=true")
    _, _, replanned = _run("workload=short_prompts", "loadgen.rate_rps=inf")
    df, ts = result.requests, result.timeseries
    shift = float(df.loc[df["request_id"] == 2000, "arrival_s"].iloc[0])
    end = float(df["arrival_s"].max())
    assert ts["n_decode_active"].iloc[-1] > ts["n_decode_active"].iloc[0]
    finish = df["finish_s"].to_numpy()
    after = ((finish >= shift + 300) & (finish < end)).sum() / (end - shift - 300)
    assert after >= 0.9 * replanned["steady_throughput_rps"]
    _, static_result, _ = _run("workload=traffic_shift", "loadgen.rate_rps=inf")
    sdf = static_result.requests
    s_shift = float(sdf.loc[sdf["request_id"] == 2000, "arrival_s"].iloc[0])
    s_end = float(sdf["arrival_s"].max())
    s_finish = sdf["finish_s"].to_numpy()
    static_after = ((s_finish >= s_shift + 300) & (s_finish < s_end)).sum() / (s_end - s_shift - 300)
    assert static_after < 0.75 * replanned["steady_throughput_rps"]
    assert np.isfinite(after)
