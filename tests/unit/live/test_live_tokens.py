"""Prompt content -> block hashes: equal leading blocks give equal leading hash ids, nothing else does."""

from __future__ import annotations

import pytest

from harness.live.tokens import block_hash_ids, text_token_ids


def test_text_tokens_are_one_per_word_and_deterministic():
    """The stand-in tokeniser: whitespace words, same word -> same id, no state between calls."""
    ids = text_token_ids("the cat  sat\non the\tmat")
    assert len(ids) == 6
    assert ids[0] == ids[4]  # "the" twice
    assert ids == text_token_ids("the cat sat on the mat")
    assert text_token_ids("   ") == []


@pytest.mark.parametrize(("n_tokens", "block", "expected_blocks"), [
    (1, 4, 1), (4, 4, 1), (5, 4, 2), (8, 4, 2), (9, 4, 3), (1024, 512, 2), (1025, 512, 3),
])
def test_one_hash_per_block_including_the_partial_last(n_tokens, block, expected_blocks):
    """ceil(n / block) ids, as in the trace format."""
    assert len(block_hash_ids(list(range(n_tokens)), block)) == expected_blocks


def test_shared_prefix_shares_exactly_its_complete_blocks():
    """Two prompts agreeing on 2.5 blocks share 2 leading ids, then diverge for good."""
    a = list(range(100, 120))
    b = [*a[:10], 999, *a[11:]]  # differs inside block 2 (tokens 8..11), block size 4
    ha, hb = block_hash_ids(a, 4), block_hash_ids(b, 4)
    assert ha[:2] == hb[:2]
    assert all(x != y for x, y in zip(ha[2:], hb[2:], strict=False))  # chained: later equal blocks still differ


def test_hashes_are_chained_not_positional():
    """The same block content after different prefixes hashes differently."""
    block = [7, 7, 7, 7]
    assert block_hash_ids([1, 2, 3, 4, *block], 4)[1] != block_hash_ids([5, 6, 7, 8, *block], 4)[1]


def test_partial_block_matches_only_an_identical_partial_block():
    """A trailing partial block equals another only when its tokens and length are the same."""
    base = list(range(8))
    assert block_hash_ids([*base, 1, 2], 4)[2] == block_hash_ids([*base, 1, 2], 4)[2]
    assert block_hash_ids([*base, 1, 2], 4)[2] != block_hash_ids([*base, 1, 2, 3], 4)[2]


def test_hash_ids_fit_int64():
    """Hash ids are stored in int64 columns and Python sets alike."""
    assert all(0 <= h < 2**63 for h in block_hash_ids(list(range(5000)), 16))
