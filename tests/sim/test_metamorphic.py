"""Metamorphic properties of the emulator: change an input and every request must move as the model says.

Each test runs the same seeded workload twice or more with one input changed and compares the runs
request by request, so it checks a mechanism, not a number:
- time-scale invariance: every speed divided by 2 and every time input (arrival gaps, decode step, RTT,
  think time, SLO period, the aggregated engine's wake-up and cache-save times) doubled doubles every
  timestamp of every request and changes nothing else (PD deployments and the aggregated engine);
- a faster cross-DC link leaves the prefills where they were, never delays a request's KV and delays its
  first token by less than one decode step (the step boundary it joins at; harness/deploy/decode.py);
- one more decode instance never lowers the throughput of a saturated closed loop;
- conservation: the link's egress series integrates to the KV the PrfaaS requests sent; the arrival,
  completion and cache-hit series to the records' counts;
- the prefix cache off: nothing cached, no prefill shorter, no more KV moved, TTFT higher on average; a
  bigger pool never caches less in total;
- PrfaaS-PD at its limits (a threshold no prompt exceeds, a threshold of 0, no local prefill) is
  homogeneous or naive PD, request by request;
- alone, a longer prompt never finishes its prefill, KV or first token sooner on its route;
- one output token: no TPOT (NaN); every request recorded exactly once with ordered timestamps, on every
  deployment kind and a spread of workloads and faults.
Runs are small (one to 300 requests, virtual time) and shared between tests where they can be. Each check
was seen to fail with the mechanism broken on purpose in a scratch copy (the commit messages list how).
"""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
import pandas as pd
import pytest
from omegaconf import DictConfig, OmegaConf

from harness.analysis.summary import summarize
from harness.runs.sim import run_sim

from .conftest import compose_cfg

ORDER = ("arrival_s", "prefill_start_s", "prefill_end_s", "kv_ready_s", "first_token_s", "finish_s")
TIMES = (*ORDER, "ttft_s", "tpot_s", "e2e_s")
SAME = ("route", "prefill_instance", "decode_instance", "input_tokens", "cached_tokens", "output_tokens",
        "kv_bytes_sent", "error")
STEP_S = 0.025  # internal_1t's constant H20 decode step (conf/model/internal_1t.yaml)


def _with(cfg: DictConfig, **updates) -> DictConfig:
    """A copy of a composed config with dotted keys set (cheaper than composing again)."""
    out = cfg.copy()
    for key, value in updates.items():
        OmegaConf.update(out, key.replace("__", "."), value, force_add=True)
    return out


def _run(cfg: DictConfig) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    result = run_sim(cfg)
    requests = result.requests
    frame = requests if isinstance(requests, pd.DataFrame) else requests.frame(list(requests.columns))
    return frame.sort_values("request_id", ignore_index=True), result.timeseries, result.meta


def assert_well_formed(df: pd.DataFrame, n_sent: int) -> None:
    """Every request exactly once; each completed one's timestamps in the order of its path."""
    assert len(df) == n_sent and df["request_id"].is_unique
    done = df[df["error"].isna()]
    assert len(done) > 0
    for early, late in pairwise(ORDER):
        a, b = done[early].to_numpy(float), done[late].to_numpy(float)
        assert np.all(a <= b), f"{early} > {late} for request(s) {done['request_id'][~(a <= b)].tolist()[:5]}"
    one = done["output_tokens"].to_numpy() == 1
    assert np.all(np.isnan(done["tpot_s"].to_numpy()) == one)  # TPOT exists iff a second token does


# -- time-scale invariance ---------------------------------------------------------------------------------

# Every input with a unit of time in it, per deployment kind: speeds (divided by k) and times (multiplied).
# Prefill curves are scaled with `prefill.scale` (a factor on T(l)); the SLO is tokens/s (it sizes bs_max
# against the step). Sizes (tokens, bytes) stay. `None` reads as the schema's default (1.0 for a scale).
PD_SPEEDS = ("planner.slo_tokens_per_s", "link.capacity_gbps", "link.per_connection_gbps",
             "deployment.local.rdma_gbps", "loadgen.rate_rps")
PD_TIMES = ("model.profiles.h20.prefill.scale", "model.profiles.h200.prefill.scale",
            "model.profiles.h20.decode.step_s", "link.rtt_ms",
            *(f"model.decode_variants.linear.h20.{key}" for key in ("base_s", "per_seq_s", "per_token_s")))
