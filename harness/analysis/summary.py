"""One run's summary row, and the run directory's files: requests, timeseries, summary (.parquet/.json).

`summary.json` repeats the summary under `vllm bench serve`'s key names (request_throughput,
mean_ttft_ms, ..., p99.9_itl_ms, max_concurrency, model_id) so a user can set the harness's numbers
beside the ones they already have; `analysis.percentiles` picks the pNN keys as vLLM's
`--metric-percentiles` does. ITL and the peak-throughput keys need per-chunk stamps: HTTP runs
compute them (`vllm_chunk_metrics`) and hand them over in the run's metadata under `vllm`. Without chunk
stamps (sim, `harness-serve`) the keys are there all the same: ITL null, the peak rates from the
requests' own stamps.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np
import pandas as pd

from harness.analysis import metrics as m
from harness.analysis import vllm_metrics as vm
from harness.analysis.columns import Frame, ParquetColumns
from harness.analysis.frames import requests_frame, summary_frame, timeseries_frame, write_parquet
from harness.analysis.schema import AnalysisConfig

# Keys every summary carries first, in this order (design.md's run-directory contract).
CORE_KEYS = (
    "deployment", "mode", "n_requests", "completed", "failed", "throughput_rps", "output_tokens_per_s",
    "ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_mean_s", "egress_gbps_mean",
    "egress_gbps_p99", "offload_fraction", "threshold_tokens", "n_prfaas", "n_prefill", "n_decode",
    "slo_attainment", "goodput_rps", "offered_rps", "duration_s",
)
# Run metadata copied into the summary when present.
META_KEYS = ("deployment", "mode", "offered_rps", "threshold_tokens", "n_prfaas", "n_prefill", "n_decode",
             "workload", "model", "link_capacity_gbps", "seed")

_SCHEMA_DEFAULTS = AnalysisConfig()


def cfg_value(cfg: Any, dotted: str) -> Any:
    """Read `a.b` from a DictConfig, dict or dataclass config; the schema default when absent."""
    for source in (cfg, _SCHEMA_DEFAULTS):
        node = source
        for part in dotted.split("."):
            node = None if node is None else node.get(part) if isinstance(node, Mapping) else getattr(node, part, None)
        if node is not None:
            return node
    raise KeyError(dotted)


def flatten(meta: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested metadata -> flat scalar keys (`plan.lambda_max_rps` -> `plan_lambda_max_rps`)."""
    flat: dict[str, Any] = {}
    for key, value in meta.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}_"))
        elif isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
            flat[name] = json.dumps(list(value), default=str)
        elif isinstance(value, np.generic):
            flat[name] = value.item()
        else:
            flat[name] = value
    return flat


