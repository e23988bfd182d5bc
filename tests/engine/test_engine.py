"""The project's engine answers as the harness needs: token-id prompts, pinned output lengths,
server-side timings, and `mode=url` drives it end to end."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

import cli_zygote  # tools/cli_zygote.py, loaded by tests/conftest.py
import pandas as pd
import pytest

from harness.engine.server import get_json

from .conftest import BUILD_TIMEOUT, SLOTS

# The first test of a session may build the engine (~10-20 min on 2 cores) when `make engine` has not.
pytestmark = pytest.mark.timeout(BUILD_TIMEOUT)

ROOT = Path(__file__).resolve().parents[2]


def run_python(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return cli_zygote.run(list(args), cwd=ROOT, timeout=timeout)  # forked: see tools/cli_zygote.py


def post(url: str, body: dict, timeout_s: float = 60.0) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def test_token_id_completion_has_exactly_max_tokens_tokens(engine_url):
    prompt = list(range(1000, 1100))
    out = post(engine_url + "/v1/completions", {"prompt": prompt, "max_tokens": 17, "ignore_eos": True,
                                                 "cache_prompt": False, "temperature": 0})
    assert out["usage"]["completion_tokens"] == 17
    assert out["usage"]["prompt_tokens"] == len(prompt)  # token ids taken as given: no BOS added
    timings = out["timings"]
    assert timings["prompt_n"] == len(prompt) and timings["predicted_n"] == 17
    assert timings["prompt_ms"] > 0 and timings["predicted_ms"] > 0


def test_engine_reports_its_slot_count(engine_url):
    assert get_json(engine_url + "/props")["total_slots"] == SLOTS


def test_url_mode_drives_the_engine(engine_url, tmp_path):
    run_dir = tmp_path / "url"
    proc = run_python("-m", "harness", "mode=url", f"target.url={engine_url}", "workload=fixed",
                      "workload.num_requests=8", "workload.input_tokens=96", "workload.output_tokens=12",
                      "workload.block_tokens=32", "loadgen.rate_rps=4", "loadgen.progress=false",
                      "analysis.figures=false", f"hydra.run.dir={run_dir}", timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    df = pd.read_parquet(run_dir / "requests.parquet")
    assert len(df) == 8
    assert df["error"].isna().all(), df["error"].tolist()
    assert (df["output_tokens"] == 12).all()  # the server's usage count, pinned by max_tokens + ignore_eos
    assert (df["input_tokens"] == 96).all()
    assert (df["ttft_s"] > 0).all()
