"""`harness-load target.url=...` against `harness-serve server.time_scale=10`: the load generator
detects the scale and reports TTFTs on the emulated clock, equal to the server's own records (5%,
plus whatever delay the two processes measured in their own loops, which the scale multiplies).

Without detection the client would report wall seconds, ten times too small. A run told another
scale (`target.time_scale=1`) than its responses announce is warned: one stderr line and
`time_scale_warning` in its summary. 32K-token prompts on
the homogeneous deployment make the TTFT ~5 s of emulated prefill, large beside the HTTP and loop
overhead, which the scale multiplies too (1 ms of wall-clock delay is 10 ms emulated; measured here:
the client ~0.1 s above the server, 2%, on a shared 2-core machine).
"""

from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def _serving(workload: list[str], run_dir):
    """`harness-serve` at time scale 10 on a free loopback port: its URL; SIGINT when done (it then
    writes its run directory)."""
    server = subprocess.Popen([sys.executable, "-m", "harness.serve", "server.port=0", "server.time_scale=10",
                               *workload, f"hydra.run.dir={run_dir}"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        match = re.fullmatch(r"listening on (http://127\.0\.0\.1:\d+)\n", line)
        assert match, line + (server.stderr.read() if server.poll() is not None else "")
        yield match.group(1)
    finally:
        server.send_signal(signal.SIGINT)
        server.communicate(timeout=60)


def test_load_against_a_scaled_server_reports_the_servers_ttft(tmp_path):
    serve_dir, load_dir = tmp_path / "serve", tmp_path / "load"
    with _serving(WORKLOAD, serve_dir) as url:
        load = _python("-m", "harness.load", f"target.url={url}", *WORKLOAD, "loadgen.status_every_s=1",
                       f"hydra.run.dir={load_dir}", timeout=300)
        assert load.returncode == 0, load.stderr[-2000:]
    summary = json.loads((load_dir / "summary.json").read_text())
    assert summary["time_scale"] == 10.0 and summary["time_scale_source"] == "/health"
    assert "time_scale_warning" not in summary and "warning: the server announced" not in load.stderr
    client = pd.read_parquet(load_dir / "requests.parquet")
    served = pd.read_parquet(serve_dir / "requests.parquet")
    assert client["error"].isna().all() and len(client) == 10
    ours, theirs = client["ttft_s"].to_numpy(), served["ttft_s"].dropna().to_numpy()
    # A busy host delays both loops: the client's measured loop lag and the server's timer lag (wall
    # ms, each run's own maximum) times the scale is delay the host added, not a scale error.
    served_summary = json.loads((serve_dir / "summary.json").read_text())
    host_delay_s = 10 * (summary["loadgen_loop_lag_max_ms"] + served_summary["server_lag_max_ms"]) / 1e3
    for q in (50, 90):
        a, b = np.percentile(ours, q), np.percentile(theirs, q)
        assert abs(a - b) <= 0.05 * b + host_delay_s, (q, a, b, host_delay_s)
    # the wall-clock view is kept too: ten times smaller
    assert np.allclose(client["ttft_wall_s"] * 10, client["ttft_s"])
    # each client row joins the server's record through the response id
    assert sorted(client["response_id"]) == sorted(f"cmpl-{i}" for i in served["request_id"])
    # no terminal here: the one-line status went to stderr (5 s of wall clock, one line a second)
    assert "load: t=" in load.stderr and "sent=" in load.stderr


TINY = ["deployment=homogeneous_pd", "workload=fixed", "workload.input_tokens=1024", "workload.output_tokens=2",
        "workload.num_requests=2", "loadgen.rate_rps=10", "loadgen.progress=false", "analysis.figures=false"]


def test_a_run_on_another_scale_than_the_server_announces_is_warned(tmp_path):
    """README "Time scale": `target.time_scale=1` against a server at 10. The run uses the scale it was
    told (its latencies stay on the wall clock), says so on one stderr line and in the summary, and
    completes (exit 0): the warning is not an error."""
    serve_dir, load_dir = tmp_path / "serve", tmp_path / "load"
    with _serving(TINY, serve_dir) as url:
        load = _python("-m", "harness.load", f"target.url={url}", "target.time_scale=1", *TINY,
                       f"hydra.run.dir={load_dir}", timeout=120)
        assert load.returncode == 0, load.stderr[-2000:]
    expected = ("the server announced time scale 10 but the run used 1 (target.time_scale): "
                "latencies are on the wrong clock")
    warnings = [w for w in load.stderr.splitlines() if "announced time scale" in w]
    assert warnings == [f"warning: {expected}"], load.stderr[-2000:]
    summary = json.loads((load_dir / "summary.json").read_text())
    assert summary["time_scale"] == 1.0 and summary["time_scale_source"] != "/health"
    assert summary["time_scale_warning"] == expected and summary["completed"] == 2