def summarize(requests_df: Frame, timeseries_df: pd.DataFrame | None, meta: Mapping[str, Any],
              analysis_cfg: Any = None) -> dict[str, Any]:
    """The summary of one run: counts, throughputs, latency percentiles, SLO, egress, offload, cache."""
    df = requests_df
    ts = timeseries_df if timeseries_df is not None else pd.DataFrame()
    ttft_slo_s, tpot_slo_s = float(cfg_value(analysis_cfg, "slo.ttft_s")), float(cfg_value(analysis_cfg, "slo.tpot_s"))
    warmup = float(cfg_value(analysis_cfg, "warmup_fraction"))
    start_s, end_s = m.steady_window(df, warmup)
    run_s = m.run_span(df)  # whole-run time-series statistics: the bins starting in the run span
    n, done, cut = len(df), m.n_completed(df), m.n_interrupted(df)
    deployments = df["deployment"].dropna().unique() if "deployment" in df.columns else []

    s: dict[str, Any] = {
        "deployment": meta.get("deployment", deployments[0] if len(deployments) else None),
        "mode": meta.get("mode"),
        "n_requests": n,
        "completed": done,
        "failed": n - done - cut - m.n_abandoned(df),  # harness-serve: a client that hung up is no failure
        "interrupted_requests": cut,
        "throughput_rps": m.throughput_rps(df),
        "output_tokens_per_s": m.output_tokens_per_s(df),
        "total_tokens_per_s": m.total_tokens_per_s(df),
        "steady_throughput_rps": m.steady_throughput_rps(df, warmup, closed_loop=meta.get("concurrency") is not None),
        "steady_window_s": max(0.0, end_s - start_s) if math.isfinite(end_s - start_s) else 0.0,
    }
    for column, short in (("ttft_s", "ttft"), ("tpot_s", "tpot"), ("e2e_s", "e2e")):
        for stat in ("mean", "p50", "p90", "p99"):
            s[f"{short}_{stat}_s"] = m.latency(df, column, stat)
    s.update({
        "slo_ttft_s": ttft_slo_s,
        "slo_tpot_s": tpot_slo_s,
        "slo_attainment": m.slo_attainment(df, ttft_slo_s, tpot_slo_s),
        "goodput_rps": m.goodput_rps(df, ttft_slo_s, tpot_slo_s),
        "egress_gbps_mean": m.egress_gbps(ts, "mean", *run_s, one_bin=True),
        "egress_gbps_p99": m.egress_gbps(ts, "p99", *run_s, one_bin=True),
        "steady_egress_gbps_mean": m.egress_gbps(ts, "mean", start_s, end_s),
        "timeseries_bin_s": m.mean(ts["bin_s"].to_numpy(dtype=float)) if "bin_s" in ts.columns else float("nan"),
        "link_util_mean": m.link_util(ts, "mean", *run_s, one_bin=True),
        "link_util_p99": m.link_util(ts, "p99", *run_s, one_bin=True),
        "offload_fraction": m.offload_fraction(df),
        "cache_hit_token_frac": m.cache_hit_token_frac(df),
        "cached_token_frac": m.cached_token_frac(df),
        "prefill_tokens_computed": m.prefill_tokens_computed(df),
        "kv_bytes_prfaas_total": m.kv_bytes_prfaas_total(df),
        "arrival_rps": m.arrival_rps(df),
        "duration_s": m.duration_s(df),
    })
    s.update(m.stage_util_means(ts, *run_s, one_bin=True))
    s.update(m.stage_util_means(ts, start_s, end_s, prefix="steady_"))
    if "lateness_s" in df.columns:
        for stat in ("mean", "p99", "max"):
            s[f"lateness_{stat}_s"] = m.lateness(df, stat)
    flat_meta = flatten(meta)
    for key in META_KEYS:
        if key not in ("deployment", "mode"):
            s[key] = flat_meta.get(key, float("nan"))
    if not _finite(s.get("link_capacity_gbps")) and "link_capacity_gbps" in ts.columns:
        s["link_capacity_gbps"] = m.mean(ts["link_capacity_gbps"].to_numpy(dtype=float, na_value=np.nan))
    for key, value in flat_meta.items():
        s.setdefault(key, value)
    ordered = {k: s.get(k, float("nan")) for k in CORE_KEYS}
    ordered.update({k: v for k, v in s.items() if k not in ordered})
    return {k: _plain(v) for k, v in ordered.items()}