AGG_SPEEDS = ("planner.slo_tokens_per_s", "loadgen.rate_rps")
AGG_TIMES = ("model.profiles.cpu_local.prefill.scale", "deployment.wake_s", "deployment.wake_after_s",
             "deployment.cache_save_token_s",
             *(f"model.profiles.cpu_local.decode.{key}" for key in ("base_s", "per_seq_s", "per_token_s")))
SESSIONS = {"speeds": ("workload.session_arrivals.rate_rps",), "times": ("workload.think_time_s.median_s",)}


def _slowed(cfg: DictConfig, k: float, speeds: tuple[str, ...], times: tuple[str, ...]) -> DictConfig:
    """Every speed divided by k and every time multiplied by k: every timestamp must scale by exactly k."""
    def value(key: str) -> float | None:
        v = OmegaConf.select(cfg, key)
        return 1.0 if v is None and key.endswith(".scale") else v

    updates = {key: value(key) / k for key in speeds if value(key) is not None}
    updates.update({key: value(key) * k for key in times if value(key) is not None})
    return _with(cfg, **updates)


TIME_SCALE_CASES = {
    # a thin link (8 Gbps, ~12 Gbps offered): flows share it and outlast their prefill; queues at 2 req/s
    "prfaas_link_bound": (("deployment=prfaas_pd", "workload.num_requests=200", "loadgen.rate_rps=2.0",
                           "link.capacity_gbps=8"), PD_SPEEDS, PD_TIMES),
    # prefix caches (sessions), token-budget prefill batches, the batch- and context-dependent decode step
    "prfaas_agentic_linear_batched": (
        ("deployment=prfaas_pd", "workload=agentic", "workload.num_requests=200", "model.decode_variant=linear",
         "deployment.prefill_max_batch_tokens=16384"),
        PD_SPEEDS + SESSIONS["speeds"], PD_TIMES + SESSIONS["times"]),
    # the aggregated engine model with every timed option on: wake-up, separate passes, slot layout, prompt
    # cache saves, attention tiles, prompts beside decodes
    "aggregated_engine_options": (
        ("deployment=aggregated", "model=random_llama_35m", "workload=agentic", "workload.num_requests=200",
         "workload.output_lengths.high=64", "workload.first_user_tokens.high=1024",
         "workload.appended_tokens.high=512", "workload.system_prompt_tokens=300", "deployment.wake_s=0.05",
         "deployment.separate_passes=true", "deployment.slot_layout=true", "deployment.cache_save_token_s=1e-5",
         "deployment.tile_tokens=64", "deployment.tile_fill=0.5", "deployment.mixed_prompt_factor=1.2"),
        AGG_SPEEDS + SESSIONS["speeds"], AGG_TIMES + SESSIONS["times"]),
}


@pytest.fixture(scope="module")
def runs():
    """Runs shared by the tests of this module, by name."""
    cache: dict[str, tuple[DictConfig, pd.DataFrame, pd.DataFrame, dict]] = {}

    def get(name: str, make):
        if name not in cache:
            cfg = make()
            cache[name] = (cfg, *_run(cfg))
        return cache[name]

    return get


@pytest.mark.parametrize("case", list(TIME_SCALE_CASES))
def test_halving_every_speed_and_rate_doubles_every_timestamp(case, runs):
    overrides, speeds, times = TIME_SCALE_CASES[case]
    cfg, base, _, base_meta = runs(case, lambda: compose_cfg(*overrides))
    _, slow, _, slow_meta = runs(f"{case}/slowed", lambda: _slowed(cfg, 2.0, speeds, times))
    assert_well_formed(base, int(cfg.workload.num_requests))
    for key in ("threshold_tokens", "n_prefill", "n_decode"):  # the planner sees the same problem
        assert slow_meta[key] == base_meta[key], key
    if base_meta["plan"] is not None:
        assert slow_meta["plan"]["lambda_max_rps"] == pytest.approx(base_meta["plan"]["lambda_max_rps"] / 2,
                                                                    rel=1e-12)
    for col in SAME:
        pd.testing.assert_series_equal(slow[col], base[col], obj=col)
    for col in TIMES:  # powers of two scale floats exactly; 1e-9 leaves room for a reordered sum, no more
        np.testing.assert_allclose(slow[col].to_numpy(float), 2.0 * base[col].to_numpy(float), rtol=1e-9,
                                   atol=0, err_msg=col)
    # the run had something to scale: queueing, shared links, cache hits
    assert (base["prefill_start_s"] > base["arrival_s"]).any()
    if case == "prfaas_link_bound":
        assert ((base["kv_ready_s"] - base["prefill_end_s"]) > 0.5).any()  # KV outlasting its prefill
    else:
        assert (base["cached_tokens"] > 0).mean() > 0.5
    if case.startswith("prfaas"):
        assert (base["route"] == "prfaas").any()


