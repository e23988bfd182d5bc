"""The tidy frames: declared dtypes, required columns, atomic Parquet writes, reading an interrupted run's parts."""

from __future__ import annotations

import pandas as pd
import pytest

from harness.analysis import frames
from harness.errors import InputError


def record(i: int, **over) -> dict:
    rec = {"deployment": "prfaas_pd", "request_id": i, "arrival_s": float(i), "input_tokens": 1000 + i,
           "output_tokens": 64, "route": "prfaas", "ttft_s": 1.5, "finish_s": 10.0 + i, "error": None,
           "session_id": None, "custom_counter": 7}
    rec.update(over)
    return rec


def test_requests_frame_types_every_declared_column_and_keeps_extras():
    df = frames.requests_frame([record(0), record(1, session_id=3, error="timeout")])
    for name, col in frames.REQUEST_COLUMNS.items():
        if name in ("scheduled_s", "sent_s", "lateness_s"):
            assert name not in df.columns  # live-only stamps are not invented for sim runs
            continue
        assert str(df[name].dtype) == col.dtype, name
    assert df["custom_counter"].tolist() == [7, 7]
    assert df["cached_tokens"].tolist() == [0, 0]
    assert df["error"].isna().tolist() == [True, False]  # None stays missing, not the text "None"
    assert df["session_id"].tolist()[1] == 3 and pd.isna(df["session_id"].iloc[0])


def test_missing_required_column_names_it():
    rec = record(0)
    del rec["arrival_s"]
    with pytest.raises(InputError, match="arrival_s"):
        frames.requests_frame([rec])


def test_missing_integer_value_is_an_input_error_naming_the_column():
    with pytest.raises(InputError, match="output_tokens"):
        frames.requests_frame([record(0), record(1, output_tokens=None)])


def test_unreadable_number_names_the_column():
    with pytest.raises(InputError, match="ttft_s"):
        frames.requests_frame([record(0, ttft_s="soon")])


def test_empty_records_give_an_empty_typed_frame():
    df = frames.requests_frame([])
    assert len(df) == 0 and str(df["arrival_s"].dtype) == "float64"


def test_timeseries_frame_sorts_by_time():
    ts = frames.timeseries_frame([{"deployment": "d", "t_s": 2.0, "egress_gbps": 1.0},
                                  {"deployment": "d", "t_s": 1.0, "egress_gbps": 3.0}])
    assert ts["t_s"].tolist() == [1.0, 2.0] and ts["egress_gbps"].tolist() == [3.0, 1.0]


def test_write_parquet_round_trips_and_leaves_no_temporary_file(tmp_path):
    df = frames.requests_frame([record(i) for i in range(5)])
    path = frames.write_parquet(df, tmp_path / "sub" / "requests.parquet")
    frames.write_parquet(df.head(2), path)  # overwrite in place
    assert sorted(p.name for p in path.parent.iterdir()) == ["requests.parquet"]
    back = frames.read_parquet(path)
    pd.testing.assert_frame_equal(back, df.head(2))


def test_mixed_object_columns_are_written_as_strings(tmp_path):
    df = pd.DataFrame({"x": ["a", 1.5, None], "y": [1, None, 2.5]})
    back = frames.read_parquet(frames.write_parquet(df, tmp_path / "m.parquet"))
    assert back["x"].tolist()[:2] == ["a", "1.5"] and pd.isna(back["x"].iloc[2])
    assert back["y"].tolist()[0] == 1.0


def test_read_parquet_of_a_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match=r"nothing.parquet"):
        frames.read_parquet(tmp_path / "nothing.parquet")


def _write_part(path, index: int, rows: list[dict]) -> None:
    """One part as a run's recorder streams it (harness/runs/recording.py): `<file>.parts/part-NNNNNN.parquet`."""
    part = path.with_name(path.name + ".parts") / f"part-{index:06d}.parquet"
    frames.write_parquet(frames.requests_frame(rows), part)


def test_an_interrupted_run_is_read_from_its_parts_in_order(tmp_path):
    path = tmp_path / "requests.parquet"
    for batch in range(3):
        _write_part(path, batch, [record(batch * 10 + i) for i in range(4)])
    df = frames.read_parquet(path)
    assert df["request_id"].tolist() == [b * 10 + i for b in range(3) for i in range(4)]


@pytest.mark.parametrize("column", [
    ["local", None, "prfaas", float("nan")],  # str or missing objects: converted in bulk
    ["local", 5, None, 2.5],  # anything else: str() of each, missing kept missing
    pd.Series(["local", None, "prfaas", None], dtype="str"),  # pandas' own str dtype (NaN for missing)
    pd.Series(["local", None, "prfaas", None], dtype="string"),  # the typed frame's own
])
def test_string_columns_keep_text_and_missing_whatever_they_come_as(column):
    df = pd.DataFrame({**{k: [v] * 4 for k, v in record(0).items()}, "route": column})
    typed = frames.requests_frame(df)
    expect = [None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else str(v) for v in list(column)]
    assert typed["route"].dtype == pd.StringDtype()
    assert [None if pd.isna(v) else v for v in typed["route"]] == expect
    again = frames.requests_frame(typed)  # a typed frame types to itself
    pd.testing.assert_frame_equal(again, typed, check_exact=True)


def test_a_run_killed_before_its_first_batch_is_left_out_of_the_report_with_a_note(tmp_path, capsys):
    from harness.analysis.runs import collect

    _write_part(tmp_path / "0_a" / "requests.parquet", 0, [record(i) for i in range(4)])  # killed midway
    (tmp_path / "1_b" / "requests.parquet.parts").mkdir(parents=True)  # killed before its first batch landed
    report = collect([tmp_path])
    assert report["run_name"].tolist() == ["0_a"] and report["incomplete"].astype(bool).all()
    assert "1_b: killed before it recorded a request; not in the report" in capsys.readouterr().err


def test_a_run_with_one_corrupt_part_is_read_without_it_and_the_part_named(tmp_path, capsys):
    """Before: the whole run was refused (harness-report exit 2) for one unreadable part."""
    from harness.analysis.runs import collect

    path = tmp_path / "0_a" / "requests.parquet"
    for batch in range(3):
        _write_part(path, batch, [record(batch * 10 + i) for i in range(4)])
    bad = sorted((tmp_path / "0_a" / "requests.parquet.parts").iterdir())[1]
    bad.write_bytes(bad.read_bytes()[:100])  # cut short
    report = collect([tmp_path])
    assert report["run_name"].tolist() == ["0_a"] and int(report["n_requests"].iloc[0]) == 8
    err = capsys.readouterr().err
    assert f"warning: {bad}: not a readable Parquet file" in err and "2 of 3 parts" in err
