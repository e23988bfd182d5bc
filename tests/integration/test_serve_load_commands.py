"""`harness-serve` (prints its URL, serves until SIGINT, then writes what it served) driven by
`harness-load target.url=...` and the openai SDK, in subprocesses; and Ctrl-C during a live run.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest

from .cli import ROOT, SMALL
from .cli import python as _python


def test_serve_then_load_against_its_url(tmp_path):
    serve_dir, load_dir = tmp_path / "serve", tmp_path / "load"
    server = subprocess.Popen([sys.executable, "-m", "harness.serve", "server.port=0", "server.time_scale=20",
                               *SMALL, f"hydra.run.dir={serve_dir}"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        match = re.fullmatch(r"listening on (http://127\.0\.0\.1:\d+)\n", line)
        assert match, line + server.stderr.read() if server.poll() is not None else line
        url = match.group(1)
        load = _python("-m", "harness.load", f"target.url={url}", *SMALL, f"hydra.run.dir={load_dir}")
        assert load.returncode == 0, load.stderr[-2000:]
        assert "loadgen_valid=" in load.stdout
        summary = json.loads((load_dir / "summary.json").read_text())
        assert summary["mode"] == "url" and summary["completed"] == 30 and summary["deployment"] == "url:internal_1t"
        df = pd.read_parquet(load_dir / "requests.parquet")
        assert df["usage_reported"].all() and (df["output_tokens"] == 32).all()
        openai = pytest.importorskip("openai")
        with openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=30) as client:
            out = client.completions.create(model="internal_1t", prompt="one more", max_tokens=3)
            streamed = list(client.chat.completions.create(model="internal_1t", max_tokens=2, stream=True,
                                                           messages=[{"role": "user", "content": "hi"}]))
        assert out.usage.completion_tokens == 3 and streamed[-1].choices[0].finish_reason == "length"
    finally:
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=60)
    assert server.returncode == 0, err[-2000:]
    assert "served 32 requests" in out
    served = pd.read_parquet(serve_dir / "requests.parquet")
    assert len(served) == 32 and served["error"].isna().all()


def _completed_on_disk(run_dir, proc, n: int, deadline_s: float = 120.0) -> int:
    """Poll (with a deadline) until the run's parts hold `n` completed requests; how many they hold."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        assert proc.poll() is None, f"exited early ({proc.returncode}): {proc.stderr.read()[-2000:]}"
        parts = sorted((run_dir / "requests.parquet.parts").glob("part-*.parquet"))
        done = sum(int(pd.read_parquet(p, columns=["error"])["error"].isna().sum()) for p in parts)
        if done >= n:
            return done
        time.sleep(0.1)
    pytest.fail(f"{n} completed requests never reached {run_dir / 'requests.parquet.parts'} in {deadline_s:.0f} s")


def test_sigint_midway_keeps_every_sent_request(tmp_path):
    """Ctrl-C during a live run: the run stops, each request sent so far is a row (the unfinished
    ones marked interrupted), the directory is written, and the exit status is 130.

    The signal goes once 21 requests have completed (polled on the run's parts, flushed every 0.1 s),
    not after a fixed sleep: how much a busy machine does in a given time varies. The open loop
    keeps sending at 20 req/s while each request takes seconds of run clock (4096-token prefill, 100
    tokens decoded), so requests are in flight whenever the signal lands."""
    run_dir = tmp_path / "stopped"
    proc = subprocess.Popen([sys.executable, "-m", "harness", "mode=live", "server.time_scale=5",
                             "workload=fixed", "workload.input_tokens=4096", "workload.output_tokens=100",
                             "workload.num_requests=100000", "loadgen.rate_rps=20", "loadgen.progress=false",
                             "recording.flush_s=0.1", "analysis.figures=false", f"hydra.run.dir={run_dir}"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert "listening on" in proc.stderr.readline()
        on_disk = _completed_on_disk(run_dir, proc, 21)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in out
    df = pd.read_parquet(run_dir / "requests.parquet")
    assert 20 < len(df) < 100000
    assert df["error"].isna().sum() >= on_disk  # nothing on disk before the signal was lost
    assert df["error"].fillna("").str.startswith("interrupted").any() and df["error"].isna().any()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["n_requests"] == len(df)