# -- conservation ------------------------------------------------------------------------------------------

def test_the_link_carries_exactly_the_kv_the_prfaas_requests_sent(runs):
    cfg, df, ts, _ = runs("prfaas_link_bound", lambda: compose_cfg(*TIME_SCALE_CASES["prfaas_link_bound"][0]))
    assert df["fetch_bytes"].sum() == 0  # nothing else crosses (no cross-cluster cache fetches here)
    carried = float((ts["egress_gbps"] * ts["bin_s"]).sum()) * 1e9 / 8
    sent = float(df.loc[df["route"] == "prfaas", "kv_bytes_sent"].sum())
    assert sent > 0 and carried == pytest.approx(sent, rel=1e-9)
    assert (df.loc[df["route"] == "local", "kv_bytes_sent"] > 0).all()  # local KV moves too, over RDMA
    # the link is the bottleneck somewhere, and never carries more than its capacity
    assert ts["egress_gbps"].max() == pytest.approx(cfg.link.capacity_gbps, rel=1e-9)
    assert (ts["egress_gbps"] <= ts["link_capacity_gbps"] * (1 + 1e-12)).all()


@pytest.mark.parametrize("case", ["prfaas_link_bound", "prfaas_agentic_linear_batched"])
def test_the_time_series_counts_every_arrival_completion_and_cache_hit_once(case, runs):
    overrides = TIME_SCALE_CASES[case][0]
    _, df, ts, _ = runs(case, lambda: compose_cfg(*overrides))
    width = ts["bin_s"]
    assert float((ts["arrivals_per_s"] * width).sum()) == pytest.approx(len(df), rel=1e-9)
    assert float((ts["completions_per_s"] * width).sum()) == pytest.approx(df["error"].isna().sum(), rel=1e-9)
    hits = float(df["cache_hit_tokens"].sum())
    assert float((ts["cache_hit_tokens_per_s"] * width).sum()) == pytest.approx(hits, rel=1e-9)
    assert (hits > 0) == (case != "prfaas_link_bound")


# -- a faster link -----------------------------------------------------------------------------------------

def test_a_faster_link_never_delays_a_kv_transfer_and_moves_no_prefill(runs):
    """Low load, fixed split and threshold: the prefills do not depend on the link (KV streams beside them).

    Max-min fair shares over the same flows with the same production caps are pointwise higher on a
    wider link, so every transfer ends no later (kv_ready_s). The first token comes at the next decode
    step boundary of the instance the request lands on, which may be another one: at most one step later.
    """
    cfg = compose_cfg("deployment=prfaas_pd", "workload.num_requests=80", "loadgen.rate_rps=0.3",
                      "deployment.local.n_prefill=3", "deployment.local.n_decode=5",
                      "deployment.router.threshold_tokens=19456")
    frames = [_run(_with(cfg, link__capacity_gbps=gbps))[0] for gbps in (2, 4, 8, 32)]
    for slow, fast in pairwise(frames):
        assert_well_formed(fast, 80)
        for col in ("route", "prefill_instance", "prefill_start_s", "prefill_end_s", "kv_bytes_sent"):
            pd.testing.assert_series_equal(fast[col], slow[col], obj=col)
        assert (fast["kv_ready_s"] <= slow["kv_ready_s"]).all()
        assert (fast["first_token_s"] < slow["first_token_s"] + STEP_S).all()
    prfaas = frames[0]["route"] == "prfaas"
    assert prfaas.sum() > 10
    assert (frames[1]["kv_ready_s"][prfaas] < frames[0]["kv_ready_s"][prfaas]).all()  # 2 Gbps binds each one
    assert frames[1]["ttft_s"].mean() < frames[0]["ttft_s"].mean()


# -- decode capacity ---------------------------------------------------------------------------------------

