"""Trace readers and writers: round trips, load reports and every kind of bad input."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from harness.errors import InputError
from harness.workload.formats import detect_format, load_trace, read_trace, write_trace
from harness.workload.request import Request

REPO = Path(__file__).resolve().parents[3]
DATA = REPO / "tests" / "data"
SYNTHETIC_GZ = REPO / "traces" / "mooncake_synthetic_trace.jsonl.gz"


def test_staged_trace_round_trips_through_parquet_byte_for_byte(tmp_path):
    """Mooncake JSONL -> Parquet -> JSONL gives back the original file exactly."""
    original = gzip.decompress(SYNTHETIC_GZ.read_bytes())
    requests = read_trace(SYNTHETIC_GZ)
    write_trace(requests, tmp_path / "t.parquet")
    again = read_trace(tmp_path / "t.parquet")
    assert again == requests
    write_trace(again, tmp_path / "t.jsonl")
    assert (tmp_path / "t.jsonl").read_bytes() == original
    write_trace(again, tmp_path / "t.jsonl.gz")
    assert read_trace(tmp_path / "t.jsonl.gz") == requests


def test_parquet_keeps_sessions_and_exact_times(tmp_path):
    reqs = [Request(3, 0.1234567891, 600, 5, (1, 2), session_id=9, turn=1), Request(8, 2.5, 100, 1, (1,))]
    write_trace(reqs, tmp_path / "s.parquet")
    assert read_trace(tmp_path / "s.parquet") == reqs
    write_trace(reqs, tmp_path / "s.jsonl")
    back = read_trace(tmp_path / "s.jsonl")
    assert [(r.session_id, r.turn, r.hash_ids) for r in back] == [(9, 1, (1, 2)), (None, None, (1,))]
    assert back[0].arrival_s == 0.123  # JSONL keeps whole milliseconds


def test_csv_round_trip(tmp_path):
    reqs = [Request(0, 0.0, 600, 5, (0, 1)), Request(1, 0.3333333333333333, 100, 1, (2,))]
    write_trace(reqs, tmp_path / "a.csv")
    assert (tmp_path / "a.csv").read_text().splitlines()[0] == "TIMESTAMP,ContextTokens,GeneratedTokens"
    back, report = load_trace(tmp_path / "a.csv")
    assert back == reqs  # fresh ids happen to be the same consecutive ids here
    assert report.synthesised_hash_ids == 2


def test_azure_iso_datetimes_become_seconds():
    reqs, report = load_trace(DATA / "tiny_azure.csv")
    assert [r.arrival_s for r in reqs] == pytest.approx([0.0, 4.314579, 4.31941])
    assert [r.input_tokens for r in reqs] == [4808, 3180, 110]
    assert report.rebased_from.startswith("2023-11-16T18:15:46.68059")
    assert any("datetimes" in line for line in report.lines())


def test_report_counts_clipped_dropped_and_synthesised(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 0, "hash_ids": [5, 6]}\n'
                    '{"timestamp": 1, "input_length": 0, "output_length": 3, "hash_ids": []}\n'
                    '\n'
                    '{"timestamp": 2, "input_length": 10, "output_length": 3}\n')
    reqs, report = load_trace(path)
    assert (report.rows, report.clipped_output, report.dropped_empty_prompt, report.synthesised_hash_ids) == \
        (3, 1, 1, 1)
    assert [(r.output_tokens, r.hash_ids) for r in reqs] == [(1, (5, 6)), (3, (7,))]
    assert len(report.lines()) == 3


def test_tiny_fixture_and_block_size(tmp_path):
    reqs = read_trace(DATA / "tiny_mooncake.jsonl")
    assert [r.arrival_s for r in reqs] == [0.0, 0.0, 1.5, 3.001]
    assert reqs[2].session_id == 7 and reqs[2].turn == 2
    path = tmp_path / "b16.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 40, "output_length": 1, "hash_ids": [1, 2, 3]}\n')
    assert read_trace(path, block_tokens=16)[0].hash_ids == (1, 2, 3)
    with pytest.raises(InputError, match="block_tokens=512"):
        read_trace(path)


@pytest.mark.parametrize(("name", "fmt"), [("a.jsonl", "jsonl"), ("a.JSONL.GZ", "jsonl"), ("a.csv", "csv"),
                                           ("a.csv.gz", "csv"), ("a.parquet", "parquet")])
def test_detect_format(name, fmt):
    assert detect_format(name) == fmt


def test_unknown_format():
    with pytest.raises(InputError, match="cannot tell the trace format"):
        detect_format("trace.txt")
    with pytest.raises(InputError, match="unknown trace format 'xml'"):
        detect_format("trace.jsonl", "xml")


# Each file of tests/data/bad_traces/ holds one kind of bad input; expected.json lists the texts its
# one-line error must contain (file:line and the field).
BAD_DIR = DATA / "bad_traces"
BAD_INPUTS = json.loads((BAD_DIR / "expected.json").read_text())


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_names_file_line_and_field(name):
    with pytest.raises(InputError) as err:
        read_trace(BAD_DIR / name)
    message = str(err.value)
    assert "\n" not in message
    for text in BAD_INPUTS[name]:
        assert text in message


def test_bad_parquet(tmp_path):
    path = tmp_path / "p.parquet"
    pd.DataFrame({"request_id": [0], "arrival_s": [0.0], "input_tokens": [600]}).to_parquet(path)
    with pytest.raises(InputError, match="output_tokens"):
        read_trace(path)
    write_trace([Request(0, 0.0, 600, 5, (1, 2, 3))], path)
    with pytest.raises(InputError, match=r"row 0 \(request_id 0\): field 'hash_ids'"):
        read_trace(path)
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(InputError, match="cannot read as Parquet"):
        read_trace(tmp_path / "junk.parquet")


def test_missing_file_and_bad_gzip(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_trace(tmp_path / "nope.jsonl")
    (tmp_path / "bad.jsonl.gz").write_text("plain text")
    with pytest.raises(InputError, match="gzip"):
        read_trace(tmp_path / "bad.jsonl.gz")


def test_absurd_lengths_are_refused_before_ids_are_synthesised(tmp_path):
    """A 10^12-token prompt without hash_ids would synthesise ~2 billion block ids: refuse it by name."""
    from harness.errors import InputError
    from harness.workload import read_trace

    path = tmp_path / "huge.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,100,5\n1,1000000000000,5\n")
    with pytest.raises(InputError, match=r"huge.csv:3: field 'ContextTokens' = 1000000000000 is over"):
        read_trace(path)


@pytest.mark.parametrize(("name", "text"), [
    ("bom.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n0,600,5\n1.5,100,7\n"),
    ("bom.jsonl", '{"timestamp": 0, "input_length": 600, "output_length": 5}\n'
                  '{"timestamp": 1500, "input_length": 100, "output_length": 7}\n'),
    ("bom.jsonl.gz", '{"timestamp": 0, "input_length": 600, "output_length": 5}\n'
                     '{"timestamp": 1500, "input_length": 100, "output_length": 7}\n'),
], ids=["csv", "jsonl", "jsonl.gz"])
def test_utf8_bom_is_read_like_no_bom(tmp_path, name, text):
    """Spreadsheet exports start with a UTF-8 byte-order mark; the rows read as without it."""
    data = b"\xef\xbb\xbf" + text.encode()
    (tmp_path / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    reqs = read_trace(tmp_path / name)
    assert [(r.arrival_s, r.input_tokens, r.output_tokens) for r in reqs] == [(0.0, 600, 5), (1.5, 100, 7)]


def test_datetimes_going_back_across_a_chunk_boundary(tmp_path):
    """Read in chunks (as `harness-trace stats` does), a datetime earlier than the previous chunk's last
    is named as going back in time, with both values as stored (not as a negative offset)."""
    from harness.workload.formats import azure

    path = tmp_path / "back.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:01,600,10\n"
                    "2024-05-10 00:00:02,600,10\n2024-05-10 00:00:01.5,100,5\n")
    with pytest.raises(InputError, match=r"back.csv:4: field 'TIMESTAMP' goes back in time "
                                         r"\('2024-05-10 00:00:01.5' after '2024-05-10 00:00:02'\)"):
        list(azure.chunks(path, rows=2))


def _parquet_table(**columns):
    import pyarrow as pa

    table = {"request_id": pa.array([0, 1], pa.int64()), "arrival_s": pa.array([0.0, 1.0]),
             "input_tokens": pa.array([600, 100], pa.int64()), "output_tokens": pa.array([5, 5], pa.int64()),
             "hash_ids": pa.array([[1, 2], [3]], pa.list_(pa.int64()))}
    table.update(columns)
    return pa.table(table)


def _bad_parquet_columns():
    import pyarrow as pa

    return {
        "null_id": ({"hash_ids": pa.array([[1, None], [3]], pa.list_(pa.int64()))},
                    "row 0: field 'hash_ids' holds a null id"),
        "uint64_id": ({"hash_ids": pa.array([[1, 2], [2**63 + 5]], pa.list_(pa.uint64()))},
                      f"row 1: field 'hash_ids' = {2**63 + 5} does not fit"),
        "uint64_tokens": ({"input_tokens": pa.array([600, 2**64 - 1], pa.uint64())},
                          f"row 1: field 'input_tokens' = {2**64 - 1} does not fit"),
        "uint64_session": ({"session_id": pa.array([None, 2**64 - 2], pa.uint64())},
                           f"row 1: field 'session_id' = {2**64 - 2} does not fit"),
    }


@pytest.mark.parametrize("case", sorted(_bad_parquet_columns()))
def test_parquet_integers_out_of_int64_or_null_are_refused(tmp_path, case):
    """Parquet integers are checked before conversion to int64 (a null id became -2**63 and uint64 wrapped
    negative); the error names the row and field with the value as stored, whole-file and chunked."""
    import pyarrow.parquet as pq

    from harness.workload.formats import parquet

    columns, expected = _bad_parquet_columns()[case]
    path = tmp_path / f"{case}.parquet"
    pq.write_table(_parquet_table(**columns), path)
    with pytest.raises(InputError, match=re.escape(f"{path}: {expected}")):
        read_trace(path)
    with pytest.raises(InputError, match=re.escape(f"{path}: {expected}")):
        list(parquet.chunks(path, rows=1))


@pytest.mark.parametrize("source", ["stream", "list", "generator"])
def test_parquet_is_written_a_row_group_at_a_time(tmp_path, monkeypatch, source):
    """A synthetic stream goes to the file chunk by chunk (from its columns), anything else ROW_GROUP_ROWS
    requests at a time: the same table as the whole list, in row groups the writer holds one at a time."""
    import pyarrow.parquet as pq

    from harness.workload.arrivals import Poisson
    from harness.workload.formats import parquet
    from harness.workload.lengths import Fixed, TruncatedLogNormal
    from harness.workload.synthetic import SyntheticWorkload

    monkeypatch.setattr(parquet, "ROW_GROUP_ROWS", 100)
    workload = SyntheticWorkload(TruncatedLogNormal(9.9, 1.0, 128, 131072), Fixed(7), Poisson(2.0), num_requests=350,
                                 seed=1)
    requests = {"stream": workload.stream(chunk=100), "list": workload.generate(),
                "generator": (r for r in workload.generate())}[source]
    path = tmp_path / "t.parquet"
    write_trace(requests, path)
    meta = pq.ParquetFile(path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [100, 100, 100, 50]
    assert pq.read_table(path).equals(parquet.to_table(workload.generate()))
    assert read_trace(path) == workload.generate()
