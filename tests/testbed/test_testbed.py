"""The PD testbed on real namespaces, a real tbf link and real agents (fake engines: tests/testbed/fake_engine.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from harness.cli import with_testbed_preset
from harness.schema import register_configs
from harness.testbed import netns, state
from harness.testbed.cluster import Testbed as Bed
from harness.testbed.settings import Layout
from harness.testbed.settings import TestbedSettings as Settings

pytestmark = pytest.mark.testbed
CONF = str(Path(__file__).resolve().parents[2] / "conf")
HEADER, PER_TOKEN = 200, 9232  # the slot file of L tokens: 200 + 9,232 L bytes (the real engine's too)


def _compose(overrides: list[str]):
    register_configs()
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return compose("config", overrides=with_testbed_preset(["mode=testbed", *overrides]))


def _left(prefix: str) -> list[str]:
    return [ns for ns in netns.list_namespaces() if ns.startswith(prefix)]


def test_up_then_down_leaves_no_namespace_veth_process_or_file(fake_engine, tmp_path):
    bed = Bed(Settings(**fake_engine, slots=2), Layout("prfaas_pd", True, True), 0.2, tmp_path / "logs")
    with bed:
        prefix, pids = bed.prefix, [p.process.pid for p in bed.processes]
        assert sorted(_left(prefix)) == [f"{prefix}-local", f"{prefix}-remote"]
        assert state.owner(prefix) == os.getpid()
    assert _left(prefix) == [] and not state.state_path(prefix).exists() and not bed.slot_dir.exists()
    assert netns.sh("ip", "link", "show", f"{prefix}-cr", check=False).returncode != 0
    assert all(not Path(f"/proc/{pid}").exists() for pid in pids)


def test_agent_moves_a_file_byte_exact_across_the_shaped_link(fake_engine, tmp_path):
    """18.9 MB (a 2,048-token KV) arrives identical, no faster than tbf allows, and the veth counted it."""
    bed = Bed(Settings(**fake_engine, slots=1), Layout("naive_hetero", True, False), 0.2, tmp_path / "logs")
    with bed:
        topo, s = bed.topology, bed.settings
        blob = os.urandom(HEADER + PER_TOKEN * 2048)
        src = bed.engines["remote_prefill"].slot_dir / "kv.bin"
        src.write_bytes(blob)
        tx0 = netns.tx_bytes(topo)
        body = {"path": str(src), "host": topo.local_link_addr, "port": s.agent_data_port, "name": "kv.bin"}
        req = urllib.request.Request(bed.agents["remote"].url + "/send", data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            out = json.loads(resp.read())
        moved = netns.tx_bytes(topo) - tx0
        assert (bed.engines["decode"].slot_dir / "kv.bin").read_bytes() == blob
        assert out["bytes"] == len(blob) and moved >= len(blob)
        assert out["seconds"] >= (len(blob) - s.tbf_burst_bytes) * 8 / 0.2e9  # the shaper's floor, not a timing guess
        assert not src.exists()  # spent once it crossed


@pytest.mark.parametrize(("deployment", "routes"), [
    ("homogeneous_pd", {"local"}), ("naive_hetero", {"prfaas"}), ("prfaas_pd", {"local", "prfaas"})])
def test_a_run_through_each_deployment_records_every_request_once(fake_engine, tmp_path, deployment, routes):
    from harness.runs.assemble import run_into

    before = netns.testbed_prefixes()
    cfg = _compose([f"deployment={deployment}", "workload.num_requests=6", "loadgen.rate_rps=4",
                    "analysis.figures=false", *(f"testbed.{k}={v}" for k, v in fake_engine.items())])
    summary = run_into(cfg, tmp_path / "run")
    req = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert len(req) == 6 and req["request_id"].is_unique and req["error"].isna().all()
    assert set(req["route"]) == routes and summary["mode"] == "testbed" and summary["completed"] == 6
    assert (req["kv_bytes_sent"] == HEADER + PER_TOKEN * req["input_tokens"]).all()
    for col in ("kv_save_s", "kv_transfer_s", "kv_restore_s"):
        assert (req[col] > 0).all()
    ts = pd.read_parquet(tmp_path / "run" / "timeseries.parquet")
    if "prfaas" in routes:
        sent = req.loc[req["route"] == "prfaas", "kv_bytes_sent"].sum()
        on_wire = (ts["egress_gbps"].fillna(0) * ts["bin_s"]).sum() * 1e9 / 8
        assert on_wire == pytest.approx(sent, rel=0.05)  # the counters saw the KV (headers ~0.1%, samples' edges)
    else:
        assert (ts["egress_gbps"] == 0).all()
    assert netns.testbed_prefixes() <= before  # torn down


def _harness_testbed(*args: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness.testbed.cli", *args], check=False, capture_output=True,
                          text=True, timeout=120, **kw)


def test_kill_9_of_the_owner_then_the_next_start_clears_it(fake_engine):
    sets = [f"testbed.{k}={v}" for k, v in fake_engine.items()]
    proc = subprocess.Popen([sys.executable, "-m", "harness.testbed.cli", "up", *sets], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        mine = [p for p in state.known_prefixes() if (state.read(p) or {}).get("pid") == proc.pid]
        assert len(mine) == 1
        prefix = mine[0]
        children = netns.sh("ip", "netns", "pids", f"{prefix}-local").stdout.split()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(Path(f"/proc/{pid}").exists() for pid in children)  # they died with their owner
    assert _left(prefix)  # the namespaces outlive a kill -9 ...
    assert prefix in state.clear_leftovers()  # ... until the next start (or `down`) clears them
    assert _left(prefix) == [] and not state.state_path(prefix).exists()


@pytest.mark.parametrize(("args", "needle"), [
    (["link.capacity_gbps=0"], "link.capacity_gbps=0"),
    (["testbed.engine_binary=/nonexistent/llama-server"], "make engine"),
    (["testbed.tbf_burst_bytes=1000", "link.capacity_gbps=1"], "testbed.tbf_burst_bytes=1000"),
    (["testbed.prefix=bad"], "testbed.prefix"),
    (["testbed.nope=1"], "testbed.nope")])
def test_bad_input_is_one_line_and_exit_2(args, needle):
    done = _harness_testbed("up", *args)
    assert done.returncode == 2, done.stderr
    assert needle in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_not_root_is_one_line_and_exit_2():
    if subprocess.run(["setpriv", "--help"], check=False, capture_output=True).returncode != 0:
        pytest.skip("needs util-linux setpriv")
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m",
                           "harness.testbed.cli", "up"], check=False, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PRFAAS_CACHE": "/tmp/prfaas-testbed-nobody"})
    assert done.returncode == 2 and "needs root" in done.stderr, done.stderr


def test_link_down_and_a_killed_prefill_engine_leave_one_record_per_request(fake_engine, tmp_path):
    """Requests caught by the outage or the dead engine are recomputed locally or fail with a reason."""
    from harness.runs.assemble import run_into

    before = netns.testbed_prefixes()
    faults = "[{kind: link_down, at_s: 1, duration_s: 2}, {kind: kill_engine, at_s: 3, instance: remote_prefill}]"
    cfg = _compose(["deployment=prfaas_pd", "workload.num_requests=16", "loadgen.rate_rps=3", "analysis.figures=false",
                    f"testbed.faults={faults}", *(f"testbed.{k}={v}" for k, v in fake_engine.items())])
    summary = run_into(cfg, tmp_path / "run")
    req = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    assert len(req) == 16 and req["request_id"].is_unique
    assert summary["completed"] + summary["failed"] == 16
    assert req["recomputed"].notna().any()  # the dead engine's requests went local
    assert (req.loc[req["error"].notna(), "error"].str.len() > 0).all()
    assert netns.testbed_prefixes() <= before


def test_real_engines_hand_off_a_kv_cache_the_decode_engine_reuses(tmp_path):
    """`make testbed`'s self-check on llama-server: both routes, a KV file of 9,232 B/token, and a decode
    that computed one token after the restore (cache_n = L - 1)."""
    from harness.engine.build import LLAMA_CPP_PYTHON, cache_root
    from harness.testbed.check import run_check

    if not (cache_root() / f"llama-cpp-python-{LLAMA_CPP_PYTHON}" / "bin" / "llama-server").is_file():
        pytest.skip("needs the real engine: make engine")
    assert run_check(_compose(["deployment=prfaas_pd"]), tmp_path) == []
