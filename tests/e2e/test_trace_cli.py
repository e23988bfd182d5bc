"""`harness-trace` end to end: the staged Mooncake traces' published figures, conversions,
seeded generation and one-line errors with exit status 2."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import commands  # tests/commands.py
import pytest

from harness.trace import main

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO / "traces"
BAD_DIR = REPO / "tests" / "data" / "bad_traces"
BAD_INPUTS = json.loads((BAD_DIR / "expected.json").read_text())


def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return commands.run(["-m", "harness.trace", *args], cwd=cwd, timeout=120)


def _stats(path: Path) -> dict:
    done = _cli("stats", str(path), "--json", "--lru-blocks", "10000")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# /work/shared/traces/README.md "How these were computed": targets as published, tolerance half a
# unit of the last published digit (the synthetic mean input, 15,325.48, is published as 15,326).
CONVERSATION = {
    "n_requests": (12_031, 0), "duration_s": (3_537, 0.5), "rate_rps": (3.40, 0.005), "iat_cv": (3.03, 0.005),
    "input_tokens.mean": (12_035, 0.5), "input_tokens.p50": (6_909, 0.5), "input_tokens.p90": (27_367, 0.5),
    "input_tokens.p99": (85_400, 0.5), "input_tokens.max": (126_195, 0), "output_tokens.mean": (343, 0.5),
    "output_tokens.p50": (350, 0.5), "output_tokens.max": (2_000, 0),
    "prefix_hit_token_frac_infinite": (0.374, 0.0005), "prefix_hit_request_mean_infinite": (0.409, 0.0005),
    "prefix_hit_lru.10000.token_frac": (0.215, 0.0005), "prefix_hit_lru.10000.request_mean": (0.297, 0.0005),
    "block_refs": (288_500, 0), "unique_blocks": (182_790, 0), "block_refs_seen_frac": (0.366, 0.0005),
}
SYNTHETIC = {
    "n_requests": (3_993, 0), "duration_s": (1_022, 0.5), "rate_rps": (3.91, 0.005), "iat_cv": (1.01, 0.005),
    "input_tokens.mean": (15_326, 1.0), "input_tokens.p50": (11_587, 0.5), "input_tokens.max": (191_378, 0),
    "output_tokens.mean": (149, 0.5),
    "prefix_hit_token_frac_infinite": (0.651, 0.0005), "prefix_hit_request_mean_infinite": (0.432, 0.0005),
    "prefix_hit_lru.10000.token_frac": (0.431, 0.0005), "prefix_hit_lru.10000.request_mean": (0.291, 0.0005),
    "block_refs": (121_877, 0), "unique_blocks": (43_924, 0), "block_refs_seen_frac": (0.640, 0.0005),
}


def _get(stats: dict, dotted: str):
    for key in dotted.split("."):
        stats = stats[key]
    return stats


@pytest.mark.parametrize(("file", "targets"), [("mooncake_conversation_trace.jsonl.gz", CONVERSATION),
                                               ("mooncake_synthetic_trace.jsonl.gz", SYNTHETIC)])
def test_stats_reproduce_the_published_mooncake_figures(file, targets):
    stats = _stats(TRACES / file)
    for key in ("n_requests", "duration_s", "rate_rps", "iat_cv", "input_tokens", "output_tokens",
                "prefix_hit_token_frac_infinite"):
        assert key in stats
    misses = {k: _get(stats, k) for k, (target, tol) in targets.items() if abs(_get(stats, k) - target) > tol}
    assert not misses


def test_stats_table_is_readable():
    done = _cli("stats", "traces/mooncake_synthetic_trace.jsonl.gz")
    assert done.returncode == 0
    assert "prefix hit, unbounded cache" in done.stdout and "3,993" in done.stdout


def test_convert_round_trip(tmp_path):
    """jsonl.gz -> parquet -> jsonl gives back the original bytes."""
    source = TRACES / "mooncake_synthetic_trace.jsonl.gz"
    assert _cli("convert", str(source), str(tmp_path / "t.parquet")).returncode == 0
    assert _cli("convert", str(tmp_path / "t.parquet"), str(tmp_path / "t.jsonl")).returncode == 0
    assert (tmp_path / "t.jsonl").read_bytes() == gzip.decompress(source.read_bytes())
    done = _cli("convert", str(tmp_path / "t.parquet"), str(tmp_path / "t.csv"))
    assert done.returncode == 0 and "prefix sharing is lost" in done.stderr


def test_generate_is_seeded(tmp_path):
    args = ["workload=paper_lognormal", "workload.num_requests=500"]
    for name, seed in (("a", 7), ("b", 7), ("c", 8)):
        done = _cli("generate", str(tmp_path / f"{name}.parquet"), *args, f"workload.seed={seed}")
        assert done.returncode == 0, done.stderr
    a, b, c = ((tmp_path / f"{x}.parquet").read_bytes() for x in "abc")
    assert a == b and a != c
    stats = _stats(tmp_path / "a.parquet")
    assert stats["n_requests"] == 500 and stats["output_tokens"]["max"] == 1024


@pytest.mark.parametrize("args", [("stats", "no_such_file.jsonl"), ("stats", "README.md"),
                                  ("generate", "out.parquet", "workload=no_such_workload"),
                                  ("generate", "out.txt", "workload=fixed")])
def test_errors_exit_2_with_one_line(tmp_path, args):
    done = _cli(*args, cwd=tmp_path) if args[0] == "generate" else _cli(*args)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_trace_exits_2_naming_line_and_field(capsys, name):
    """Every bad input of tests/data/bad_traces through the CLI entry point: one line, status 2."""
    with pytest.raises(SystemExit) as exit_info:
        main(["stats", str(BAD_DIR / name)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    for text in BAD_INPUTS[name]:
        assert text in err


def test_bad_trace_subprocess_has_no_traceback():
    done = _cli("stats", str(BAD_DIR / "blocks.jsonl"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


@pytest.mark.parametrize("verb", ["stats", "convert", "generate"])
def test_help(verb):
    done = _cli(verb, "--help")
    assert done.returncode == 0 and "usage: harness-trace" in done.stdout


def _main(*args: str) -> int:
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    return int(exit_info.value.code or 0)


def test_csv_gz_round_trip(tmp_path, capsys):
    """jsonl -> csv.gz (a real gzip) -> stats and back to jsonl: the lengths and times come back."""
    source = tmp_path / "t.jsonl"
    source.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
                      '{"timestamp": 1500, "input_length": 100, "output_length": 7, "hash_ids": [3]}\n')
    assert _main("convert", str(source), str(tmp_path / "t.csv.gz")) == 0
    assert (tmp_path / "t.csv.gz").read_bytes()[:2] == b"\x1f\x8b"
    capsys.readouterr()
    assert _main("stats", str(tmp_path / "t.csv.gz"), "--json") == 0
    stats = json.loads(capsys.readouterr().out)
    assert (stats["n_requests"], stats["duration_s"], stats["input_tokens"]["max"]) == (2, 1.5, 600)
    assert _main("convert", str(tmp_path / "t.csv.gz"), str(tmp_path / "back.jsonl")) == 0
    back = [json.loads(line) for line in (tmp_path / "back.jsonl").read_text().splitlines()]
    assert [(r["timestamp"], r["input_length"], r["output_length"]) for r in back] == [(0, 600, 5), (1500, 100, 7)]


def test_convert_notes_rounding_only_when_times_change(tmp_path, capsys):
    """16.08 s * 1000 is not exactly 16080.0, yet 16080 ms reads back as 16.08 s: no false note."""
    source = tmp_path / "ms.jsonl"
    source.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
                      '{"timestamp": 16080, "input_length": 100, "output_length": 7, "hash_ids": [3]}\n')
    assert _main("convert", str(source), str(tmp_path / "ms2.jsonl")) == 0
    assert (tmp_path / "ms2.jsonl").read_bytes() == source.read_bytes()
    assert "rounded" not in capsys.readouterr().err
    (tmp_path / "fine.csv").write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n0,600,5\n16.0804,100,7\n")
    assert _main("convert", str(tmp_path / "fine.csv"), str(tmp_path / "fine.jsonl")) == 0
    assert "whole milliseconds; arrival times rounded" in capsys.readouterr().err
