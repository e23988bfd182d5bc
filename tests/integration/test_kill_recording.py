"""Nothing lost to a kill: SIGKILL a live run, a url run and `harness-serve` midway; every request
that finished before the kill is on disk exactly once, and `harness-report` reads the run.

The workload is a trace of 20 short requests followed by one due in a thousand hours, so each run
stays up, idle, after its 20 requests end. Each test waits (polling, with a deadline) until the
20 records are on disk: with `recording.flush_s=0.2` and the count threshold far away, only the
time-bounded flush can put them there. Then it kills the process with SIGKILL (no chance to write
anything more) and reads what is left.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from .cli import ROOT
from .cli import python as _python

N = 20
PARTS = "requests.parquet.parts"


def _trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.jsonl"
    rows = [{"timestamp": 50 * i, "input_length": 1024, "output_length": 8, "hash_ids": [2 * i, 2 * i + 1]}
            for i in range(N)]
    rows.append({"timestamp": 3_600_000_000, "input_length": 1024, "output_length": 8, "hash_ids": [999, 1000]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _workload(tmp_path: Path) -> list[str]:
    return ["workload=mooncake_conversation", f"workload.path={_trace(tmp_path)}", "workload.name=kill_trace",
            "workload.arrivals.spread_ticks_s=null", "recording.flush_s=0.2", "loadgen.progress=false",
            "analysis.figures=false", "server.time_scale=5"]


def _read_parts(run_dir: Path) -> pd.DataFrame | None:
    parts = sorted((run_dir / PARTS).glob("part-*.parquet"))
    return pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True) if parts else None


def _wait_for_rows(run_dir: Path, n: int, proc: subprocess.Popen, deadline_s: float = 120.0) -> pd.DataFrame:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        assert proc.poll() is None, f"exited early ({proc.returncode}): {proc.stderr.read()[-2000:]}"
        df = _read_parts(run_dir)
        if df is not None and len(df) >= n:
            return df
        time.sleep(0.1)
    pytest.fail(f"{n} records never reached {run_dir / PARTS} within {deadline_s:.0f} s")


def _kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def _cleanup(proc: subprocess.Popen | None) -> None:
    if proc is None:
        return
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=30)  # reaps it and closes its pipes


def _popen(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _assert_recorded_once(run_dir: Path, ids: set) -> pd.DataFrame:
    assert not (run_dir / "summary.parquet").exists()
    df = _read_parts(run_dir)
    assert df is not None and len(df) == len(ids), len(df) if df is not None else None
    assert df["error"].isna().all()
    return df


def _assert_report_reads(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / f"report_{run_dir.name}"
    report = _python("-m", "harness.report", str(run_dir), "--no-figures", "--out", str(out))
    assert report.returncode == 0, report.stderr[-2000:]
    assert "incomplete run" in report.stdout and str(run_dir) in report.stdout
    row = pd.read_parquet(out / "report.parquet").iloc[0]
    assert bool(row["incomplete"]) and row["completed"] == N and row["n_requests"] == N


def test_sigkill_live_run_keeps_every_finished_request(tmp_path):
    run_dir = tmp_path / "live"
    proc = _popen("-m", "harness", "mode=live", *_workload(tmp_path), f"hydra.run.dir={run_dir}")
    try:
        _wait_for_rows(run_dir, N, proc)
        _kill(proc)
    finally:
        _cleanup(proc)
    df = _assert_recorded_once(run_dir, set(range(N)))
    assert sorted(df["request_id"]) == list(range(N)) and (df["mode"] == "live").all()
    assert (df["output_tokens"] == 8).all() and (df["ttft_s"] > 0).all()
    _assert_report_reads(run_dir, tmp_path)


def test_sigkill_url_run_and_the_server_it_drives(tmp_path):
    serve_dir, url_dir = tmp_path / "serve", tmp_path / "url"
    server = _popen("-m", "harness.serve", "server.port=0", *_workload(tmp_path), f"hydra.run.dir={serve_dir}")
    load = None
    try:
        line = server.stdout.readline()
        match = re.fullmatch(r"listening on (http://127\.0\.0\.1:\d+)\n", line)
        assert match, line + (server.stderr.read() if server.poll() is not None else "")
        load = _popen("-m", "harness", "mode=url", f"target.url={match.group(1)}", *_workload(tmp_path),
                      f"hydra.run.dir={url_dir}")
        _wait_for_rows(url_dir, N, load)
        _kill(load)
        _wait_for_rows(serve_dir, N, server)  # the server's own record of each request it served
        _kill(server)
    finally:
        _cleanup(load)
        _cleanup(server)
    client = _assert_recorded_once(url_dir, set(range(N)))
    assert sorted(client["request_id"]) == list(range(N)) and (client["mode"] == "url").all()
    served = _assert_recorded_once(serve_dir, set(range(N)))
    # Each served record names the client's request (X-Request-Id): the same 20, once each.
    assert sorted(served["client_id"].astype(int)) == list(range(N))
    _assert_report_reads(url_dir, tmp_path)
    _assert_report_reads(serve_dir, tmp_path)
