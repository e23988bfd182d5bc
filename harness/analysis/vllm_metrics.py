"""The metrics `vllm bench serve` names that need more than the per-request frame: its summary
statistics of a latency (mean, median, std, pNN in ms), inter-token latencies from per-chunk stamps,
and the peak output-token rate / concurrency (split from harness/analysis/metrics.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.analysis.columns import Frame
from harness.analysis.metrics import _finite, _values, completed_mask


def vllm_stats(values_s: np.ndarray, name: str, percentiles: tuple[float, ...]) -> dict[str, float]:
    """`mean_<name>_ms`, `median_..`, `std_..` and `p<q>_<name>_ms` as `vllm bench serve` names them
    (q printed as an integer when it is one: p99, p99.9). NaN when there are no values."""
    v = _finite(np.asarray(values_s, dtype=float)) * 1e3
    nan = float("nan")
    out = {f"mean_{name}_ms": float(v.mean()) if v.size else nan,
           f"median_{name}_ms": float(np.median(v)) if v.size else nan,
           f"std_{name}_ms": float(v.std()) if v.size else nan}
    for q in percentiles:
        word = str(int(q)) if int(q) == q else str(q)
        out[f"p{word}_{name}_ms"] = float(np.percentile(v, q)) if v.size else nan
    return out


def chunk_gaps_s(chunks: pd.DataFrame) -> np.ndarray:
    """Inter-token latencies as `vllm bench serve` measures them: the gaps between consecutive
    token-bearing chunks of each request (chunks frame: request_id, chunk, t_s), all requests pooled."""
    if chunks is None or len(chunks) == 0:
        return np.zeros(0)
    c = chunks.sort_values(["request_id", "chunk"], kind="stable")
    t = c["t_s"].to_numpy(dtype=float)
    rid = c["request_id"].to_numpy()
    same = rid[1:] == rid[:-1]
    return np.diff(t)[same]


def peak_output_tokens_per_s(chunks: pd.DataFrame, requests: pd.DataFrame) -> tuple[float, int]:
    """(max output tokens in any 1-second bin, max requests active in any bin), bins from the first
    arrival, as `vllm bench serve` computes max_output_tokens_per_s / max_concurrent_requests. A chunk
    counts output_tokens / n_chunks tokens of its request (vLLM counts one per chunk)."""
    done = completed_mask(requests)
    if chunks is None or len(chunks) == 0 or not done.any():
        return float("nan"), 0
    req = requests[done]
    start = _values(req, "arrival_s")
    t0 = float(np.nanmin(start))
    end = _values(req, "finish_s")
    n_bins = int(np.ceil(np.nanmax(end) - t0)) + 1
    n_chunks = _values(req, "n_chunks")
    n_chunks = np.where(np.isfinite(n_chunks) & (n_chunks > 0), n_chunks, 1.0)
    per_chunk = dict(zip(req["request_id"], _values(req, "output_tokens") / n_chunks, strict=False))
    c = chunks[chunks["request_id"].isin(per_chunk)]
    weights = c["request_id"].map(per_chunk).to_numpy(dtype=float)
    bins = np.floor(c["t_s"].to_numpy(dtype=float) - t0).astype(int)
    ok = (bins >= 0) & (bins < n_bins)
    _, at = np.unique(bins[ok], return_inverse=True)  # the bins that hold chunks (the span may be 1e9 s)
    tokens = np.bincount(at, weights=weights[ok])
    return float(tokens.max()) if tokens.size else 0.0, _max_active(start, end, t0)


def _max_active(start: np.ndarray, end: np.ndarray, t0: float) -> int:
    """Most requests active in any 1-second bin from t0: a request counts in every bin from its start's to its
    end's. Summed at the bins where the count changes only: a run's span can be 1e9 s (two requests far apart)."""
    first = np.floor(start - t0).astype(np.int64)
    after = np.floor(end - t0).astype(np.int64) + 1
    bins, at = np.unique(np.concatenate([first, after]), return_inverse=True)
    steps = np.bincount(at, weights=np.concatenate([np.ones(len(first)), -np.ones(len(after))]), minlength=len(bins))
    return int(np.cumsum(steps).max()) if len(bins) else 0


def max_concurrent_requests(requests: Frame) -> int:
    """vLLM's max_concurrent_requests from the requests alone (a sim run has no chunks): the completed
    requests, arrival to finish, in the 1-second bins `peak_output_tokens_per_s` counts them in."""
    done = completed_mask(requests)
    if not done.any():
        return 0
    start, end = _values(requests, "arrival_s")[done], _values(requests, "finish_s")[done]
    return _max_active(start, end, float(np.nanmin(start)))
