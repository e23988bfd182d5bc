"""Prompts from hash_ids: shared leading ids are shared leading tokens, lengths are exact."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.live.tokens import block_hash_ids
from harness.loadgen.prompts import PromptBuilder, request_body
from harness.workload.request import Request

B = PromptBuilder(block_tokens=8, token_id_min=100, token_id_max=200)


def req(rid, n, ids, out=5):
    return Request(rid, 0.0, n, out, tuple(ids))


@pytest.mark.parametrize("n", [1, 7, 8, 9, 24, 25])
def test_length_and_range_are_exact(n):
    ids = B.token_ids(req(0, n, range(10, 10 + -(-n // 8))))
    assert len(ids) == n and ids.dtype == np.int64
    assert ids.min() >= 100 and ids.max() < 200


def test_same_hash_ids_give_same_tokens_across_requests_and_runs():
    a = B.token_ids(req(1, 20, [5, 6, 7]))
    assert np.array_equal(a, B.token_ids(req(99, 20, [5, 6, 7])))
    assert np.array_equal(a, PromptBuilder(8, 100, 200).token_ids(req(1, 20, [5, 6, 7])))


def test_shared_leading_ids_are_shared_leading_tokens_then_diverge():
    a = B.token_ids(req(1, 24, [5, 6, 7]))
    b = B.token_ids(req(2, 24, [5, 6, 8]))
    assert np.array_equal(a[:16], b[:16])
    assert not np.array_equal(a[16:], b[16:])


def test_a_partial_block_is_a_prefix_of_the_full_block():
    """Block content depends on the id only: a shorter last block is cut, not different."""
    full = B.token_ids(req(1, 16, [5, 6]))
    cut = B.token_ids(req(2, 12, [5, 6]))
    assert np.array_equal(full[:12], cut)


def test_missing_hash_ids_give_unshared_blocks():
    a = B.token_ids(req(1, 16, []))
    b = B.token_ids(req(2, 16, []))
    assert len(a) == 16 and not np.array_equal(a[:8], b[:8])


def test_trace_prefix_structure_survives_the_server_hash():
    """Prompts built from chained trace ids hash (server side) to ids with the same equality pattern."""
    trace = [req(0, 20, [0, 1, 2]), req(1, 24, [0, 1, 3]), req(2, 17, [0, 4, 5]), req(3, 20, [0, 1, 2])]
    server = [block_hash_ids(B.token_ids(r), 8) for r in trace]
    for r1, s1 in zip(trace, server, strict=False):
        for r2, s2 in zip(trace, server, strict=False):
            for i in range(min(len(s1), len(s2))):
                same_prefix = r1.hash_ids[: i + 1] == r2.hash_ids[: i + 1]
                same_len = (i + 1) * 8 <= min(r1.input_tokens, r2.input_tokens) or r1.input_tokens == r2.input_tokens
                assert (s1[i] == s2[i]) == (same_prefix and same_len)


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_request_body_pins_the_output_and_carries_the_prompt(api):
    r = req(3, 10, [1, 2], out=0)
    body = json.loads(request_body(B, r, api=api, model="m", stream=True, ignore_eos=True))
    assert body["max_tokens"] == 1  # at least one token is always requested
    assert body["ignore_eos"] is True and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True} and body["model"] == "m"
    if api == "chat":
        words = body["messages"][0]["content"].split()
        assert [int(w[1:]) for w in words] == B.token_ids(r).tolist()
    else:
        assert body["prompt"] == B.token_ids(r).tolist()


def test_request_body_without_stream_or_ignore_eos():
    body = json.loads(request_body(B, req(1, 3, [1]), api="completions", model="m", stream=False, ignore_eos=False))
    assert "stream_options" not in body and "ignore_eos" not in body and body["stream"] is False


def test_bad_ranges_are_input_errors():
    from harness.errors import InputError

    with pytest.raises(InputError, match="token_id_min"):
        PromptBuilder(8, 500, 100)
