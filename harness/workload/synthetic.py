"""Independent requests: i.i.d. input and output lengths, arrivals from a process, no shared prefixes.

The paper's case-study workload is this generator with a truncated log-normal input length and a
fixed 1024-token output. Every request still carries unique hash_ids (ceil(input/block_tokens) of
them) so caches and prompt builders treat it like any trace.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.errors import InputError
from harness.workload.base import check_block_tokens, check_has, check_num_requests, check_seed, streams
from harness.workload.lengths import Fixed
from harness.workload.request import Request, unique_hash_ids

_LENGTH_METHODS = ("sample", "grid", "mean")
_ARRIVAL_METHODS = ("offsets", "with_rate")


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
        rng_in, rng_out, rng_arrivals = streams(self.seed, 3)
        n = self.num_requests
        inputs = self.input_lengths.sample(n, rng_in)
        outputs = self.output_lengths.sample(n, rng_out)
        arrivals = self.arrivals if rate_rps is None else self.arrivals.with_rate(rate_rps)
        times = arrivals.offsets(n, rng_arrivals)
        hash_ids = unique_hash_ids(inputs, self.block_tokens)
        return [Request(i, t, a, b, h) for i, (t, a, b, h) in
                enumerate(zip(times.tolist(), inputs.tolist(), outputs.tolist(), hash_ids, strict=False))]

    def uncached_input_distribution(self) -> tuple[np.ndarray, np.ndarray]:
        """No prefix sharing, so the uncached length is the input length: its exact grid."""
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