def _finite(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _plain(value: Any) -> Any:
    """numpy scalars -> Python scalars; None for numeric meta stays None (JSON null)."""
    return value.item() if isinstance(value, np.generic) else value


def percentiles_of(analysis_cfg: Any) -> tuple[float, ...]:
    """`analysis.percentiles` (vLLM's --metric-percentiles), checked: each in (0, 100]."""
    from harness.errors import require

    qs = tuple(float(q) for q in cfg_value(analysis_cfg, "percentiles"))
    require(all(0 < q <= 100 for q in qs), f"analysis.percentiles must each be in (0, 100], got {list(qs)}")
    return qs


def vllm_chunk_metrics(chunks: pd.DataFrame, requests_df: pd.DataFrame,
                       percentiles: Sequence[float] = (50.0, 90.0, 99.0)) -> dict[str, Any]:
    """The `vllm bench serve` keys that need per-chunk stamps: ITL (gaps between token-bearing
    chunks, all requests pooled), max_output_tokens_per_s and max_concurrent_requests."""
    done_ids = set(requests_df["request_id"][m.completed_mask(requests_df)]) if len(requests_df) else set()
    mine = chunks[chunks["request_id"].isin(done_ids)] if chunks is not None and len(chunks) else chunks
    out: dict[str, Any] = vm.vllm_stats(vm.chunk_gaps_s(mine), "itl", tuple(percentiles))
    peak, active = vm.peak_output_tokens_per_s(mine, requests_df)
    out.update(max_output_tokens_per_s=peak, max_concurrent_requests=active)
    return out


def vllm_names(summary: Mapping[str, Any], requests_df: Frame,
               percentiles: Sequence[float] = (50.0, 90.0, 99.0)) -> dict[str, Any]:
    """The summary under `vllm bench serve`'s result keys (milliseconds for latencies)."""
    done = m.completed_mask(requests_df)

    def ms(column: str, name: str) -> dict[str, float]:
        v = requests_df[column].to_numpy(dtype=float, na_value=np.nan)[done] if column in requests_df else np.array([])
        return vm.vllm_stats(v, name, tuple(percentiles))

    def tokens(c: str) -> int:
        return int(requests_df[c].to_numpy(dtype=float, na_value=0.0)[done].sum()) if c in requests_df else 0

    rate = summary.get("offered_rps")
    max_conc = summary.get("max_concurrency")
    if max_conc is None or (isinstance(max_conc, float) and not math.isfinite(max_conc)):
        max_conc = summary.get("concurrency") if _finite(summary.get("concurrency")) else None
    out: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "label": summary.get("deployment"),
        "model_id": summary.get("served_model")
        if isinstance(summary.get("served_model"), str)
        else summary.get("model"),
        "num_prompts": summary["n_requests"],
        # vLLM writes "inf" for an unpaced run; harness-serve does not know how its clients paced: null
        "request_rate": None if summary.get("mode") == "serve" else rate if _finite(rate) else "inf",
        "burstiness": summary.get("burstiness", float("nan")),
        "max_concurrency": int(max_conc) if _finite(max_conc) else None,
        "duration": summary["duration_s"],
        "completed": summary["completed"],
        "failed": summary["failed"],
        "total_input_tokens": tokens("input_tokens"),
        "total_output_tokens": tokens("output_tokens"),
        "request_throughput": summary["throughput_rps"],
        "request_goodput": summary["goodput_rps"],
        "output_throughput": summary["output_tokens_per_s"],
        "total_token_throughput": summary["total_tokens_per_s"],
    }
    for column, name in (("ttft_s", "ttft"), ("tpot_s", "tpot"), ("e2e_s", "e2el")):
        out.update(ms(column, name))
    # Chunk-level keys (ITL, peak token rate) an HTTP run measured: carried as vllm_<key> in the summary.
    out.update({k.removeprefix("vllm_"): v for k, v in summary.items() if k.startswith("vllm_")})
    if "max_concurrent_requests" not in out:  # no chunks (sim): the requests' own stamps say it
        out["max_concurrent_requests"] = vm.max_concurrent_requests(requests_df)
    if "max_output_tokens_per_s" not in out:  # no chunks (sim, harness-serve): tokens spread over each decode
        out["max_output_tokens_per_s"] = vm.peak_output_tokens_from_requests(requests_df)
    for key, value in vm.vllm_stats(np.zeros(0), "itl", tuple(percentiles)).items():
        out.setdefault(key, value)  # ITL needs chunk stamps: null (NaN) without them, the key there all the same
    return out


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value.item() if isinstance(value, np.generic) else value


def write_json(obj: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Atomic JSON write; NaN/inf become null (strict JSON readers reject NaN)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(json.dumps({k: _json_safe(v) for k, v in obj.items()}, indent=2, default=str) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # a full disk leaves no half-written temp file behind
    return path


def write_run(run_dir: str | os.PathLike[str],
              requests_df: pd.DataFrame | ParquetColumns | Iterable[Mapping[str, Any]],
              timeseries_df: pd.DataFrame | Iterable[Mapping[str, Any]] | None, meta: Mapping[str, Any],
              analysis_cfg: Any = None, requests_written: bool = False) -> dict[str, Any]:
    """Write requests/timeseries/summary .parquet and summary.json (and per-run figures when the
    config says so) into run_dir; return the summary.

    `requests_written`: requests.parquet is already in place (a long sim run writes it from its
    parts in bounded memory) and `requests_df` reads it (`ParquetColumns`: a column at a time)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    req: Frame = requests_df if isinstance(requests_df, ParquetColumns) else \
        requests_df if requests_written and isinstance(requests_df, pd.DataFrame) else requests_frame(requests_df)
    ts = timeseries_frame(timeseries_df if timeseries_df is not None else [])
    summary = summarize(req, ts, meta, analysis_cfg)
    vllm = vllm_names(summary, req, percentiles_of(analysis_cfg))
    if isinstance(req, ParquetColumns):
        req.release()  # its columns are read; the files below need none of them
    if not requests_written:
        write_parquet(req, run_dir / "requests.parquet")
    write_parquet(ts, run_dir / "timeseries.parquet")
    write_parquet(summary_frame([summary]), run_dir / "summary.parquet")  # one dtype per key, any mode
    write_json({**summary, **vllm}, run_dir / "summary.json")
    if bool(cfg_value(analysis_cfg, "figures")):
        from harness.analysis.report_figures import (
            write_run_figures,  # matplotlib only when figures are wanted
        )

        figure_req = req.frame(("ttft_s", "error")) if isinstance(req, ParquetColumns) else req
        write_run_figures(run_dir, figure_req, ts, summary)
    return summary
