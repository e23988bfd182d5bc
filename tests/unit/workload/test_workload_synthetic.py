"""The synthetic generator: seeded, block ids consistent, rate override touches only arrivals."""

from __future__ import annotations

import numpy as np
import pytest

from harness.errors import InputError
from harness.workload.arrivals import Gamma, Poisson
from harness.workload.formats import write_trace
from harness.workload.lengths import Fixed, TruncatedLogNormal
from harness.workload.request import n_blocks
from harness.workload.synthetic import FixedWorkload, SyntheticWorkload


def _paper(seed=0, n=500, arrivals=None):
    return SyntheticWorkload(TruncatedLogNormal(9.9, 1.0, 128, 131072), Fixed(1024), arrivals or Poisson(2.0),
                             num_requests=n, seed=seed)


def test_same_seed_same_bytes(tmp_path):
    """Same config and seed: identical requests and byte-identical files."""
    a, b = _paper(seed=3).generate(), _paper(seed=3).generate()
    assert a == b
    for suffix in (".parquet", ".jsonl.gz"):
        write_trace(a, tmp_path / f"a{suffix}")
        write_trace(b, tmp_path / f"b{suffix}")
        assert (tmp_path / f"a{suffix}").read_bytes() == (tmp_path / f"b{suffix}").read_bytes()


def test_different_or_no_seed_differs():
    base = _paper(seed=3).generate()
    assert [r.input_tokens for r in _paper(seed=4).generate()] != [r.input_tokens for r in base]
    unseeded = [[r.input_tokens for r in _paper(seed=None).generate()] for _ in range(2)]
    assert unseeded[0] != unseeded[1]


def test_seed_zero_is_a_seed():
    """seed 0 must seed (never `if seed:`): two runs agree."""
    assert _paper(seed=0).generate() == _paper(seed=0).generate()


def test_hash_ids_count_and_uniqueness():
    reqs = _paper(n=300).generate()
    assert all(len(r.hash_ids) == n_blocks(r.input_tokens, 512) for r in reqs)
    ids = [h for r in reqs for h in r.hash_ids]
    assert len(ids) == len(set(ids))
    assert [r.request_id for r in reqs] == list(range(300))
    assert all(r.session_id is None and r.turn is None for r in reqs)


def test_rate_override_changes_arrivals_only():
    base = _paper(n=20_000).generate()
    fast = _paper(n=20_000).generate(rate_rps=8.0)
    assert [r.input_tokens for r in fast] == [r.input_tokens for r in base]
    span = fast[-1].arrival_s
    # 19,999 exponential gaps: the mean gap is within 4 standard errors (4/sqrt(n)) of 1/8 s.
    assert (len(fast) - 1) / span == pytest.approx(8.0, rel=4 / np.sqrt(len(fast)))


def test_arrival_process_is_used():
    reqs = _paper(n=50_000, arrivals=Gamma(2.0, 3.0)).generate()
    gaps = np.diff([r.arrival_s for r in reqs])
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.1)


def test_fixed_workload():
    reqs = FixedWorkload(4096, 64, Poisson(1.0), num_requests=10).generate()
    assert {(r.input_tokens, r.output_tokens, len(r.hash_ids)) for r in reqs} == {(4096, 64, 8)}


@pytest.mark.parametrize(("kwargs", "text"), [
    ({"num_requests": 0}, "num_requests"),
    ({"num_requests": None}, "num_requests"),
    ({"seed": -1}, "seed"),
    ({"block_tokens": 0}, "block_tokens"),
    ({"arrivals": None}, "arrivals"),
    ({"input_lengths": 5}, "input_lengths"),
])
def test_bad_arguments(kwargs, text):
    args = {"input_lengths": Fixed(10), "output_lengths": Fixed(1), "arrivals": Poisson(1.0)} | kwargs
    with pytest.raises(InputError, match=text):
        SyntheticWorkload(**args)


def test_uncached_distribution_is_the_exact_grid():
    values, weights = _paper().uncached_input_distribution()
    assert len(values) >= 20_000 and weights.sum() == pytest.approx(1.0)
    assert _paper().mean_output_tokens() == 1024.0
