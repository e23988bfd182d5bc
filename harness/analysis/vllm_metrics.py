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
           f"std_{name}_ms": _std(v) if v.size else nan}
    for q in percentiles:
        word = str(int(q)) if int(q) == q else str(q)
        out[f"p{word}_{name}_ms"] = float(np.percentile(v, q)) if v.size else nan
    return out


def _std(v: np.ndarray) -> float:
    """Standard deviation, scaled first: the squares of latencies near 1e154 s (a run at 1e-300 req/s)
    would overflow."""
    scale = float(np.max(np.abs(v)))
    return float((v / scale).std() * scale) if scale > 0 else 0.0


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
    bins = np.floor(c["t_s"].to_numpy(dtype=float) - t0)  # floats: whole seconds past 2**63 do not fit an int
    ok = (bins >= 0) & (bins < n_bins)
    _, at = np.unique(bins[ok], return_inverse=True)  # the bins that hold chunks (the span may be 1e9 s)
    tokens = np.bincount(at, weights=weights[ok])
    return float(tokens.max()) if tokens.size else 0.0, _max_active(start, end, t0)


def _max_active(start: np.ndarray, end: np.ndarray, t0: float) -> int:
    """Most requests active in any 1-second bin from t0: a request counts in every bin from its start's to its
    end's. Summed at the bins where the count changes only: a run's span can be 1e9 s (two requests far apart)."""
    first = np.floor(start - t0)  # floats: a span past 2**63 s does not fit an int (1e-300 req/s: 1e302 s)
    # Past 2**53 s a float cannot tell a second from the next: the request still counts in its own bin.
    after = np.maximum(np.floor(end - t0) + 1, np.nextafter(first, np.inf))
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


def peak_output_tokens_from_requests(requests: Frame) -> float:
    """max_output_tokens_per_s without chunk stamps (a sim run, `harness-serve`): the most output tokens of
    completed requests in any 1-second bin from the first arrival (the bins `peak_output_tokens_per_s`
    counts), each request's first token at its `first_token_s` and the others spread evenly over
    (first_token_s, finish_s] (a decode step is the same for every token of a request to within the batch's
    changes). NaN when no completed request has the stamps."""
    done = completed_mask(requests)
    if not done.any():
        return float("nan")
    t0 = float(np.nanmin(_values(requests, "arrival_s")[done]))
    first = _values(requests, "first_token_s")[done] - t0
    end = _values(requests, "finish_s")[done] - t0
    n = _values(requests, "output_tokens")[done]
    ok = np.isfinite(first) & np.isfinite(end) & np.isfinite(n) & (n >= 1) & np.isfinite(t0)
    if not ok.any():
        return float("nan")
    first, end, n = first[ok], np.maximum(end[ok], first[ok]), n[ok]
    spread = end > first
    points = np.concatenate([first[spread], first[~spread]])  # a token at the first token (all of them: no span)
    point_mass = np.concatenate([np.ones(int(spread.sum())), n[~spread]])
    a, b = first[spread], end[spread]
    slope = (n[spread] - 1.0) / (b - a)  # tokens per second over (a, b]

    def before(e: np.ndarray) -> np.ndarray:
        """Tokens stamped before each time e (points strictly before it; the spread part pro rata)."""
        order = np.argsort(points, kind="stable")
        mass = np.concatenate([[0.0], np.cumsum(point_mass[order])])[np.searchsorted(points[order], e, "left")]
        for edge, sign in ((a, 1.0), (b, -1.0)):  # sum of slope x (e - edge) over the edges before e
            o = np.argsort(edge, kind="stable")
            k = np.searchsorted(edge[o], e, "left")
            s = np.concatenate([[0.0], np.cumsum(slope[o])])[k]
            se = np.concatenate([[0.0], np.cumsum(slope[o] * edge[o])])[k]
            mass = mass + sign * (e * s - se)
        return mass

    # Per-bin tokens are piecewise linear in the bin's start between the breakpoints and one second
    # before them: the maximum over whole bins is at a bin next to a breakpoint (the span may be 1e9 s).
    n_bins = int(np.ceil(float(end.max()))) + 1
    marks = np.floor(np.concatenate([points, a, b]))
    bins = np.unique(np.clip(np.concatenate([marks - 1, marks, marks + 1, [0.0]]), 0, n_bins - 1))
    return float(np.max(before(bins + 1.0) - before(bins)))
