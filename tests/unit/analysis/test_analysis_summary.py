"""One run's summary: the contract's keys, values on a known frame, and the run directory's files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from harness.analysis.frames import requests_frame, timeseries_frame
from harness.analysis.summary import CORE_KEYS, summarize, write_run
from harness.errors import InputError
from harness.schema import register_configs

CONF_DIR = str(Path(__file__).resolve().parents[3] / "conf")

# design.md: summary.parquet carries at least these.
CONTRACT_KEYS = {"deployment", "mode", "n_requests", "completed", "failed", "throughput_rps", "output_tokens_per_s",
                 "ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_mean_s", "egress_gbps_mean",
                 "egress_gbps_p99", "offload_fraction", "threshold_tokens", "n_prfaas", "n_prefill", "n_decode",
                 "slo_attainment", "goodput_rps", "offered_rps", "duration_s", "steady_throughput_rps", "e2e_mean_s",
                 "cache_hit_token_frac", "plan_lambda_max_rps"}
VLLM_KEYS = {"request_throughput", "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms",
             "p90_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_e2el_ms", "completed",
             "duration", "num_prompts", "total_input_tokens", "total_output_tokens", "request_goodput"}

META = {"deployment": "prfaas_pd", "mode": "sim", "offered_rps": 0.5, "threshold_tokens": 19400, "n_prfaas": 4,
        "n_prefill": 3, "n_decode": 5, "workload": "w", "model": "m", "link_capacity_gbps": 100.0, "seed": 0,
        "plan": {"lambda_max_rps": 3.0, "theta_prfaas_rps": 1.5}}


def three_requests() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Arrivals 0, 2, 4 s; TTFT 1, 2, 3 s; the third failed. Finish 11, 13 -> span 13 s."""
    req = requests_frame([
        {"deployment": "prfaas_pd", "request_id": 0, "arrival_s": 0.0, "input_tokens": 1000, "cached_tokens": 500,
         "cache_hit_tokens": 1000,
         "output_tokens": 11, "route": "prfaas", "ttft_s": 1.0, "tpot_s": 0.02, "e2e_s": 11.0, "finish_s": 11.0},
        {"deployment": "prfaas_pd", "request_id": 1, "arrival_s": 2.0, "input_tokens": 3000, "output_tokens": 21,
         "route": "local", "ttft_s": 2.0, "tpot_s": 0.04, "e2e_s": 11.0, "finish_s": 13.0},
        {"deployment": "prfaas_pd", "request_id": 2, "arrival_s": 4.0, "input_tokens": 4000, "output_tokens": 31,
         "route": "prfaas", "ttft_s": 3.0, "error": "decode instance lost"},
    ])
    ts = timeseries_frame([{"deployment": "prfaas_pd", "t_s": float(t), "egress_gbps": 2.0 * t,
                            "link_capacity_gbps": 100.0, "util_decode": 0.5} for t in range(4)])
    return req, ts


def test_summary_has_the_contract_keys_first_and_known_values():
    req, ts = three_requests()
    s = summarize(req, ts, META, {"slo": {"ttft_s": 1.5, "tpot_s": 0.025}, "warmup_fraction": 0.0})
    assert set(s) >= CONTRACT_KEYS
    assert tuple(s)[: len(CORE_KEYS)] == CORE_KEYS
    assert (s["n_requests"], s["completed"], s["failed"]) == (3, 2, 1)
    assert s["duration_s"] == pytest.approx(13.0)
    assert s["throughput_rps"] == pytest.approx(2 / 13)
    assert s["output_tokens_per_s"] == pytest.approx(32 / 13)
    assert s["ttft_mean_s"] == pytest.approx(1.5)  # the failed request's 3 s is excluded
    assert s["slo_attainment"] == pytest.approx(1 / 3)  # only request 0 meets TTFT <= 1.5 and TPOT <= 25 ms
    assert s["goodput_rps"] == pytest.approx(1 / 13)
    assert s["offload_fraction"] == pytest.approx(2 / 3)
    assert s["cache_hit_token_frac"] == pytest.approx(1000 / 8000)  # pool hits
    assert s["cached_token_frac"] == pytest.approx(500 / 8000)  # what the prefills skipped
    assert s["prefill_tokens_computed"] == 7500
    assert s["egress_gbps_mean"] == pytest.approx(3.0) and s["link_util_mean"] == pytest.approx(0.03)
    assert s["util_decode_mean"] == pytest.approx(0.5)
    assert (s["plan_lambda_max_rps"], s["plan_theta_prfaas_rps"], s["threshold_tokens"]) == (3.0, 1.5, 19400)


