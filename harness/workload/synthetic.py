"""Independent requests: i.i.d. input and output lengths, arrivals from a process, no shared prefixes.

The paper's case-study workload is this generator with a truncated log-normal input length and a
fixed 1024-token output. Every request still carries unique hash_ids (ceil(input/block_tokens) of
them) so caches and prompt builders treat it like any trace.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

from harness.errors import InputError
from harness.workload.base import check_block_tokens, check_has, check_num_requests, check_seed, streams
from harness.workload.lengths import Fixed
from harness.workload.prefix import PrefixReplay
from harness.workload.request import Request, make_request, n_blocks, unique_hash_ids

_LENGTH_METHODS = ("sample", "grid", "mean")
_ARRIVAL_METHODS = ("offsets", "with_rate")


class RequestStream(Sequence[Request]):
    """A synthetic workload's requests, built a chunk at a time as they are read (bounded memory).

    The draws are the workload's own (the same calls on the same generators as `generate`), kept
    as three numeric arrays (14 bytes a request on the paper workload: lengths in the smallest integer
    type that holds them); the `Request` objects and their hash_ids tuples, ~100x that, exist only for
    the chunk being read. Indexing builds one request on demand.
    """

    def __init__(self, times: np.ndarray, inputs: np.ndarray, outputs: np.ndarray, block_tokens: int,
                 chunk: int = 10_000) -> None:
        self._times, self._inputs, self._outputs = times, _narrow(inputs), _narrow(outputs)
        self._block_tokens, self._chunk = block_tokens, max(1, int(chunk))
        self._id_ranges = False  # see ids_as_ranges
        counts = np.asarray(n_blocks(inputs.astype(np.int64), block_tokens), dtype=np.int64)
        # The first block id of each chunk only (a request's is its chunk's plus the blocks before it).
        self._chunk_first_ids = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)[::self._chunk].copy()

    def __len__(self) -> int:
        return len(self._times)

    def _build(self, lo: int, hi: int) -> list[Request]:
        hash_ids = unique_hash_ids(self._inputs[lo:hi], self._block_tokens, self._first_id(lo) if hi > lo else 0,
                                   as_ranges=self._id_ranges)
        return [make_request(i, t, a, b, h) for i, t, a, b, h in
                zip(range(lo, hi), self._times[lo:hi].tolist(), self._inputs[lo:hi].tolist(),
                    self._outputs[lo:hi].tolist(), hash_ids, strict=False)]

    def ids_as_ranges(self) -> None:
        """From now on each request's hash_ids is a `range` of the same ids, not a tuple (a sim run
        whose prefix pools forget blocks only counts them: HybridCachePool.forget_blocks)."""
        self._id_ranges = True

    def _first_id(self, i: int) -> int:
        """The first block id of request i: its chunk's, plus the blocks of the requests before it there."""
        start = i - i % self._chunk
        before = n_blocks(self._inputs[start:i].astype(np.int64), self._block_tokens)
        return int(self._chunk_first_ids[i // self._chunk]) + int(np.sum(before))

    def __iter__(self) -> Iterator[Request]:
        for lo in range(0, len(self), self._chunk):
            yield from self._build(lo, min(lo + self._chunk, len(self)))

    @overload
    def __getitem__(self, index: int) -> Request: ...

    @overload
    def __getitem__(self, index: slice) -> list[Request]: ...

    def __getitem__(self, index: int | slice) -> Request | list[Request]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = index + len(self) if index < 0 else index
        if not 0 <= i < len(self):
            raise IndexError(index)
        return self._build(i, i + 1)[0]


def _narrow(values: np.ndarray) -> np.ndarray:
    """Integer lengths in the smallest integer type that holds them all (the same values: a paper
    workload's inputs fit 4 bytes, its outputs 2); anything else as it is."""
    if values.dtype.kind not in "iu" or values.size == 0:
        return values
    return values.astype(np.promote_types(np.min_scalar_type(values.min()), np.min_scalar_type(values.max())))


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

    def stream(self, rate_rps: float | None = None, chunk: int = 10_000) -> RequestStream:
        """The same requests as `generate`, built `chunk` at a time as they are read.

        The lengths and gaps are drawn all at once, exactly as before (one call per quantity on its
        own generator: chunked draws would match only for some distributions), so a seed gives the
        same requests whichever way they are read.
        """
        rng_in, rng_out, rng_arrivals = streams(self.seed, 3)
        n = self.num_requests
        inputs = self.input_lengths.sample(n, rng_in)
        outputs = self.output_lengths.sample(n, rng_out)
        arrivals = self.arrivals if rate_rps is None else self.arrivals.with_rate(rate_rps)
        times = arrivals.offsets(n, rng_arrivals)
        return RequestStream(np.asarray(times, dtype=np.float64), inputs, outputs, self.block_tokens, chunk)

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
