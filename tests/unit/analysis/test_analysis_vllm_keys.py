"""summary.json under `vllm bench serve`'s names: every key vLLM writes that the harness can measure
(list in tests/data/vllm_bench_serve_keys.txt, taken from vLLM's source), percentiles chosen like
--metric-percentiles, ITL from chunk stamps; and interrupted requests kept out of SLO attainment."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.analysis.frames import requests_frame
from harness.analysis.summary import (
    summarize,
    vllm_chunk_metrics,
    vllm_names,
    write_run,
)

KEYS_FILE = Path(__file__).resolve().parents[2] / "data" / "vllm_bench_serve_keys.txt"


def _vllm_keys() -> tuple[list[str], list[str]]:
    measurable, skipped = [], []
    for line in KEYS_FILE.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, _, comment = line.partition("#")
        (skipped if "not measured" in comment else measurable).append(key.strip())
    return measurable, skipped


def http_run() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two completed requests with chunk stamps, one failed. Gaps: request 0: 0.1, 0.2 s; request 1: 0.4 s."""
    req = requests_frame([
        {"deployment": "url:m", "request_id": 0, "arrival_s": 0.0, "input_tokens": 10, "output_tokens": 3,
         "ttft_s": 1.0, "tpot_s": 0.15, "e2e_s": 1.3, "finish_s": 1.3, "n_chunks": 3, "interrupted": False},
        {"deployment": "url:m", "request_id": 1, "arrival_s": 1.5, "input_tokens": 20, "output_tokens": 4,
         "ttft_s": 0.5, "tpot_s": 0.4 / 3, "e2e_s": 0.9, "finish_s": 2.4, "n_chunks": 2, "interrupted": False},
        {"deployment": "url:m", "request_id": 2, "arrival_s": 2.0, "input_tokens": 5, "output_tokens": 0,
         "error": "HTTP 500: x", "interrupted": False},
    ])
    chunks = pd.DataFrame({"request_id": [0, 0, 0, 1, 1, 2], "chunk": [0, 1, 2, 0, 1, 0],
                           "t_s": [1.0, 1.1, 1.3, 2.0, 2.4, 2.5]})
    return req, chunks


META = {"deployment": "url:m", "mode": "url", "offered_rps": float("nan"), "served_model": "m", "burstiness": 1.0,
        "max_concurrency": 8}


def _json(req, chunks, percentiles=(99.0,)):
    meta = {**META, "vllm": vllm_chunk_metrics(chunks, req, percentiles)}
    s = summarize(req, None, meta, {"slo": {"ttft_s": 10.0, "tpot_s": 1.0}, "warmup_fraction": 0.0})
    return {**s, **vllm_names(s, req, percentiles)}


def test_every_measurable_vllm_key_is_in_summary_json():
    measurable, skipped = _vllm_keys()
    assert len(measurable) == 34 and "p99_itl_ms" in measurable and skipped  # the fixture is the full list
    req, chunks = http_run()
    out = _json(req, chunks)
    missing = [k for k in measurable if k not in out]
    assert not missing, missing
    assert out["request_rate"] == "inf" and out["model_id"] == "m" and out["max_concurrency"] == 8
    assert out["burstiness"] == 1.0 and out["label"] == "url:m" and out["num_prompts"] == 3


def test_a_servers_summary_does_not_claim_an_unpaced_run():
    """harness-serve records what its clients sent, however they paced it: its request_rate is unknown (null),
    not vLLM's "inf" for an unpaced run (a client pacing at 1.9 req/s read as "inf")."""
    req, _chunks = http_run()
    analysis = {"slo": {"ttft_s": 10.0, "tpot_s": 1.0}, "warmup_fraction": 0.0}
    assert vllm_names(summarize(req, None, {**META, "mode": "serve"}, analysis), req)["request_rate"] is None


def test_itl_is_the_pooled_gaps_between_chunks_of_completed_requests():
    req, chunks = http_run()
    out = _json(req, chunks, (50.0, 99.9))
    assert out["mean_itl_ms"] == pytest.approx((100 + 200 + 400) / 3)
    assert out["median_itl_ms"] == pytest.approx(200.0) and out["p50_itl_ms"] == pytest.approx(200.0)
    # linear interpolation between 200 and 400 at rank 0.999 * 2 = 1.998
    assert out["p99.9_itl_ms"] == pytest.approx(200 + 0.998 * 200)
    assert out["std_itl_ms"] == pytest.approx(math.sqrt(((100 - 700 / 3) ** 2 + (200 - 700 / 3) ** 2
                                                         + (400 - 700 / 3) ** 2) / 3))


