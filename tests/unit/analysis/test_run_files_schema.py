"""Run files of any modes read together: one Arrow type per column (never `null`), stable pandas dtypes.

The audit's failing reads (contract26 finding 1): two sweep runs of different deployments
(`threshold_tokens` absent from homogeneous_pd), two live runs (`server_error` empty in one), serve's
`workload`/`seed`, url's instance counts, a report's flags and override columns. Each run directory
here goes through the same writers as a real run (`write_run`, `write_report`); the summaries'
metadata is each mode's (harness/runs/sim.py, http.py, serve.py).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.analysis import metrics as m
from harness.analysis.frames import requests_frame, write_parquet
from harness.analysis.report import write_report
from harness.analysis.summary import write_run
from harness.runs.http import _join_server_records

CFG = {"figures": False}


def _rows(deployment: str, n: int = 4, **extra) -> list[dict]:
    return [{"deployment": deployment, "request_id": i, "arrival_s": float(i), "input_tokens": 100, "output_tokens": 4,
             "route": "local", "prefill_instance": "p0", "decode_instance": "d0", "kv_bytes_sent": 1e6,
             "first_token_s": i + 0.5, "finish_s": i + 1.0, "ttft_s": 0.5, "tpot_s": 0.1, "e2e_s": 1.0,
             "error": None, **extra} for i in range(n)]


def _http(i: int, **extra) -> dict:
    return {"scheduled_s": float(i), "sent_s": float(i), "lateness_s": 0.0, "n_chunks": 4, "http_status": 200,
            "usage_reported": True, "interrupted": False, **extra}


PLAN = {"lambda_max_rps": 3.0, "theta_pd_d_rps": 4.0, "bound": "decode", "notes": "x"}
# Each mode's run metadata as its runner hands it to write_run (values of the kinds each writes).
META = {
    "prfaas_pd": {"deployment": "prfaas_pd", "mode": "sim", "offered_rps": 1.0, "threshold_tokens": 3840,
                  "n_prfaas": 4, "n_prefill": 3, "n_decode": 5, "workload": "fixed", "model": "m", "seed": 0,
                  "concurrency": None, "sim_events": 100, "interrupted": False, "offered": 4,
                  "plan": {**PLAN, "theta_prfaas_rps": 1.5, "threshold_tokens": 3840.0}},
    "homogeneous_pd": {"deployment": "homogeneous_pd", "mode": "sim", "offered_rps": 2.0, "threshold_tokens": None,
                       "n_prfaas": 0, "n_prefill": 3, "n_decode": 5, "workload": "fixed", "model": "m", "seed": 0,
                       "concurrency": 8, "sim_events": 90, "interrupted": False, "offered": 4,
                       "plan": {**PLAN, "theta_prfaas_rps": None, "threshold_tokens": None}},
    "url": {"deployment": "url:m", "mode": "url", "offered_rps": 1.0, "threshold_tokens": math.nan,
            "n_prfaas": math.nan, "n_prefill": math.nan, "n_decode": math.nan, "workload": "fixed", "model": "m",
            "seed": 0, "concurrency": None, "interrupted": False, "offered": 4, "max_concurrency": 4,
            "loadgen": {"valid": True, "invalid_reason": None, "requests_sent": 4}},
    "serve": {"deployment": "prfaas_pd", "mode": "serve", "threshold_tokens": 3840, "n_prfaas": 4, "n_prefill": 3,
              "n_decode": 5, "model": "m", "refused_requests": 0, "abandoned_requests": 1},
}


def _summaries(root: Path) -> dict[str, Path]:
    dirs = {}
    for name, meta in META.items():
        rows = _rows(meta["deployment"])
        if meta["mode"] == "url":  # what a client cannot see: null, and its own stamps
            rows = [{**r, **_http(r["request_id"]), "route": None, "prefill_instance": None, "decode_instance": None,
                     "kv_bytes_sent": None, "cache_hit_tokens": None, "fetched_tokens": None} for r in rows]
        dirs[name] = root / name
        write_run(dirs[name], rows, None, meta, CFG)
    return dirs


def _assert_read_together(files: list[Path]) -> None:
    """Every Arrow type agrees (unify_schemas' default promotion fails on any conflict), no column is
    typed null, every order of the files reads with pd.read_parquet, and each column has one pandas
    dtype in every file."""
    schemas = [pq.read_schema(f) for f in files]
    assert not [(str(f), fld.name) for f, s in zip(files, schemas, strict=True) for fld in s
                if pa.types.is_null(fld.type)]
    pa.unify_schemas(schemas)
    for order in itertools.permutations(files):
        pd.read_parquet(list(order))
    dtypes: dict[str, set[str]] = {}
    for f in files:
        for column, dtype in pd.read_parquet(f).dtypes.items():
            dtypes.setdefault(column, set()).add(str(dtype))
    assert {c: d for c, d in dtypes.items() if len(d) > 1} == {}


def test_two_sweep_runs_of_different_deployments_read_together(tmp_path):
    """pd.read_parquet([homogeneous_pd, prfaas_pd summary]) raised 'Unsupported cast from double to null'."""
    dirs = _summaries(tmp_path)
    files = [dirs["homogeneous_pd"] / "summary.parquet", dirs["prfaas_pd"] / "summary.parquet"]
    _assert_read_together(files)
    both = pd.read_parquet(files)
    assert both["threshold_tokens"].dtype == "float64" and both["threshold_tokens"].tolist()[1] == 3840.0
    assert np.isnan(both["threshold_tokens"].tolist()[0])
    assert str(both["concurrency"].dtype) == "Int64" and str(both["n_prfaas"].dtype) == "Int64"
    assert both["plan_theta_prfaas_rps"].dtype == "float64"


def test_summaries_of_every_mode_read_together_with_declared_dtypes(tmp_path):
    dirs = _summaries(tmp_path)
    files = [d / "summary.parquet" for d in dirs.values()]
    _assert_read_together(files)
    url, serve = pd.read_parquet(dirs["url"] / "summary.parquet"), pd.read_parquet(dirs["serve"] / "summary.parquet")
    assert str(url["n_prfaas"].dtype) == "Int64" and url["n_prfaas"].isna().all()  # unknown, not NaN as float
    assert str(serve["seed"].dtype) == "Int64" and serve["seed"].isna().all()
    assert str(serve["workload"].dtype).startswith(("string", "str")) and serve["workload"].isna().all()
    assert str(url["loadgen_valid"].dtype) == "boolean" and str(url["interrupted"].dtype) == "boolean"
    assert str(url["loadgen_requests_sent"].dtype) == "Int64"


def test_two_live_runs_requests_read_together_when_one_has_no_server_error(tmp_path):
    """`server_error` all null in one live run (Arrow null type) and text in the other: the read failed."""
    clean = requests_frame([{**r, **_http(r["request_id"]), "server_error": None} for r in _rows("d")])
    cut = requests_frame([{**r, **_http(r["request_id"]), "server_error": "interrupted", "retries": 1,
                           "error": "interrupted", "http_status": None} for r in _rows("d")])
    files = [write_parquet(clean, tmp_path / "a.parquet"), write_parquet(cut, tmp_path / "b.parquet")]
    _assert_read_together(files)
    got = pd.read_parquet(files)
    assert got["server_error"].isna().sum() == 4 and (got["server_error"] == "interrupted").sum() == 4
    assert str(got["http_status"].dtype) == "Int64" and got["http_status"].isna().sum() == 4


def test_serve_rows_without_retries_count_none_and_stay_integers():
    """A request refused before it reached the deployment has no `retries` key: 0, not a float NaN."""
    df = requests_frame([{**_rows("d", 1)[0], "retries": 2}, {**_rows("d", 2)[1], "refused": True}])
    assert df["retries"].dtype == "int64" and df["retries"].tolist() == [2, 0]
    assert df["refused"].dtype == bool and df["refused"].tolist() == [False, True]


def test_an_empty_text_column_is_null_and_an_unknown_empty_column_is_not_null_typed(tmp_path):
    df = requests_frame([{**r, "decode_instance": "", "route": ""} if r["request_id"] == 1 else r
                         for r in _rows("d", 3)])
    assert df["decode_instance"].isna().tolist() == [False, True, False]
    assert df["route"].isna().tolist() == [False, True, False]
    path = write_parquet(pd.DataFrame({"x": [None, None], "y": [1, 2]}), tmp_path / "x.parquet")
    assert pq.read_schema(path).field("x").type == pa.float64()


def test_url_unknowns_are_null_and_their_fractions_nan_not_zero(tmp_path):
    """url mode: the target's pool hits, fetches and KV bytes are unknown: null columns; the summary's
    cache_hit_token_frac and kv_bytes_prfaas_total NaN (were 0 beside cached_token_frac 0.99)."""
    dirs = _summaries(tmp_path)
    req = pd.read_parquet(dirs["url"] / "requests.parquet")
    assert str(req["cache_hit_tokens"].dtype) == "Int64" and req["cache_hit_tokens"].isna().all()
    assert req["fetched_tokens"].isna().all()
    s = pd.read_parquet(dirs["url"] / "summary.parquet").iloc[0]
    assert math.isnan(s["cache_hit_token_frac"]) and math.isnan(s["kv_bytes_prfaas_total"])
    sim = pd.read_parquet(dirs["homogeneous_pd"] / "summary.parquet").iloc[0]
    assert sim["cache_hit_token_frac"] == 0.0 and sim["kv_bytes_prfaas_total"] == 0.0  # known zeros stay zeros


def test_a_row_without_the_pool_counts_has_none_one_with_them_unknown_has_null():
    base = _rows("d", 2)
    df = requests_frame([base[0], {**base[1], "cache_hit_tokens": None, "fetched_tokens": None, "cached_tokens": None}])
    assert df["cache_hit_tokens"].tolist()[0] == 0 and df["cache_hit_tokens"].isna().tolist() == [False, True]
    assert df["cached_tokens"].isna().tolist() == [False, True] and str(df["cached_tokens"].dtype) == "Int64"


def test_token_fractions_count_the_rows_whose_counts_are_known_and_are_nan_when_none_is():
    """Input 100 (50 cached, 40 pool hits) and 300 (counts unknown): 0.5 and 0.4 over the known row, not
    50/400 nor 0; every count unknown: NaN, not 0."""
    rows = _rows("d", 2)
    df = requests_frame([{**rows[0], "cached_tokens": 50, "cache_hit_tokens": 40},
                         {**rows[1], "input_tokens": 300, "cached_tokens": None, "cache_hit_tokens": None}])
    assert m.cached_token_frac(df) == pytest.approx(0.5) and m.cache_hit_token_frac(df) == pytest.approx(0.4)
    assert m.prefill_tokens_computed(df) == pytest.approx(50)
    unknown = requests_frame([{**r, "cached_tokens": None, "cache_hit_tokens": None} for r in rows])
    assert math.isnan(m.cached_token_frac(unknown)) and math.isnan(m.cache_hit_token_frac(unknown))
    assert math.isnan(m.prefill_tokens_computed(unknown))


def test_live_join_fills_what_the_client_did_not_know_from_the_emulator():
    client = [{"request_id": 1, "cache_hit_tokens": None, "fetched_tokens": None, "output_tokens": 4},
              {"request_id": 2, "cache_hit_tokens": None, "fetched_tokens": None, "output_tokens": 0}]
    served = [{"request_id": 10, "cache_hit_tokens": 512, "fetched_tokens": 0, "route": "prfaas", "output_tokens": 9}]
    rows = _join_server_records(client, served, {10: "1"}, 0.0)
    assert (rows[0]["cache_hit_tokens"], rows[0]["fetched_tokens"], rows[0]["route"]) == (512, 0, "prfaas")
    assert rows[0]["output_tokens"] == 4  # the client's own count wins
    assert (rows[1]["cache_hit_tokens"], rows[1]["fetched_tokens"]) == (0, 0) and "route" not in rows[1]


def test_report_of_mixed_runs_has_declared_dtypes_and_reads_with_another_report(tmp_path):
    """A mixed report stored `interrupted`/`loadgen_valid` as bool-with-nulls (pandas object) and its
    counts as double; a sweep over `loadgen.rate_rps=1,2` (int64) and one with `inf` (string) could not
    be read together."""
    dirs = _summaries(tmp_path / "mixed")
    rates = {"prfaas_pd": "1", "homogeneous_pd": "inf", "url": "2", "serve": "2"}
    for name, d in dirs.items():
        (d / ".hydra").mkdir()
        (d / ".hydra" / "overrides.yaml").write_text(f"- loadgen.rate_rps={rates[name]}\n")
    sweep = tmp_path / "sweep"
    for i, rate in enumerate(("1", "2")):
        d = sweep / str(i)
        write_run(d, _rows("prfaas_pd"), None, META["prfaas_pd"], CFG)
        (d / ".hydra").mkdir()
        (d / ".hydra" / "overrides.yaml").write_text(f"- loadgen.rate_rps={rate}\n")
    write_report([tmp_path / "mixed"], figures=False)
    write_report([sweep], figures=False)
    mixed, plain = tmp_path / "mixed" / "report.parquet", sweep / "report.parquet"
    report = pd.read_parquet(mixed)
    for column in ("interrupted", "loadgen_valid", "incomplete"):
        assert str(report[column].dtype) == "boolean", column
    for column in ("n_prfaas", "seed", "offered", "sim_events", "n_requests"):
        assert str(report[column].dtype) == "Int64", column
    assert report["loadgen.rate_rps"].dtype == "float64" and np.isinf(report["loadgen.rate_rps"]).sum() == 1
    _assert_read_together([mixed, plain])
    assert len(pd.read_parquet([plain, mixed])) == 6


@pytest.mark.parametrize("values, dtype", [([1, None], "float64"), (["a", None], "string"), ([True, None], "boolean"),
                                           ([None, None], "float64"), (["1", "inf"], "float64"), ([2, "x"], "string")])
def test_an_undeclared_summary_key_takes_its_values_kind(values, dtype):
    from harness.analysis.frames import summary_frame

    got = summary_frame([{"new_key": v} for v in values])["new_key"]
    assert str(got.dtype).startswith(dtype) if dtype != "string" else str(got.dtype) in ("string", "str")
