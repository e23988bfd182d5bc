"""RecordStream.write_sorted: the parts' rows (in the order requests ended) as one file sorted by
request_id, the same frame an in-memory sort gives; ties or disagreeing parts fall back (False)."""

from __future__ import annotations

import random

import pandas as pd

from harness.analysis.frames import requests_frame, write_parquet
from harness.runs.recording import RecordStream, read_columns, write_sorted


def _row(i: int) -> dict:
    return {"deployment": "d", "request_id": i, "arrival_s": i / 3, "input_tokens": 10 + i, "output_tokens": 2,
            "route": "local" if i % 3 else "prfaas", "error": None if i % 7 else "boom", "finish_s": i + 0.5}


def _stream_rows(path, ids, every=13) -> RecordStream:
    stream = RecordStream(path, every=every, every_s=60.0)
    for i in ids:
        stream.add(_row(i))
        if len(stream._buffer) >= every:
            stream.flush()
    stream.close()
    return stream


def test_out_of_order_parts_become_one_sorted_file(tmp_path):
    ids = list(range(400))
    rng = random.Random(4)
    for k in range(0, 400, 20):  # local disorder, as completions have, plus one straggler at the end
        window = ids[k:k + 20]
        rng.shuffle(window)
        ids[k:k + 20] = window
    ids.remove(5)
    ids.append(5)
    stream = _stream_rows(tmp_path / "requests.parquet", ids)
    assert len(stream.parts()) > 10
    assert stream.write_sorted()
    got = pd.read_parquet(tmp_path / "requests.parquet")
    want = requests_frame([_row(i) for i in ids]).sort_values("request_id", ignore_index=True)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert got["request_id"].tolist() == list(range(400))
    short = read_columns(tmp_path / "requests.parquet", drop=("mode", "session_id", "absent"))
    assert "mode" not in short and "session_id" not in short and "route" in short
    pd.testing.assert_frame_equal(short, want.drop(columns=["mode", "session_id"]), check_exact=True)


def test_repeated_ids_fall_back(tmp_path):
    stream = _stream_rows(tmp_path / "requests.parquet", [0, 1, 2, 2, 3])
    assert not stream.write_sorted()
    assert not (tmp_path / "requests.parquet").exists()


def test_parts_that_disagree_on_types_fall_back(tmp_path):
    parts = tmp_path / "requests.parquet.parts"
    write_parquet(pd.DataFrame({"request_id": [1], "x": [1.5]}), parts / "part-000000.parquet")
    write_parquet(pd.DataFrame({"request_id": [0], "x": ["a"]}), parts / "part-000001.parquet")
    assert not write_sorted(sorted(parts.glob("*.parquet")), tmp_path / "requests.parquet")
    assert not write_sorted([], tmp_path / "requests.parquet")


def test_a_key_repeated_across_parts_falls_back(tmp_path):
    """The repeat is caught while merging (no pass holds every key): nothing is left behind."""
    ids = [*range(60), 7, *range(60, 90)]
    stream = _stream_rows(tmp_path / "requests.parquet", ids, every=11)
    assert len(stream.parts()) > 3
    assert not stream.write_sorted()
    assert not (tmp_path / "requests.parquet").exists()
    assert not list(tmp_path.glob(".requests.parquet.tmp-*"))


def test_null_keys_fall_back(tmp_path):
    parts = tmp_path / "requests.parquet.parts"
    write_parquet(pd.DataFrame({"request_id": pd.array([1, None], dtype="Int64"), "x": [1.5, 2.5]}),
                  parts / "part-000000.parquet")
    assert not write_sorted(sorted(parts.glob("*.parquet")), tmp_path / "requests.parquet")


def test_the_file_does_not_depend_on_where_the_parts_were_cut(tmp_path, monkeypatch):
    """Parts are cut by row count or wall clock; the merged file is cut in fixed row groups only."""
    import pyarrow.parquet as pq

    from harness.runs import recording

    monkeypatch.setattr(recording, "ROW_GROUP_ROWS", 64)
    ids = list(range(300))
    ids[10], ids[200] = ids[200], ids[10]  # one straggler held back across many parts
    files = []
    for every in (7, 13, 300):
        out = tmp_path / f"every{every}" / "requests.parquet"
        assert _stream_rows(out, ids, every=every).write_sorted()
        files.append(out.read_bytes())
        meta = pq.ParquetFile(out).metadata
        assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [64, 64, 64, 64, 44]
    assert files[0] == files[1] == files[2]
    assert pd.read_parquet(tmp_path / "every7" / "requests.parquet")["request_id"].tolist() == list(range(300))


def test_a_column_added_midway_is_filled_where_rows_lack_it(tmp_path):
    """A stopped sim run's `interrupted`: absent from the parts written before the stop, null in rows
    recorded without it beside the cut-off ones; with `fill` the file has it as bool, False there."""
    cut = {397, 399, 5}  # rows recorded when the run was stopped, the straggler 5 among them

    def row(i: int) -> dict:
        return {**_row(i), "interrupted": True} if i in cut else _row(i)

    rest = [i for i in range(400) if i not in cut]
    path = tmp_path / "requests.parquet"
    stream = RecordStream(path, every=13, every_s=60.0)
    for batch in (rest[:377], [*rest[377:], 397], [399, 5]):  # parts without the column, one part with
        for i in batch:  # both kinds of rows (nulls there), then one with cut-off rows only
            stream.add(row(i))
            if len(stream._buffer) >= 13:
                stream.flush()
        stream.flush()
    stream.close()
    import pyarrow.parquet as pq

    tables = [pq.read_table(p) for p in stream.parts()]
    assert "interrupted" not in tables[0].column_names and tables[-1]["interrupted"].null_count == 0
    assert any("interrupted" in t.column_names and t["interrupted"].null_count for t in tables)
    assert not stream.write_sorted()  # without `fill` the parts disagree: the caller sorts in memory
    assert stream.write_sorted(fill={"interrupted": False})
    got = pd.read_parquet(path)
    assert got.columns[-1] == "interrupted" and got["interrupted"].dtype == bool
    assert got["request_id"].tolist() == list(range(400))
    assert sorted(got.loc[got["interrupted"], "request_id"]) == sorted(cut)
    want = requests_frame([_row(i) for i in range(400)])
    pd.testing.assert_frame_equal(got.drop(columns=["interrupted"]), want, check_exact=True)


def test_fill_changes_nothing_when_no_part_has_the_column(tmp_path):
    ids = list(range(100))[::-1]
    _stream_rows(tmp_path / "a" / "requests.parquet", ids).write_sorted()
    _stream_rows(tmp_path / "b" / "requests.parquet", ids).write_sorted(fill={"interrupted": False})
    assert (tmp_path / "a" / "requests.parquet").read_bytes() == (tmp_path / "b" / "requests.parquet").read_bytes()


def test_a_fill_column_of_another_type_in_a_later_part_falls_back(tmp_path):
    parts = tmp_path / "requests.parquet.parts"
    write_parquet(pd.DataFrame({"request_id": [1], "interrupted": [True]}), parts / "part-000000.parquet")
    write_parquet(pd.DataFrame({"request_id": [0], "interrupted": ["yes"]}), parts / "part-000001.parquet")
    assert not write_sorted(sorted(parts.glob("*.parquet")), tmp_path / "requests.parquet", fill={"interrupted": False})
    write_parquet(pd.DataFrame({"request_id": [0], "other": [True]}), parts / "part-000001.parquet")
    assert not write_sorted(sorted(parts.glob("*.parquet")), tmp_path / "requests.parquet", fill={"interrupted": False})