def test_peak_output_tokens_and_concurrency_per_second():
    """Bins of 1 s from the first arrival: [0,1) none, [1,2) request 0's 3 chunks x 1 token, [2,3)
    request 1's 2 chunks x 2 tokens; request 0 is active in bins 0-1, request 1 in bins 1-2."""
    req, chunks = http_run()
    out = _json(req, chunks)
    assert out["max_output_tokens_per_s"] == pytest.approx(4.0)
    assert out["max_concurrent_requests"] == 2


def test_percentiles_name_keys_as_vllm_does(tmp_path):
    """analysis.percentiles=[50,95,99.9] through write_run: p50_, p95_, p99.9_ keys, no p90/p99."""
    req, chunks = http_run()
    meta = {**META, "vllm": vllm_chunk_metrics(chunks, req, (50.0, 95.0, 99.9))}
    write_run(tmp_path, req, None, meta, {"percentiles": [50, 95, 99.9], "figures": False})
    out = json.loads((tmp_path / "summary.json").read_text())
    for metric in ("ttft", "tpot", "itl", "e2el"):
        for word in ("50", "95", "99.9"):
            assert f"p{word}_{metric}_ms" in out, (word, metric)
        assert f"p99_{metric}_ms" not in out and f"p90_{metric}_ms" not in out
    assert out["p99.9_ttft_ms"] == pytest.approx(500 + 0.999 * 500)


def test_bad_percentiles_are_refused(tmp_path):
    from harness.errors import InputError

    req, _ = http_run()
    with pytest.raises(InputError, match=r"analysis.percentiles"):
        write_run(tmp_path, req, None, META, {"percentiles": [0, 101], "figures": False})


def test_interrupted_requests_are_neither_failures_nor_slo_misses():
    """Four requests: two meet the SLO, one failed, one was cut off by Ctrl-C: attainment 2/3."""
    rows = [{"deployment": "d", "request_id": i, "arrival_s": float(i), "input_tokens": 1, "output_tokens": 2,
             "ttft_s": 0.1, "tpot_s": 0.01, "e2e_s": 0.2, "finish_s": i + 0.2, "interrupted": False}
            for i in range(2)]
    rows.append({"deployment": "d", "request_id": 2, "arrival_s": 2.0, "input_tokens": 1, "output_tokens": 0,
                 "error": "HTTP 503: busy", "interrupted": False})
    rows.append({"deployment": "d", "request_id": 3, "arrival_s": 3.0, "input_tokens": 1, "output_tokens": 0,
                 "ttft_s": 0.1, "error": "interrupted: the run was stopped", "interrupted": True})
    s = summarize(requests_frame(rows), None, {"mode": "url"}, {"slo": {"ttft_s": 1.0, "tpot_s": 0.05}})
    assert (s["n_requests"], s["completed"], s["failed"], s["interrupted_requests"]) == (4, 2, 1, 1)
    assert s["slo_attainment"] == pytest.approx(2 / 3)


def test_a_run_without_chunks_reports_max_concurrent_requests_from_its_requests():
    """A sim run has no chunks: vLLM's max_concurrent_requests (completed requests active in a 1-second bin
    from the first arrival) comes from arrival and finish stamps. Before, a sim summary.json had no such key."""
    req = pd.DataFrame({"request_id": [0, 1, 2, 3], "arrival_s": [0.0, 0.5, 3.0, 0.2],
                        "finish_s": [2.5, 1.2, 4.0, np.nan], "ttft_s": [0.1, 0.1, 0.1, np.nan],
                        "tpot_s": [0.01] * 4, "e2e_s": [2.5, 0.7, 1.0, np.nan], "output_tokens": [4, 4, 4, 0],
                        "input_tokens": [10] * 4, "error": [None, None, None, "timeout"]})
    meta = {**META, "mode": "sim"}
    analysis = {"slo": {"ttft_s": 10.0, "tpot_s": 1.0}, "warmup_fraction": 0.0}
    # bins 0..2 hold request 0, bins 0..1 request 1, bins 3..4 request 2; the failed one is not counted
    assert vllm_names(summarize(req, None, meta, analysis), req)["max_concurrent_requests"] == 2


def test_peak_counts_need_no_array_as_long_as_the_span():
    """Two requests 1e9 s apart (a rate of 1e-9 req/s): the per-second counts are summed where they change,
    not over a dense array of 1e9 bins (8 GB: `make test` saw a run's peak RSS go to 7.8 GB)."""
    import tracemalloc

    from harness.analysis import vllm_metrics as vm

    req = pd.DataFrame({"request_id": [0, 1], "arrival_s": [0.0, 1e9], "finish_s": [2.5, 1e9 + 1.5],
                        "output_tokens": [4, 2], "n_chunks": [2, 1], "error": [None, None]})
    chunks = pd.DataFrame({"request_id": [0, 0, 1], "t_s": [0.5, 2.5, 1e9 + 1.5]})
    tracemalloc.start()
    try:
        peak, active = vm.peak_output_tokens_per_s(chunks, req)
        concurrent = vm.max_concurrent_requests(req)
        _, most = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (peak, active, concurrent) == (2.0, 1, 1)
    assert most < 10 * 2**20, most