def test_another_decode_instance_never_lowers_saturated_throughput():
    """A closed loop of 64 requests; 6 prefill instances (~8 req/s of 2K prompts), 1 to 4 decoders of
    ~3.1 req/s each (20 slots x 256 tokens x 25 ms). Past the decode bound, adding one changes only which
    step boundary a request joins (finishes move by < 1 step), so the run's throughput may drop by at most
    one step over its duration."""
    cfg = compose_cfg("deployment=homogeneous_pd", "workload=fixed", "workload.input_tokens=2048",
                      "workload.output_tokens=256", "workload.num_requests=300", "loadgen.rate_rps=inf",
                      "loadgen.saturation_in_flight=64", "deployment.local.n_prefill=6")
    thr, span = [], []
    for n_decode in (1, 2, 3, 4):
        run_cfg = _with(cfg, deployment__local__n_decode=n_decode)
        df, ts, meta = _run(run_cfg)
        assert_well_formed(df, 300)
        summary = summarize(df, ts, meta, run_cfg.analysis)
        assert summary["completed"] == 300
        thr.append(summary["throughput_rps"])
        span.append(summary["duration_s"])
    for i in range(len(thr) - 1):
        assert thr[i + 1] >= thr[i] * (1 - STEP_S / span[i]), thr
    assert thr[1] > 1.8 * thr[0] and thr[2] > 1.2 * thr[1], thr  # decode-bound: each one adds ~3.1 req/s


# -- prefix cache ------------------------------------------------------------------------------------------

def test_switching_the_prefix_cache_off_caches_nothing_and_speeds_nothing_up():
    """Homogeneous PD (one route) at low load on agentic sessions: with the cache a prefill computes
    T(c + n) - T(c) + T(0) <= T(c + n) and ships only the uncached KV."""
    cfg = compose_cfg("deployment=homogeneous_pd", "workload=agentic", "workload.num_requests=150",
                      "workload.session_arrivals.rate_rps=0.05", "deployment.local.n_prefill=4",
                      "deployment.local.n_decode=4")
    on, off = (_run(_with(cfg, cache__enabled=enabled))[0] for enabled in (True, False))
    assert_well_formed(on, 150)
    assert_well_formed(off, 150)
    assert (off["cached_tokens"] == 0).all() and (off["cache_hit_tokens"] == 0).all()
    assert (on["cached_tokens"] > 0).mean() > 0.5
    prefill_on, prefill_off = (f["prefill_end_s"] - f["prefill_start_s"] for f in (on, off))
    assert (prefill_off >= prefill_on).all()
    assert (prefill_off > prefill_on)[on["cached_tokens"] > 0].all()
    assert (off["kv_bytes_sent"] >= on["kv_bytes_sent"]).all()
    assert off["ttft_s"].mean() > 1.5 * on["ttft_s"].mean()


def test_a_bigger_prefix_pool_never_caches_less():
    """LRU has the inclusion property: on one access sequence a bigger pool holds a superset of a smaller
    one's blocks. Here the sequences differ only in timing (the KV in transfer holds pool blocks too), so
    the run totals are compared, not each request: hits and reused tokens never fall, mean TTFT never rises."""
    cfg = compose_cfg("deployment=homogeneous_pd", "workload=agentic", "workload.num_requests=200")
    frames = [_run(_with(cfg, cache__capacity_tokens=cap))[0] for cap in (50_000, 200_000, 1_000_000, None)]
    hits = [int(f["cache_hit_tokens"].sum()) for f in frames]
    reused = [int(f["cached_tokens"].sum()) for f in frames]
    ttft = [float(f["ttft_s"].mean()) for f in frames]
    assert hits == sorted(hits) and reused == sorted(reused) and ttft == sorted(ttft, reverse=True), (hits, ttft)
    assert reused[0] < reused[-1] / 10 and ttft[0] > 2 * ttft[-1]


# -- the PrfaaS deployment at its limits is the other two --------------------------------------------------

