"""Independent requests: i.i.d. input and output lengths, arrivals from a process, no shared prefixes.

The paper's case-study workload is this generator with a truncated log-normal input length and a
fixed 1024-token output. Every request still carries unique hash_ids (ceil(input/block_tokens) of
them) so caches and prompt builders treat it like any trace.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any, cast, overload

import numpy as np

from harness.errors import InputError
from harness.workload.base import check_block_tokens, check_has, check_num_requests, check_seed
from harness.workload.lengths import Fixed
from harness.workload.prefix import PrefixReplay
from harness.workload.request import Request, make_request, n_blocks

_LENGTH_METHODS = ("sample", "grid", "mean")
_ARRIVAL_METHODS = ("offsets", "with_rate")


class RequestStream(Sequence[Request]):
    """A synthetic workload's requests, drawn and built a chunk at a time as they are read.

    Memory is one chunk's draws and requests, whatever `n`: the lengths and the arrival gaps are
    drawn `chunk` at a time from the workload's own generators (the same values as one draw of all
    `n`: `chunkable` lengths, arrival processes with `offset_chunks`; any other is drawn whole, once
    per read, and costs memory in proportion). With `until_s` the stream ends before its first
    arrival past it: a run cut at `loadgen.max_duration_s` never draws the requests it cannot send.
    Each read starts from the seed again, so the stream can be read any number of times.
    """

    sorted_by_arrival = True  # offsets are non-decreasing and ids increase: no consumer needs to sort

    def __init__(self, workload: SyntheticWorkload, arrivals: Any, chunk: int = 10_000,
                 until_s: float | None = None) -> None:
        self._workload, self._arrivals = workload, arrivals
        self._n, self._chunk, self._until_s = cast(int, workload.num_requests), max(1, int(chunk)), until_s
        # One entropy for every read (seed None: fresh once, then the same on each read).
        self._entropy = np.random.SeedSequence(workload.seed).entropy
        self._id_ranges = False  # see ids_as_ranges
        self._span: tuple[int, float, float] | None = None  # (count, first, last arrival): see span

    def _rng(self, k: int) -> np.random.Generator:
        """Child k of the seed: the generator `streams(seed, 3)[k]` gives."""
        return np.random.default_rng(np.random.SeedSequence(self._entropy, spawn_key=(k,)))

    def _lengths(self, dist: Any, k: int) -> Iterator[np.ndarray]:
        rng = self._rng(k)
        if getattr(dist, "chunkable", False):
            for lo in range(0, self._n, self._chunk):
                yield np.asarray(dist.sample(min(self._chunk, self._n - lo), rng))
        else:  # a distribution of the user's own: one draw of all n (the only one known to give its values)
            values = np.asarray(dist.sample(self._n, rng))
            for lo in range(0, self._n, self._chunk):
                yield values[lo:lo + self._chunk]

    def _times(self) -> Iterator[np.ndarray]:
        """The arrival offsets in chunks, ended (a chunk cut short) before the first past `until_s`."""
        rng, chunk = self._rng(2), self._chunk
        if callable(getattr(self._arrivals, "offset_chunks", None)):
            pieces: Iterator[np.ndarray] = self._arrivals.offset_chunks(self._n, rng, chunk)
        else:
            whole = np.asarray(self._arrivals.offsets(self._n, rng), dtype=np.float64)
            pieces = (whole[lo:lo + chunk] for lo in range(0, self._n, chunk))
        for times in pieces:
            times = np.asarray(times, dtype=np.float64)
            if self._until_s is not None and times.size and times[-1] > self._until_s:
                yield times[:int(np.searchsorted(times, self._until_s, side="right"))]
                return
            yield times

    def span(self) -> tuple[int, float, float]:
        """(requests, first arrival, last arrival) of the stream, from the arrival draws alone (cached)."""
        if self._span is None:
            count, first, last = 0, math.nan, math.nan
            for times in self._times():
                if times.size:
                    first = float(times[0]) if count == 0 else first
                    count, last = count + times.size, float(times[-1])
            self._span = (count, first, last)
        return self._span

    def __len__(self) -> int:
        return self._n if self._until_s is None else self.span()[0]

    def ids_as_ranges(self) -> None:
        """From now on each request's hash_ids is a `range` of the same ids, not a tuple (a sim run
        whose prefix pools forget blocks only counts them: HybridCachePool.forget_blocks)."""
        self._id_ranges = True

    def _chunks(self) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        """(first request id, times, inputs, outputs, first block ids, block counts) per chunk of draws."""
        block_tokens, first_id, lo = self._workload.block_tokens, 0, 0
        inputs_it = self._lengths(self._workload.input_lengths, 0)
        outputs_it = self._lengths(self._workload.output_lengths, 1)
        for times, inputs, outputs in zip(self._times(), inputs_it, outputs_it, strict=False):
            k = times.size
            inputs, outputs = inputs[:k], outputs[:k]  # a cut chunk: its first k requests
            counts = np.asarray(n_blocks(np.asarray(inputs, dtype=np.int64), block_tokens), dtype=np.int64)
            starts = first_id + np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
            first_id += int(counts.sum())
            yield lo, times, inputs, outputs, starts, counts
            lo += k

    def column_chunks(self) -> Iterator[dict[str, np.ndarray]]:
        """The requests as columns, a chunk at a time, without building them (a trace writer's fast path):
        request_id, arrival_s, input_tokens, output_tokens (int64 / float64), and each request's block ids
        as `first_hash_id` and `n_hash_ids` (its ids are that many consecutive integers)."""
        for lo, times, inputs, outputs, starts, counts in self._chunks():
            yield {"request_id": np.arange(lo, lo + times.size, dtype=np.int64), "arrival_s": times,
                   "input_tokens": np.asarray(inputs, dtype=np.int64),
                   "output_tokens": np.asarray(outputs, dtype=np.int64), "first_hash_id": starts,
                   "n_hash_ids": counts}

    def __iter__(self) -> Iterator[Request]:
        """The requests one at a time: the draws come a chunk at a time, but each `Request` (and its
        block ids) is built only when read, so a live run's sends never wait on a whole chunk's."""
        ranges = self._id_ranges
        for lo, times, inputs, outputs, starts, counts in self._chunks():
            for i, t, a, b, s, c in zip(itertools.count(lo), times.tolist(), inputs.tolist(), outputs.tolist(),
                                        starts.tolist(), counts.tolist(), strict=False):
                ids = cast(tuple[int, ...], range(s, s + c)) if ranges else tuple(range(s, s + c))  # see ids_as_ranges
                yield make_request(i, t, a, b, ids)

    @overload
    def __getitem__(self, index: int) -> Request: ...

    @overload
    def __getitem__(self, index: slice) -> list[Request]: ...

    def __getitem__(self, index: int | slice) -> Request | list[Request]:
        """Request(s) by position: read from the start (time grows with the index, memory does not)."""
        if isinstance(index, slice):
            wanted = range(*index.indices(len(self)))
            if not wanted:
                return []
            lo, hi = min(wanted), max(wanted) + 1
            window = list(itertools.islice(iter(self), lo, hi))
            return [window[i - lo] for i in wanted]
        i = index + len(self) if index < 0 else index
        if not 0 <= i < len(self):
            raise IndexError(index)
        return next(itertools.islice(iter(self), i, None))


class SyntheticWorkload:
    """`num_requests` requests; same arguments and seed give the same requests, byte for byte."""

    def __init__(self, input_lengths: Any, output_lengths: Any, arrivals: Any, num_requests: int = 2000,
                 seed: int | None = 0, block_tokens: int = 512, name: str = "synthetic") -> None:
        owner = f"workload {name!r}"
        check_has(owner, "input_lengths", input_lengths, _LENGTH_METHODS, "harness.workload.lengths.TruncatedLogNormal")
        check_has(owner, "output_lengths", output_lengths, _LENGTH_METHODS, "harness.workload.lengths.Fixed")
        check_has(owner, "arrivals", arrivals, _ARRIVAL_METHODS, "harness.workload.arrivals.Poisson")
        self.name = name
        self.input_lengths, self.output_lengths, self.arrivals = input_lengths, output_lengths, arrivals
        self.num_requests = check_num_requests(owner, num_requests)
        self.seed = check_seed(owner, seed)
        self.block_tokens = check_block_tokens(owner, block_tokens)

    def generate(self, rate_rps: float | None = None) -> list[Request]:
        return list(self.stream(rate_rps))

    @property
    def streams_as_generated(self) -> bool:
        """True when `stream` gives what `generate` does (not for a subclass that re-implements
        `generate`, whose requests `stream` would not see)."""
        return type(self).generate is SyntheticWorkload.generate

    @property
    def unique_blocks(self) -> bool:
        """True when no block id is shared between requests (every prompt's hash_ids fresh, as
        `generate` here makes them); not for a subclass that re-implements `generate`, which may
        share blocks (e.g. SharedPromptWorkload's system prompts): a sim run's unbounded prefix
        pools keep no blocks of a workload that says True (HybridCachePool.forget_blocks)."""
        return type(self).generate is SyntheticWorkload.generate

    def stream(self, rate_rps: float | None = None, chunk: int = 10_000, until_s: float | None = None
               ) -> RequestStream:
        """The same requests as `generate`, drawn and built `chunk` at a time as they are read; with
        `until_s`, only those arriving at or before it (the stream ends at the first arrival past it)."""
        arrivals = self.arrivals if rate_rps is None else self.arrivals.with_rate(rate_rps)
        return RequestStream(self, arrivals, chunk, until_s)

    def uncached_input_distribution(self, replay: PrefixReplay | None = None) -> tuple[np.ndarray, np.ndarray]:
        """No prefix sharing, so the uncached length is the input length (whatever the cache): its exact grid."""
        grid: tuple[np.ndarray, np.ndarray] = self.input_lengths.grid()
        return grid

    def mean_output_tokens(self) -> float:
        return float(self.output_lengths.mean())


class FixedWorkload(SyntheticWorkload):
    """Every request has `input_tokens` in and `output_tokens` out (micro-benchmarks, sanity runs)."""

    def __init__(self, input_tokens: int, output_tokens: int, arrivals: Any, num_requests: int = 2000,
                 seed: int | None = 0, block_tokens: int = 512, name: str = "fixed") -> None:
        for field, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise InputError(f"workload {name!r}: {field} must be a positive integer, got {value!r}")
        self.input_tokens, self.output_tokens = int(input_tokens), int(output_tokens)
        super().__init__(Fixed(input_tokens), Fixed(output_tokens), arrivals, num_requests, seed, block_tokens, name)
