"""Summary statistics of a trace: rates, burstiness, length percentiles and prefix-cache hit rates.

Prefix hits follow traces/README.md ("How these were computed"): requests in file order; a
request's hit is its leading hash_ids already cached x block_tokens, capped at its input length;
then every block of the request is inserted or touched.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from harness.workload.prefix import replay_hits
from harness.workload.request import Request


def _summary(values: np.ndarray) -> dict[str, float]:
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"mean": float(values.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99),
            "max": int(values.max()), "min": int(values.min())}


def _hits(requests: Sequence[Request], inputs: np.ndarray, block_tokens: int,
          capacity_blocks: int | None) -> dict[str, float]:
    hits = replay_hits(requests, block_tokens, capacity_blocks)
    return {"token_frac": float(hits.sum() / inputs.sum()), "request_mean": float(np.mean(hits / inputs))}


def trace_stats(requests: Sequence[Request], block_tokens: int = 512,
                lru_blocks: Iterable[int] = ()) -> dict[str, Any]:
    """One JSON-ready dict; `prefix_hit_lru` has one entry per LRU capacity (in blocks) asked for."""
    t = np.fromiter((r.arrival_s for r in requests), dtype=np.float64, count=len(requests))
    inputs = np.fromiter((r.input_tokens for r in requests), dtype=np.int64, count=len(requests))
    outputs = np.fromiter((r.output_tokens for r in requests), dtype=np.int64, count=len(requests))
    duration_s = float(t[-1] - t[0])
    gaps = np.diff(t)
    infinite = _hits(requests, inputs, block_tokens, None)
    refs = sum(len(r.hash_ids) for r in requests)
    seen: set[int] = set()
    refs_seen = 0
    for r in requests:
        refs_seen += sum(1 for h in r.hash_ids if h in seen)
        seen.update(r.hash_ids)
    sessions = {r.session_id for r in requests if r.session_id is not None}
    return {
        "n_requests": len(requests),
        "duration_s": duration_s,
        "rate_rps": len(requests) / duration_s if duration_s > 0 else None,
        "iat_cv": float(gaps.std() / gaps.mean()) if len(gaps) and gaps.mean() > 0 else None,
        "distinct_arrival_times": len(np.unique(t)),
        "input_tokens": _summary(inputs),
        "output_tokens": _summary(outputs),
        "prefix_hit_token_frac_infinite": infinite["token_frac"],
        "prefix_hit_request_mean_infinite": infinite["request_mean"],
        "prefix_hit_lru": {str(c): _hits(requests, inputs, block_tokens, int(c)) for c in lru_blocks},
        "block_tokens": block_tokens,
        "block_refs": refs,
        "unique_blocks": len(seen),
        "block_refs_seen_frac": refs_seen / refs if refs else 0.0,
        "n_sessions": len(sessions) if sessions else None,
    }
