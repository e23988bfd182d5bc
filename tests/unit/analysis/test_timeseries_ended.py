"""A request that left without finishing (cancelled, or cut off by a stop) holds its place until it left
(`ended_s`): its occupancy is not dropped for want of a `finish_s`."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from harness.analysis.timeseries import build_timeseries

NAN = math.nan


def _series(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    frame["route"] = "local"
    return build_timeseries(frame, deployment="d", t_end=8.0, bin_s=1.0, n_prefill=1, n_prfaas=0, n_decode=1,
                            decode_slots=4)


def test_a_request_cancelled_while_decoding_counts_until_its_cancel():
    """Decoding from 0.5 s, cancelled at 5 s: one sequence running in bins 1-4, half of bin 0, none after
    (without `ended_s` it counted nowhere: its interval had no end)."""
    ts = _series([{"arrival_s": 0.0, "prefill_start_s": 0.0, "prefill_end_s": 0.5, "kv_ready_s": 0.5,
                   "first_token_s": 0.5, "finish_s": NAN, "ended_s": 5.0}])
    assert ts["decode_running"].tolist() == pytest.approx([0.5, 1, 1, 1, 1, 0, 0, 0])
    assert ts["util_decode"].tolist() == pytest.approx([0.125, 0.25, 0.25, 0.25, 0.25, 0, 0, 0])
    assert ts["completions_per_s"].sum() == 0.0  # it did not complete


def test_requests_cancelled_in_the_queue_or_mid_prefill_count_until_they_left():
    """One queued from 0 s and cancelled there at 2 s; one prefilling from 1 s cut off by a stop at 3 s
    (no prefill end stamped); one that finished, with no `ended_s` (NaN): as before."""
    ts = _series([
        {"arrival_s": 0.0, "prefill_start_s": NAN, "prefill_end_s": NAN, "kv_ready_s": NAN,
         "first_token_s": NAN, "finish_s": NAN, "ended_s": 2.0},
        {"arrival_s": 1.0, "prefill_start_s": 1.0, "prefill_end_s": NAN, "kv_ready_s": NAN,
         "first_token_s": NAN, "finish_s": NAN, "ended_s": 3.0},
        {"arrival_s": 3.0, "prefill_start_s": 3.0, "prefill_end_s": 4.0, "kv_ready_s": 4.0,
         "first_token_s": 4.5, "finish_s": 6.0, "ended_s": NAN},
    ])
    assert ts["prefill_queue_local"].tolist() == pytest.approx([1, 1, 0, 0, 0, 0, 0, 0])
    assert ts["util_prefill_local"].tolist() == pytest.approx([0, 1, 1, 1, 0, 0, 0, 0])
    assert ts["decode_waiting"].tolist() == pytest.approx([0, 0, 0, 0, 0.5, 0, 0, 0])
    assert ts["decode_running"].tolist() == pytest.approx([0, 0, 0, 0, 0.5, 1, 0, 0])
    assert np.isclose(ts["completions_per_s"].sum(), 1.0)
