"""Time-series bins stay bounded whatever the run's span: widened by whole multiples, counts kept."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from harness.analysis.timeseries import MAX_BINS, bin_edges, bin_width, build_timeseries
from harness.errors import InputError


def test_short_runs_keep_the_requested_width():
    assert bin_width(3600.0, 1.0) == 1.0
    assert bin_width(MAX_BINS * 1.0, 1.0) == 1.0  # exactly MAX_BINS bins still fit


@pytest.mark.parametrize(("t_end", "bin_s"), [(1e9, 1.0), (MAX_BINS + 0.5, 1.0), (2.08e9, 0.25), (1e12, 1e-3),
                                               (7.3e5, 1.0)])
def test_long_runs_widen_to_a_whole_multiple_within_the_bound(t_end, bin_s):
    width = bin_width(t_end, bin_s)
    multiple = width / bin_s
    assert width > bin_s and abs(multiple - round(multiple)) < 1e-9  # edges stay on the requested grid
    assert math.ceil(t_end / width) <= MAX_BINS
    assert math.ceil(t_end / (width - bin_s)) > MAX_BINS  # the smallest multiple that fits


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_a_nonsense_width_is_refused(bad):
    with pytest.raises(InputError, match=r"analysis.timeseries.bin_s"):
        bin_width(10.0, bad)


def test_edges_cover_the_run():
    edges, width = bin_edges(1e9, 1.0)
    assert edges[0] == 0.0 and edges[-1] >= 1e9 and len(edges) - 1 <= MAX_BINS
    assert np.allclose(np.diff(edges), width)


def _requests(arrivals: list[float], service_s: float = 2.0) -> pd.DataFrame:
    t = np.asarray(arrivals, dtype=float)
    return pd.DataFrame({"arrival_s": t, "prefill_start_s": t, "prefill_end_s": t + 0.5, "kv_ready_s": t + 0.5,
                         "first_token_s": t + 0.6, "finish_s": t + service_s, "route": ["local"] * len(t)})


def test_a_1e9_second_run_is_binned_in_bounded_rows_and_keeps_its_counts():
    """The 2-request trace 1e12 ms long: 1e9 one-second rows before; now at most MAX_BINS, and the
    per-bin rates times the width still count every arrival and completion."""
    frame = _requests([0.0, 1e9])
    ts = build_timeseries(frame, deployment="d", t_end=1e9 + 2.0, bin_s=1.0, n_prefill=1, n_prfaas=0, n_decode=1)
    assert len(ts) <= MAX_BINS
    width = float(ts["bin_s"].iloc[0])
    assert width > 1.0 and (ts["bin_s"] == width).all()
    assert np.isclose((ts["arrivals_per_s"] * width).sum(), 2)
    assert np.isclose((ts["completions_per_s"] * width).sum(), 2)
    # time-averaged occupancy integrates to the busy time: 2 requests x 1.4 s decoding
    assert np.isclose((ts["decode_running"] * width).sum(), 2 * 1.4)


def test_a_short_run_is_unchanged_by_the_bound():
    frame = _requests([0.0, 3.0, 7.5])
    ts = build_timeseries(frame, deployment="d", t_end=10.0, bin_s=1.0, n_prefill=1, n_prfaas=0, n_decode=1)
    assert len(ts) == 10 and (ts["bin_s"] == 1.0).all()
    assert list(ts["t_s"]) == [float(i) for i in range(10)]
    assert ts["arrivals_per_s"].tolist()[:8] == [1, 0, 0, 1, 0, 0, 0, 1]
