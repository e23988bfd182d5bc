"""Request rows, their DataFrame form and block-id helpers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from harness.errors import InputError
from harness.workload.request import Request, frame_to_requests, n_blocks, requests_to_frame, unique_hash_ids


def test_frame_round_trip_keeps_every_field():
    reqs = [Request(0, 0.25, 1000, 10, (1, 2)), Request(1, 1.5, 513, 3, (1, 3), session_id=4, turn=2)]
    frame = requests_to_frame(reqs)
    assert list(frame.columns) == ["request_id", "arrival_s", "input_tokens", "output_tokens", "hash_ids",
                                   "session_id", "turn"]
    assert frame["session_id"].isna().tolist() == [True, False]
    assert frame_to_requests(frame) == reqs


def test_frame_without_optional_columns():
    frame = pd.DataFrame({"request_id": [5], "arrival_s": [0.0], "input_tokens": [7], "output_tokens": [1]})
    assert frame_to_requests(frame) == [Request(5, 0.0, 7, 1)]
    with pytest.raises(InputError, match="input_tokens"):
        frame_to_requests(frame.drop(columns=["input_tokens"]))


@pytest.mark.parametrize(("tokens", "blocks"), [(1, 1), (511, 1), (512, 1), (513, 2), (131072, 256)])
def test_n_blocks(tokens, blocks):
    assert n_blocks(tokens, 512) == blocks


def test_unique_hash_ids_are_consecutive_and_disjoint():
    ids = unique_hash_ids(np.array([512, 513, 1]), 512, first_id=10)
    assert ids == [(10,), (11, 12), (13,)]


def test_requests_are_immutable():
    r = Request(0, 0.0, 1, 1)
    with pytest.raises(AttributeError):
        r.input_tokens = 5  # type: ignore[misc]
