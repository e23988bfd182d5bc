"""ParquetColumns: a long run's summary and time series read requests.parquet a column at a time and
compute exactly what they compute from the whole frame, holding at most `keep` columns."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from harness.analysis.columns import ParquetColumns
from harness.analysis.frames import requests_frame, write_parquet
from harness.analysis.summary import summarize, vllm_names
from harness.analysis.timeseries import bin_edges, build_timeseries, link_series


def _requests(n: int = 500) -> pd.DataFrame:
    rng = np.random.default_rng(3)
    rows = []
    for i in range(n):
        arrival = i / 3 + float(rng.random())
        start = arrival + float(rng.exponential(2.0))
        end = start + float(rng.exponential(1.0))
        first = end + 0.1 + float(rng.random())
        finish = first + float(rng.exponential(20.0))
        failed = i % 37 == 5
        rows.append({"deployment": "d", "request_id": i, "arrival_s": arrival,
                     "input_tokens": int(rng.integers(1, 9000)),
                     "cached_tokens": int(rng.integers(0, 100)), "cache_hit_tokens": int(rng.integers(0, 300)),
                     "output_tokens": int(rng.integers(1, 200)), "route": "prfaas" if rng.random() < 0.4 else "local",
                     "prefill_start_s": start, "prefill_end_s": end, "kv_ready_s": end + 0.05,
                     "first_token_s": math.nan if failed else first, "finish_s": math.nan if failed else finish,
                     "ttft_s": math.nan if failed else first - arrival, "tpot_s": float(rng.random()) / 10,
                     "e2e_s": math.nan if failed else finish - arrival, "kv_bytes_sent": float(rng.random()) * 1e9,
                     "error": "lost" if failed else None})
    return requests_frame(rows)


def test_summary_and_time_series_from_the_file_equal_those_from_the_frame(tmp_path):
    frame = _requests()
    path = tmp_path / "requests.parquet"
    write_parquet(frame, path)
    whole = pd.read_parquet(path)
    columns = ParquetColumns(path, keep=2)
    assert len(columns) == len(whole) and list(columns.columns) == list(whole.columns)
    assert "route" in columns and "absent" not in columns

    t_end = float(np.nanmax(whole["finish_s"]))
    args = dict(deployment="d", t_end=t_end, bin_s=1.0, n_prefill=2, n_prfaas=1, n_decode=3, decode_slots=12)
    want_ts = build_timeseries(whole, **args)
    edges, width = bin_edges(t_end, 1.0)
    got_ts = build_timeseries(columns, **args, link_columns=link_series(edges, width))
    pd.testing.assert_frame_equal(got_ts, want_ts, check_exact=True)
    assert want_ts["decode_running"].max() > 0 and want_ts["prefill_queue_prfaas"].max() > 0

    cfg = {"slo": {"ttft_s": 5.0, "tpot_s": 0.05}, "warmup_fraction": 0.1}
    meta = {"deployment": "d", "mode": "sim"}
    want = summarize(whole, want_ts, meta, cfg)
    got = summarize(columns, got_ts, meta, cfg)
    assert want["failed"] > 0 and 0 < want["offload_fraction"] < 1
    want_v, got_v = vllm_names(want, whole), vllm_names(got, columns)
    want_v.pop("date"), got_v.pop("date")
    for w, g in ((want, got), (want_v, got_v)):
        assert g.keys() == w.keys()
        for key, value in w.items():  # to the last digit (NaN where the frame gives NaN)
            assert g[key] == value or (value != value and g[key] != g[key]), key
    assert len(columns._cache) <= 2  # never more than `keep` columns held


def test_a_column_is_read_as_read_parquet_reads_it(tmp_path):
    frame = _requests(50)
    path = tmp_path / "requests.parquet"
    write_parquet(frame, path)
    columns = ParquetColumns(path, keep=1)
    whole = pd.read_parquet(path)
    for name in ("route", "error", "input_tokens", "finish_s"):
        pd.testing.assert_series_equal(columns[name], whole[name], check_exact=True)
    pd.testing.assert_frame_equal(columns.frame(("ttft_s", "error", "absent")), whole[["ttft_s", "error"]],
                                  check_exact=True)
    assert list(columns._cache) == ["error"]
    calls = []
    assert columns.memo("k", lambda: calls.append(1) or 7) == 7 == columns.memo("k", lambda: calls.append(1) or 8)
    assert calls == [1]
    columns.release()
    assert not columns._cache and columns.memo("k", lambda: 9) == 9
