"""The project's engine answers as the harness needs: token-id prompts, pinned output lengths,
server-side timings, and `mode=url` drives it end to end."""

from __future__ import annotations

import json
import subprocess
import urllib.request
from pathlib import Path

import commands  # tests/commands.py
import pandas as pd
import pytest

from harness.engine.server import get_json

from .conftest import BUILD_TIMEOUT, SLOTS

# The first test of a session may build the engine (~10-20 min on 2 cores) when `make engine` has not.
pytestmark = [pytest.mark.engine, pytest.mark.timeout(BUILD_TIMEOUT)]

ROOT = Path(__file__).resolve().parents[2]


def run_python(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return commands.run(list(args), cwd=ROOT, timeout=timeout)


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


def test_reset_slots_leaves_the_engine_taking_slots_as_the_emulator_does(engine_server):
    """After `probes.reset_slots` (one pinned request per slot, highest first) unpinned requests take the
    slots least recently used first, 3, 2, 1, 0, as a fresh `SlotTable` does, whatever ran before."""
    import asyncio
    import re

    from hydra import compose, initialize_config_dir

    from harness.schema import register_configs
    from harness.validation.probes import ProbeRound, reset_slots

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose("config", overrides=[f"target.url={engine_server.url}", "target.keep_alive=false"])
    target, loadgen = cfg.target, cfg.loadgen
    reset_slots(engine_server.url, target, loadgen, slots=4, seed=3)
    before = len(re.findall(r"selected slot by LRU", engine_server.log.read_text(errors="replace")))

    async def four():
        p = ProbeRound(engine_server.url, target, loadgen, 512, 11)
        return await p.send([p.fresh(i, 0.05 * i, 64, 24) for i in range(4)], one_at_a_time=False)

    rows = asyncio.run(four())
    assert all(r.get("error") is None for r in rows)
    picks = [int(m.group(1)) for m in re.finditer(r"id +(\d+) \| task -?\d+ \| selected slot by LRU",
                                                  engine_server.log.read_text(errors="replace"))]
    assert picks[before:] == [3, 2, 1, 0]
