"""The decode design's batch sizes: defaults that scale with the engine's slots, and bad choices as
one-line input errors."""

from __future__ import annotations

import pytest

from harness.errors import InputError

# harness.profile imports scipy (~0.6 s of CPU): imported in the tests, not by every xdist worker as it collects


@pytest.mark.parametrize(("slots", "fit", "held"), [
    (4, [1, 2, 4], [3]), (6, [1, 2, 4, 6], [3]), (16, [1, 2, 4, 8, 16], [3]), (2, [1, 2], []), (3, [1, 2, 3], []),
])
def test_default_batches_are_powers_of_two_and_the_slots_with_3_held_out(slots, fit, held):
    from harness.profile import decode_batches

    assert decode_batches(slots, None, None) == (fit, held)


def test_given_batches_are_kept():
    from harness.profile import decode_batches

    assert decode_batches(8, [1, 8], [5]) == ([1, 8], [5])


@pytest.mark.parametrize(("batches", "holdout", "message"), [
    (None, [9], "batch 9 is outside 1..8"), ([1, 3], [3], "both fitted and held out"), ([2], [], "at least 2"),
])
def test_bad_batches_are_input_errors(batches, holdout, message):
    from harness.profile import decode_batches

    with pytest.raises(InputError, match=message):
        decode_batches(8, batches, holdout)
