"""`harness-load target.url=...` against `harness-serve server.time_scale=10`: the load generator
detects the scale and reports TTFTs on the emulated clock, equal to the server's own records (5%).

Without detection the client would report wall seconds, ten times too small. 32K-token prompts on
the homogeneous deployment make the TTFT ~5 s of emulated prefill, large beside the HTTP and loop
overhead, which the scale multiplies too (1 ms of wall-clock delay is 10 ms emulated; measured here:
the client ~0.1 s above the server, 2%, on a shared 2-core machine).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import numpy as np
import pandas as pd

from .cli import ROOT
from .cli import python as _python

WORKLOAD = ["deployment=homogeneous_pd", "workload=fixed", "workload.input_tokens=32768", "workload.output_tokens=8",
            "workload.num_requests=10", "loadgen.rate_rps=0.2", "loadgen.progress=false", "analysis.figures=false"]


def test_load_against_a_scaled_server_reports_the_servers_ttft(tmp_path):
    serve_dir, load_dir = tmp_path / "serve", tmp_path / "load"
    server = subprocess.Popen([sys.executable, "-m", "harness.serve", "server.port=0", "server.time_scale=10",
                               *WORKLOAD, f"hydra.run.dir={serve_dir}"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        match = re.fullmatch(r"listening on (http://127\.0\.0\.1:\d+)\n", line)
        assert match, line + (server.stderr.read() if server.poll() is not None else "")
        load = _python("-m", "harness.load", f"target.url={match.group(1)}", *WORKLOAD, "loadgen.status_every_s=1",
                       f"hydra.run.dir={load_dir}", timeout=300)
        assert load.returncode == 0, load.stderr[-2000:]
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=60)
    summary = json.loads((load_dir / "summary.json").read_text())
    assert summary["time_scale"] == 10.0 and summary["time_scale_source"] == "/health"
    client = pd.read_parquet(load_dir / "requests.parquet")
    served = pd.read_parquet(serve_dir / "requests.parquet")
    assert client["error"].isna().all() and len(client) == 10
    ours, theirs = client["ttft_s"].to_numpy(), served["ttft_s"].dropna().to_numpy()
    for q in (50, 90):
        a, b = np.percentile(ours, q), np.percentile(theirs, q)
        assert abs(a - b) <= 0.05 * b, (q, a, b)
    # the wall-clock view is kept too: ten times smaller
    assert np.allclose(client["ttft_wall_s"] * 10, client["ttft_s"])
    # each client row joins the server's record through the response id
    assert sorted(client["response_id"]) == sorted(f"cmpl-{i}" for i in served["request_id"])
    # no terminal here: the one-line status went to stderr (5 s of wall clock, one line a second)
    assert "load: t=" in load.stderr and "sent=" in load.stderr
