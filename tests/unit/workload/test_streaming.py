"""A synthetic workload read as a stream (a chunk at a time) is the list `generate` gives, exactly."""

from __future__ import annotations

import numpy as np
import pytest

from harness.workload.arrivals import Constant, Gamma, Poisson
from harness.workload.lengths import Empirical, Fixed, TruncatedLogNormal, Uniform
from harness.workload.request import Request, n_blocks
from harness.workload.synthetic import FixedWorkload, RequestStream, SyntheticWorkload

PAPER = {"input_lengths": TruncatedLogNormal(9.90, 1.00, 128, 131072), "output_lengths": Fixed(1024)}


def _one_shot(workload: SyntheticWorkload, rate_rps=None) -> list[Request]:
    """The pre-stream construction, written out: all draws, then all requests at once."""
    from harness.workload.base import streams
    from harness.workload.request import unique_hash_ids

    rng_in, rng_out, rng_arr = streams(workload.seed, 3)
    n = workload.num_requests
    inputs = workload.input_lengths.sample(n, rng_in)
    outputs = workload.output_lengths.sample(n, rng_out)
    arrivals = workload.arrivals if rate_rps is None else workload.arrivals.with_rate(rate_rps)
    times = arrivals.offsets(n, rng_arr)
    ids = unique_hash_ids(inputs, workload.block_tokens)
    return [Request(i, t, a, b, h) for i, (t, a, b, h) in
            enumerate(zip(times.tolist(), inputs.tolist(), outputs.tolist(), ids, strict=False))]


@pytest.mark.parametrize("workload", [
    SyntheticWorkload(**PAPER, arrivals=Poisson(2.0), num_requests=2503, seed=0),
    SyntheticWorkload(**PAPER, arrivals=Gamma(3.0, 4.0), num_requests=1001, seed=11, block_tokens=64),
    SyntheticWorkload(Uniform(1, 9000), Uniform(1, 300), Constant(5.0), num_requests=777, seed=3),
    SyntheticWorkload(Empirical([5, 600, 7000], [1, 2, 3]), Fixed(8), Poisson(1.0), num_requests=500, seed=None),
    FixedWorkload(1000, 10, Poisson(4.0), num_requests=333, seed=5),
], ids=["paper", "gamma", "uniform", "empirical-unseeded", "fixed"])
@pytest.mark.parametrize("chunk", [1, 100, 1000, 10_000])
def test_stream_is_the_one_shot_list(workload, chunk):
    if workload.seed is None:  # unseeded: only the stream and generate of one draw can be compared
        stream = workload.stream(None, chunk)
        assert list(stream) == list(stream)
        return
    expected = _one_shot(workload, 3.0)
    stream = workload.stream(3.0, chunk)
    assert isinstance(stream, RequestStream) and len(stream) == len(expected)
    assert list(stream) == expected
    assert workload.generate(3.0) == expected
    assert (
        stream[0] == expected[0]
        and stream[-1] == expected[-1]
        and stream[len(expected) // 2] == expected[len(expected) // 2]
    )
    assert stream[5:9] == expected[5:9]


def test_stream_hash_ids_run_on_across_chunks():
    w = SyntheticWorkload(**PAPER, arrivals=Poisson(2.0), num_requests=50, seed=1, block_tokens=512)
    rows = list(w.stream(None, chunk=7))
    flat = [h for r in rows for h in r.hash_ids]
    assert flat == list(range(len(flat)))  # fresh, consecutive, never shared
    assert all(len(r.hash_ids) == n_blocks(r.input_tokens, 512) for r in rows)
    assert isinstance(rows[0].arrival_s, float) and isinstance(rows[0].input_tokens, int)


def test_stream_index_out_of_range():
    stream = SyntheticWorkload(**PAPER, arrivals=Poisson(2.0), num_requests=3, seed=0).stream()
    with pytest.raises(IndexError):
        stream[3]
    assert stream[-3] == next(iter(stream))


def test_stream_holds_no_draws_until_read():
    """The stream keeps no arrays nor lists: a read draws a chunk at a time (that is its memory bound)."""
    stream = SyntheticWorkload(**PAPER, arrivals=Poisson(2.0), num_requests=20_000, seed=0).stream()
    assert not any(isinstance(v, (np.ndarray, list)) for v in vars(stream).values())
    assert len(stream) == 20_000 and not any(isinstance(v, (np.ndarray, list)) for v in vars(stream).values())


@pytest.mark.parametrize("arrivals", [Poisson(2.0), Gamma(2.0, 3.0), Constant(2.0)],
                         ids=["poisson", "gamma", "constant"])
@pytest.mark.parametrize("chunk", [1, 7, 10_000])
def test_a_cut_stream_is_the_prefix_of_the_whole(arrivals, chunk):
    """until_s ends the stream before its first arrival past it: the whole workload's requests up to it."""
    workload = SyntheticWorkload(**PAPER, arrivals=arrivals, num_requests=400, seed=4)
    whole = workload.generate()
    cut = workload.stream(None, chunk, until_s=50.0)
    expected = [r for r in whole if r.arrival_s <= 50.0]
    assert 0 < len(expected) < len(whole)
    assert list(cut) == expected and len(cut) == len(expected)
    assert cut.span() == (len(expected), expected[0].arrival_s, expected[-1].arrival_s)
    assert cut[-1] == expected[-1] and cut[2:5] == expected[2:5]


def test_a_billion_request_stream_cut_early_draws_one_chunk():
    """The stream never draws what it cannot send: a 10^9-request workload cut at 10 s reads in a blink."""
    workload = SyntheticWorkload(**PAPER, arrivals=Poisson(2.0), num_requests=10**9, seed=0)
    small = SyntheticWorkload(**PAPER, arrivals=Poisson(2.0), num_requests=2000, seed=0)
    assert list(workload.stream(until_s=10.0)) == list(small.stream(until_s=10.0))


class _Vectorised:
    """A length law of a user's own, not `chunkable` (a vectorised rejection sampler would not be)."""

    def __init__(self):
        self.asked: list[int] = []

    def sample(self, n, rng):
        self.asked.append(n)
        return 1 + rng.permutation(n) % 5000

    def grid(self):
        return np.array([1.0]), np.array([1.0])

    def mean(self):
        return 2500.0


class _Chunkable(_Vectorised):
    chunkable = True

    def sample(self, n, rng):
        self.asked.append(n)
        return rng.integers(1, 5000, size=n)


def test_a_chunkable_law_is_drawn_a_chunk_at_a_time_and_another_whole():
    """Memory follows the chunk for the laws that promise chunked draws give their values; a law of the
    user's own without the promise is drawn whole, so its values stay those of one draw."""
    chunked, whole = _Chunkable(), _Vectorised()
    workload = SyntheticWorkload(chunked, whole, Poisson(1.0), num_requests=300, seed=2)
    expected = _one_shot(workload)
    chunked.asked.clear(), whole.asked.clear()
    assert list(workload.stream(None, 7)) == expected
    assert max(chunked.asked) == 7 and sum(chunked.asked) == 300
    assert whole.asked == [300]