def test_requests_1e300_s_apart_are_never_concurrent_and_warn_nothing():
    """`loadgen.rate_rps=1e-300`: before, the bins were cast to int64 (invalid past 2**63: numpy warnings)
    and all fell in one bin: max_concurrent_requests=99 of 100; the std of such latencies overflowed."""
    import warnings

    from harness.analysis import vllm_metrics as vm

    arrival = np.arange(100) * 1e300
    req = pd.DataFrame({"request_id": range(100), "arrival_s": arrival, "finish_s": arrival + 2.0,
                        "output_tokens": 4, "n_chunks": 1, "error": None})
    chunks = pd.DataFrame({"request_id": range(100), "t_s": arrival + 2.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert vm.max_concurrent_requests(req) == 1
        assert vm.peak_output_tokens_per_s(chunks, req) == (4.0, 1)
        stats = vm.vllm_stats(np.array([1e300, 3e300]), "ttft", (99.0,))
    assert stats["std_ttft_ms"] == pytest.approx(1e303)


def sim_run() -> pd.DataFrame:
    """A sim-like run (no chunk stamps). Request 0: first token at 0.5 s, 4 more spread over (0.5, 2.5] (2/s);
    request 1: 3 tokens at once at 1.0 s; request 2 failed; request 3 alone, 1e9 s later (a span no bin
    array can hold)."""
    return requests_frame([
        {"deployment": "prfaas_pd", "request_id": 0, "arrival_s": 0.0, "input_tokens": 10, "output_tokens": 5,
         "first_token_s": 0.5, "finish_s": 2.5, "ttft_s": 0.5, "tpot_s": 0.5, "e2e_s": 2.5},
        {"deployment": "prfaas_pd", "request_id": 1, "arrival_s": 0.2, "input_tokens": 10, "output_tokens": 3,
         "first_token_s": 1.0, "finish_s": 1.0, "ttft_s": 0.8, "tpot_s": 0.0, "e2e_s": 0.8},
        {"deployment": "prfaas_pd", "request_id": 2, "arrival_s": 0.3, "input_tokens": 10, "output_tokens": 0,
         "error": "run ended before the request completed"},
        {"deployment": "prfaas_pd", "request_id": 3, "arrival_s": 1e9, "input_tokens": 10, "output_tokens": 2,
         "first_token_s": 1e9 + 0.5, "finish_s": 1e9 + 0.7, "ttft_s": 0.5, "tpot_s": 0.2, "e2e_s": 0.7},
    ])


def test_sim_summary_json_has_every_measurable_key_itl_null_and_a_peak_from_request_stamps():
    """Sim and harness-serve runs have no chunk stamps: their summary.json still has every key vLLM writes
    (ITL null), and max_output_tokens_per_s from the requests' own stamps: bin [1, 2) holds request 0's 2
    tokens and request 1's 3."""
    measurable, _ = _vllm_keys()
    req = sim_run()
    s = summarize(req, None, {"deployment": "prfaas_pd", "mode": "sim", "offered_rps": 1.0, "burstiness": 1.0},
                  {"slo": {"ttft_s": 10.0, "tpot_s": 1.0}, "warmup_fraction": 0.0})
    out = {**s, **vllm_names(s, req, (99.0,))}
    missing = [k for k in measurable if k not in out]
    assert not missing, missing
    assert all(math.isnan(out[k]) for k in ("mean_itl_ms", "median_itl_ms", "std_itl_ms", "p99_itl_ms"))
    assert out["max_output_tokens_per_s"] == pytest.approx(5.0)
    assert out["burstiness"] == 1.0


def test_peak_output_tokens_from_requests_counts_each_second_bin():
    from harness.analysis.vllm_metrics import peak_output_tokens_from_requests

    req = sim_run().iloc[[0, 2]]  # request 0 alone: 1 + 1 token in [0, 1), 2 in [1, 2), 1 in [2, 3)
    assert peak_output_tokens_from_requests(req) == pytest.approx(2.0)
    shifted = sim_run().iloc[[0]].assign(first_token_s=0.0, finish_s=4.0)  # 1 at 0, then 1/s over (0, 4]
    assert peak_output_tokens_from_requests(shifted) == pytest.approx(2.0)
    assert math.isnan(peak_output_tokens_from_requests(sim_run().iloc[[2]]))  # nothing completed
