"""`harness-trace stats` reads traces in chunks: the same numbers and the same errors as the in-memory path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import InputError
from harness.workload.formats import load_trace, write_trace
from harness.workload.request import Request
from harness.workload.stats import stream_trace_stats, trace_stats

REPO = Path(__file__).resolve().parents[3]
TRACES = REPO / "traces"
DATA = REPO / "tests" / "data"
BAD = DATA / "bad_traces"


def _in_memory(path, lru=(), block_tokens=512):
    requests, report = load_trace(path, None, block_tokens)
    return trace_stats(requests, block_tokens, lru), report.lines()


@pytest.mark.parametrize("path", [TRACES / "mooncake_synthetic_trace.jsonl.gz", TRACES / "azure_sample.csv",
                                  DATA / "tiny_mooncake.jsonl", DATA / "tiny_azure.csv"])
@pytest.mark.parametrize("chunk_rows", [1, 7, 1000, 1_000_000])
def test_streamed_stats_equal_the_in_memory_ones(path, chunk_rows):
    expected, notes = _in_memory(path, lru=(64, 3000))
    got, report = stream_trace_stats(path, None, 512, (64, 3000), chunk_rows=chunk_rows)
    assert got == expected  # exact: every float, every count
    assert report.lines() == notes  # the same notes (clipped, dropped, synthesised, rebased)


def test_streamed_stats_equal_on_the_conversation_trace():
    path = TRACES / "mooncake_conversation_trace.jsonl.gz"
    expected, _ = _in_memory(path, lru=(10_000,))
    got, _ = stream_trace_stats(path, None, 512, (10_000,), chunk_rows=2500)
    assert got == expected
    assert round(got["prefix_hit_token_frac_infinite"], 4) == 0.3736  # README, "Reproduce the paper"


def test_sessions_dropped_rows_and_missing_hash_ids_across_chunks(tmp_path):
    """Rows without hash_ids get fresh blocks (never hits, but they fill an LRU), empty prompts are
    dropped, sessions are counted: the same whichever rows share a chunk."""
    rows = []
    for i in range(40):
        row = {"timestamp": i * 250, "input_length": 0 if i % 13 == 5 else 600 + 100 * (i % 4),
               "output_length": i % 3, "session_id": i % 6, "turn": i // 6}
        if i % 4:
            row["hash_ids"] = [1, 2][: -(-row["input_length"] // 512)] if row["input_length"] else []
        rows.append(json.dumps(row))
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(rows) + "\n")
    expected, notes = _in_memory(path, lru=(2, 5))
    assert expected["n_sessions"] == 6 and any("without hash_ids" in n for n in notes)
    for chunk_rows in (1, 3, 11, 100):
        got, report = stream_trace_stats(path, None, 512, (2, 5), chunk_rows=chunk_rows)
        assert got == expected and report.lines() == notes


def test_parquet_traces_stream_too(tmp_path):
    requests = [Request(i, i * 0.5, 700 + i, 1 + i % 5, (i % 3, 100 + i)) for i in range(50)]
    write_trace(requests, tmp_path / "t.parquet")
    expected, _ = _in_memory(tmp_path / "t.parquet", lru=(4,))
    for chunk_rows in (1, 16, 1000):
        got, _ = stream_trace_stats(tmp_path / "t.parquet", None, 512, (4,), chunk_rows=chunk_rows)
        assert got == expected


@pytest.mark.parametrize("name", sorted(p.name for p in BAD.iterdir() if p.name != "expected.json"))
def test_bad_traces_give_the_same_one_line_error(name):
    with pytest.raises(InputError) as loaded:
        load_trace(BAD / name)
    with pytest.raises(InputError) as streamed:
        stream_trace_stats(BAD / name, chunk_rows=1)
    assert str(streamed.value) == str(loaded.value)


def test_time_going_back_across_a_chunk_boundary_names_the_line(tmp_path):
    path = tmp_path / "back.jsonl"
    path.write_text('{"timestamp": 5, "input_length": 10, "output_length": 1}\n'
                    '{"timestamp": 4, "input_length": 10, "output_length": 1}\n')
    with pytest.raises(InputError, match=r"back.jsonl:2: field 'timestamp' goes back in time"):
        stream_trace_stats(path, chunk_rows=1)