def test_prfaas_at_its_limits_is_homogeneous_or_naive_pd_request_by_request():
    """A threshold no prompt exceeds routes everything locally: homogeneous PD with the same split. A threshold
    of 0, or no local prefill instance, routes everything remotely: naive heterogeneous PD. Same timestamps,
    instances and KV, request by request (agentic sessions: the prefix caches are in play)."""
    common = ("workload=agentic", "workload.num_requests=200", "deployment.local.n_decode=5")
    prfaas = compose_cfg("deployment=prfaas_pd", *common, "deployment.local.n_prefill=3")
    homogeneous = _run(compose_cfg("deployment=homogeneous_pd", *common, "deployment.local.instances=8",
                                   "deployment.local.n_prefill=3"))[0]
    naive = _run(compose_cfg("deployment=naive_hetero", *common))[0]
    cols = [*TIMES, "prefill_instance", "decode_instance", "cached_tokens", "kv_bytes_sent", "error"]
    for variant, twin in (({"deployment.router.threshold_tokens": 10**9}, homogeneous),
                          ({"deployment.router.threshold_tokens": 0}, naive),
                          ({"deployment.local.n_prefill": 0}, naive)):
        df = _run(_with(prfaas, **{k.replace(".", "__"): v for k, v in variant.items()}))[0]
        assert_well_formed(df, 200)
        pd.testing.assert_frame_equal(df[cols], twin[cols], rtol=1e-12, obj=str(variant))
    assert (homogeneous["cached_tokens"] > 0).mean() > 0.5 and (naive["route"] == "prfaas").all()


# -- prompt length -----------------------------------------------------------------------------------------

def test_a_longer_prompt_alone_never_finishes_its_prefill_kv_or_first_token_sooner_on_its_route():
    """One request at a time: each cost curve (H20 polynomial, H200 table with its extrapolation, S_kv, the
    linear decode step) must rise with the prompt. Across the threshold the route (and hardware) changes."""
    cfg = compose_cfg("deployment=prfaas_pd", "workload=fixed", "workload.num_requests=1",
                      "model.decode_variant=linear", "deployment.local.n_prefill=3", "deployment.local.n_decode=5",
                      "deployment.router.threshold_tokens=19456", "link.capacity_gbps=10")
    rows = pd.concat([_run(_with(cfg, workload__input_tokens=n))[0]
                      for n in (128, 1024, 8192, 19456, 19457, 32768, 131072, 200000)], ignore_index=True)
    rows["prefill"] = rows["prefill_end_s"] - rows["prefill_start_s"]
    assert rows["route"].tolist() == ["local"] * 4 + ["prfaas"] * 4
    for _, route in rows.groupby("route"):
        for col in ("prefill", "kv_ready_s", "ttft_s", "kv_bytes_sent", "tpot_s"):
            assert route[col].is_monotonic_increasing and route[col].is_unique, (col, route[col].tolist())


# -- one output token --------------------------------------------------------------------------------------

def test_one_output_token_has_no_tpot_and_finishes_at_its_first_token():
    cfg = compose_cfg("deployment=prfaas_pd", "workload=fixed", "workload.input_tokens=32768",
                      "workload.num_requests=40", "workload.output_tokens=1")
    for out in (1, 2):
        df = _run(_with(cfg, workload__output_tokens=out))[0]
        assert_well_formed(df, 40)
        if out == 1:
            assert df["tpot_s"].isna().all()
            assert (df["finish_s"] == df["first_token_s"]).all() and (df["e2e_s"] == df["ttft_s"]).all()
        else:
            assert np.isfinite(df["tpot_s"]).all() and (df["finish_s"] > df["first_token_s"]).all()


# -- every deployment kind, more workloads and faults: records well formed ---------------------------------

WELL_FORMED = {
    "prfaas_dynamic+link_drop": ("deployment=prfaas_dynamic", "faults=link_drop",
                                 "faults.link_events=[{t_s: 5, capacity_gbps: 2}, {t_s: 15, capacity_gbps: 100}]"),
    "prfaas_pd+outage+rebalancer": ("deployment=prfaas_pd", "faults=prfaas_outage", "faults.prfaas_outages=[[4,12]]",
                                    "rebalancer.enabled=true", "rebalancer.period_s=5", "rebalancer.window_s=10",
                                    "rebalancer.min_samples=10", "rebalancer.switch_delay_s=2"),
    "mooncake_conversation": ("deployment=prfaas_pd", "workload=mooncake_conversation"),
}


@pytest.mark.parametrize("case", list(WELL_FORMED))
def test_every_request_is_recorded_once_with_ordered_timestamps(case):
    n = 60
    cfg = compose_cfg(*WELL_FORMED[case], f"workload.num_requests={n}")
    df = _run(cfg)[0]
    assert_well_formed(df, n)
    assert df["error"].isna().all()
    assert math.isfinite(df["finish_s"].max())