def test_summary_defaults_follow_the_analysis_schema():
    """No config: TTFT SLO 10 s, TPOT SLO 25 ms, as conf/analysis/default.yaml."""
    req, ts = three_requests()
    s = summarize(req, ts, META, None)
    assert (s["slo_ttft_s"], s["slo_tpot_s"]) == (10.0, 0.025)
    assert s["slo_attainment"] == pytest.approx(1 / 3)  # request 1 misses the 25 ms TPOT


def test_composed_analysis_config_is_accepted():
    register_configs()
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose("config", overrides=["analysis.slo.tpot_s=0.05"])
    req, ts = three_requests()
    s = summarize(req, ts, META, cfg.analysis)
    assert s["slo_tpot_s"] == 0.05 and s["slo_attainment"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("override",
                         ["analysis.slo.ttft_typo=1", "analysis.figures=maybe", "analysis.warmup_fraction=x"])
def test_analysis_schema_rejects_unknown_keys_and_wrong_types(override):
    register_configs()
    with (initialize_config_dir(config_dir=CONF_DIR, version_base=None),
          pytest.raises(Exception, match=override.split("=")[0].replace(".", r"\."))):
        compose("config", overrides=[override])


def test_write_run_writes_the_run_files_and_vllm_names(tmp_path):
    req, ts = three_requests()
    summary = write_run(tmp_path / "run", req, ts, META, {"figures": False})
    names = {p.name for p in (tmp_path / "run").iterdir()}
    assert names == {"requests.parquet", "timeseries.parquet", "summary.parquet", "summary.json"}
    row = pd.read_parquet(tmp_path / "run" / "summary.parquet")
    assert len(row) == 1 and row["completed"].iloc[0] == 2
    assert pd.read_parquet(tmp_path / "run" / "requests.parquet")["request_id"].tolist() == [0, 1, 2]

    def no_nan(token: str) -> float:
        raise AssertionError(f"summary.json is not strict JSON: {token}")

    doc = json.loads((tmp_path / "run" / "summary.json").read_text(), parse_constant=no_nan)
    assert set(doc) >= VLLM_KEYS and set(doc) >= CONTRACT_KEYS
    assert doc["mean_ttft_ms"] == pytest.approx(1500.0) and doc["p99_ttft_ms"] == pytest.approx(1990.0)
    assert doc["median_tpot_ms"] == pytest.approx(30.0)
    assert doc["total_input_tokens"] == 4000 and doc["total_output_tokens"] == 32
    assert doc["request_throughput"] == pytest.approx(summary["throughput_rps"])
    assert "lateness_mean_s" not in doc  # a sim run has no load-generator lateness


def test_write_run_with_figures_writes_pngs(tmp_path, run_factory):
    req, ts, meta = run_factory("prfaas_pd", 1.0, 2.0, n=40)
    write_run(tmp_path, req, ts, meta, OmegaConf.create({"figures": True}))
    for name in ("fig_ttft_cdf.png", "fig_egress.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_lateness_appears_only_when_the_load_generator_measured_it(tmp_path):
    req, ts = three_requests()
    assert "lateness_mean_s" not in summarize(req, ts, META)
    req["lateness_s"] = [0.001, 0.003, 0.002]
    assert summarize(req, ts, META)["lateness_max_s"] == pytest.approx(0.003)


def test_url_mode_without_timeseries_has_nan_egress(tmp_path):
    req, _ = three_requests()
    s = write_run(tmp_path, req, None, {**META, "mode": "url"}, {"figures": False})
    assert math.isnan(s["egress_gbps_mean"]) and s["completed"] == 2


def test_bad_records_are_an_input_error(tmp_path):
    with pytest.raises(InputError, match="input_tokens"):
        write_run(tmp_path, [{"deployment": "d", "request_id": 0, "arrival_s": 0.0, "output_tokens": 1}], None, META)
