"""Summary statistics of a trace: rates, burstiness, length percentiles and prefix-cache hit rates.

Prefix hits follow traces/README.md ("How these were computed"): requests in file order; a
request's hit is its leading hash_ids already cached x block_tokens, capped at its input length;
then every block of the request is inserted or touched.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.workload.prefix import PrefixCache, hit_tokens, replay_hits
from harness.workload.request import Request

if TYPE_CHECKING:
    from harness.workload.formats.common import LoadReport


def _summary(values: np.ndarray) -> dict[str, float]:
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return {"mean": float(values.mean()), "p50": float(p50), "p90": float(p90), "p99": float(p99),
            "max": int(values.max()), "min": int(values.min())}


def trace_stats(requests: Sequence[Request], block_tokens: int = 512,
                lru_blocks: Iterable[int] = ()) -> dict[str, Any]:
    """One JSON-ready dict; `prefix_hit_lru` has one entry per LRU capacity (in blocks) asked for."""
    t = np.fromiter((r.arrival_s for r in requests), dtype=np.float64, count=len(requests))
    inputs = np.fromiter((r.input_tokens for r in requests), dtype=np.int64, count=len(requests))
    outputs = np.fromiter((r.output_tokens for r in requests), dtype=np.int64, count=len(requests))
    refs = sum(len(r.hash_ids) for r in requests)
    seen: set[int] = set()
    refs_seen = 0
    for r in requests:
        refs_seen += sum(1 for h in r.hash_ids if h in seen)
        seen.update(r.hash_ids)
    sessions = {r.session_id for r in requests if r.session_id is not None}
    return _assemble(t, inputs, outputs, replay_hits(requests, block_tokens, None),
                     {str(c): replay_hits(requests, block_tokens, int(c)) for c in lru_blocks},
                     block_tokens, refs, len(seen), refs_seen, sessions)


def _hit_fracs(hits: np.ndarray, inputs: np.ndarray) -> dict[str, float]:
    return {"token_frac": float(hits.sum() / inputs.sum()), "request_mean": float(np.mean(hits / inputs))}


def _assemble(t: np.ndarray, inputs: np.ndarray, outputs: np.ndarray, infinite_hits: np.ndarray,
              lru_hits: dict[str, np.ndarray], block_tokens: int, refs: int, unique_blocks: int, refs_seen: int,
              sessions: set[Any]) -> dict[str, Any]:
    duration_s = float(t[-1] - t[0])
    gaps = np.diff(t)
    infinite = _hit_fracs(infinite_hits, inputs)
    return {
        "n_requests": len(t),
        "duration_s": duration_s,
        "rate_rps": len(t) / duration_s if duration_s > 0 else None,
        "iat_cv": float(gaps.std() / gaps.mean()) if len(gaps) and gaps.mean() > 0 else None,
        "distinct_arrival_times": len(np.unique(t)),
        "input_tokens": _summary(inputs),
        "output_tokens": _summary(outputs),
        "prefix_hit_token_frac_infinite": infinite["token_frac"],
        "prefix_hit_request_mean_infinite": infinite["request_mean"],
        "prefix_hit_lru": {c: _hit_fracs(h, inputs) for c, h in lru_hits.items()},
        "block_tokens": block_tokens,
        "block_refs": refs,
        "unique_blocks": unique_blocks,
        "block_refs_seen_frac": refs_seen / refs if refs else 0.0,
        "n_sessions": len(sessions) if sessions else None,
    }


# -- streaming: the same statistics from a file read in chunks ------------------------------------------

_SYNTHETIC_KEY0 = 1 << 64  # LRU keys of rows without hash_ids: past int64, so never equal to a real id


class _InfiniteCache:
    """The unbounded prefix cache of `replay_hits`, chunk by chunk, on numpy arrays.

    With an unbounded cache a block is cached for request r iff it occurs in some earlier request, so a
    chunk needs only the sorted ids of every earlier chunk (8 bytes per distinct block, against ~70
    for a Python set) and, within the chunk, the first request each id occurs in. Exact, not sampled.
    """

    def __init__(self) -> None:
        self.seen = np.zeros(0, dtype=np.int64)  # sorted distinct ids of the chunks so far

    def _in_seen(self, ids: np.ndarray) -> np.ndarray:
        at = np.searchsorted(self.seen, ids)
        return (at < len(self.seen)) & (self.seen[np.minimum(at, len(self.seen) - 1)] == ids) if len(self.seen) \
            else np.zeros(len(ids), dtype=bool)

    def add(self, lens: np.ndarray, flat: np.ndarray) -> tuple[np.ndarray, int]:
        """Leading cached blocks of each request of a chunk (`lens[i]` ids each, concatenated in `flat`)
        and how many of the chunk's block references were cached; then caches the chunk's blocks."""
        n = len(lens)
        req = np.repeat(np.arange(n), lens)
        starts = np.concatenate(([0], np.cumsum(lens)[:-1])).astype(np.int64)
        pos = np.arange(len(flat)) - starts[req]
        order = np.argsort(flat, kind="stable")  # stable: equal ids stay in file order
        ids_sorted = flat[order]
        first = np.concatenate(([True], ids_sorted[1:] != ids_sorted[:-1])) if len(flat) else np.zeros(0, bool)
        group = np.cumsum(first) - 1
        first_req = np.empty_like(req)
        first_req[order] = req[order][first][group]
        cached = self._in_seen(flat) | (first_req < req)
        matched = lens.astype(np.int64).copy()
        miss = np.flatnonzero(~cached)
        rows, at = np.unique(req[miss], return_index=True)  # first miss of each request (flat is in row order)
        matched[rows] = pos[miss][at]
        distinct = ids_sorted[first]
        new = distinct[~self._in_seen(distinct)]
        self.seen = np.insert(self.seen, np.searchsorted(self.seen, new), new)
        return matched, int(cached.sum())


def stream_trace_stats(path: str | Path, fmt: str | None = None, block_tokens: int = 512,
                       lru_blocks: Iterable[int] = (), chunk_rows: int = 10_000) -> tuple[dict[str, Any], LoadReport]:
    """`trace_stats` of a trace file read `chunk_rows` requests at a time; returns (stats, LoadReport).

    Equal to `trace_stats(load_trace(path)[0], ...)` (tests/unit/workload/test_stream_stats.py), in
    memory that does not grow with the prompts: per request it keeps 4 numbers (arrival, input,
    output, hit tokens), per distinct block 8 bytes (the unbounded cache), and per LRU capacity asked
    for, that many blocks. Rows are validated as `load_trace` does, with the same messages.
    """
    from harness.errors import InputError
    from harness.workload.formats import open_chunks
    from harness.workload.formats.common import check_columns

    path = Path(path)
    module, report = open_chunks(path, fmt, block_tokens)
    names = module.NAMES
    lru_blocks = [int(c) for c in lru_blocks]
    lrus = [PrefixCache(c) for c in lru_blocks]
    lru_hits: list[list[np.ndarray]] = [[] for _ in lru_blocks]
    infinite = _InfiniteCache()
    times, inputs, outputs, hits = [], [], [], []
    refs = refs_seen = synthetic_blocks = 0
    sessions: set[int] = set()
    previous_t = None
    next_key = _SYNTHETIC_KEY0
    for cols, where in module.chunks(path, chunk_rows, report):
        n = len(cols.arrival_s)
        report.rows += n
        t, inp, out, expected = check_columns(cols, names, where, block_tokens, previous_t)
        if n:
            previous_t = float(t[-1])
        keep = inp > 0
        report.dropped_empty_prompt += int(n - keep.sum())
        report.clipped_output += int(((out == 0) & keep).sum())
        rows = np.flatnonzero(keep)
        ids_all = cols.hash_ids if cols.hash_ids is not None else [None] * n
        ids = [ids_all[i] for i in rows]
        inp_k, expected_k = inp[rows], expected[rows].astype(np.int64)
        lens = np.array([len(h) if h is not None else 0 for h in ids], dtype=np.int64)
        missing = np.array([h is None for h in ids], dtype=bool)
        report.synthesised_hash_ids += int(missing.sum())
        synthetic_blocks += int(expected_k[missing].sum())
        flat = np.fromiter(chain.from_iterable(h for h in ids if h is not None), dtype=np.int64, count=int(lens.sum()))
        matched, seen = infinite.add(lens, flat)
        refs += int(lens.sum()) + int(expected_k[missing].sum())
        refs_seen += seen
        hits.append(np.minimum(matched * block_tokens, inp_k))
        times.append(t[rows])
        inputs.append(inp_k)
        outputs.append(np.maximum(out[rows], 1))
        if cols.session_id is not None:
            sessions.update(cols.session_id[i] for i in rows if cols.session_id[i] is not None)
        if lrus:
            keys: list[Any] = list(ids)
            for m in np.flatnonzero(missing):  # fresh blocks: never hit, but they take room in an LRU
                keys[m] = range(next_key, next_key + int(expected_k[m]))
                next_key += int(expected_k[m])
            for cache, out_hits in zip(lrus, lru_hits, strict=False):
                chunk_hits = np.empty(len(rows), dtype=np.int64)
                for j, h in enumerate(keys):
                    chunk_hits[j] = hit_tokens(cache.match(h), int(inp_k[j]), block_tokens)
                    cache.insert(h)
                out_hits.append(chunk_hits)
    if report.rows == 0:
        raise InputError(f"{report.path}: empty trace (no requests)")
    t = np.concatenate(times)
    if len(t) == 0:
        raise InputError(f"{report.path}: no usable requests (all {report.rows} rows have an empty prompt)")
    ins, outs, hit = np.concatenate(inputs), np.concatenate(outputs), np.concatenate(hits)
    stats = _assemble(
        t,
        ins,
        outs,
        hit,
        {str(c): np.concatenate(h) for c, h in zip(lru_blocks, lru_hits, strict=False)},
        block_tokens,
        refs,
        len(infinite.seen) + synthetic_blocks,
        refs_seen,
        sessions,
    )
    return stats, report
