"""A Ray instance the harness starts for a sweep (`hydra.launcher.ray.init.address=null`) lets no one in
without the sweep's token: Ray's servers listen on every interface whatever ray.init is told (measured here:
`ss` shows GCS, raylet, agents and workers on `*`), so each gRPC server of Ray's that listens beyond loopback
is asked, while the sweep runs, for its node list without a token: it must refuse (UNAUTHENTICATED).
Before: no token was required (conf/hydra/launcher/ray_cluster.yaml, docs/guides/ray-security.md)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

if importlib.util.find_spec("ray") is None or importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is None:
    pytest.skip("the ray extra is not installed (pip install -e '.[test,ray]')", allow_module_level=True)
if shutil.which("ss") is None:
    pytest.skip("needs `ss` (iproute2) to list listening sockets", allow_module_level=True)

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
SWEEP = ["-m", "hydra/launcher=ray_cluster", "hydra.launcher.ray.init.address=null",
         "+hydra.launcher.ray.init.num_cpus=1", "experiment=threshold_sweep",
         "deployment.router.threshold_tokens=5000,20000", "workload.num_requests=20", "analysis.figures=false",
         "loadgen.progress=false", "+hydra.callbacks.plan.kv_table=false"]
LOOPBACK = re.compile(r"^(127\.\d+\.\d+\.\d+|\[::1\]|::1|\[::ffff:127\.\d+\.\d+\.\d+\]):\d+$")


def _descendants(root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        found.add(pid)
        todo.extend(children.get(pid, ()))
    return found


def _listeners(pids: set[int]) -> set[tuple[str, str]]:
    """(local address, process name) of every listening TCP socket owned by one of `pids`."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=False).stdout
    found = set()
    for line in out.splitlines():
        fields = line.split()
        for name, pid in re.findall(r'\("([^"]+)",pid=(\d+)', line):
            if int(pid) in pids:
                found.add((fields[3], name))
    return found


def _refuses_without_token(port: int) -> bool:
    """Whether the gRPC server at 127.0.0.1:`port` refuses a call that carries no token."""
    import grpc
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetAllNodeInfo(
                gcs_service_pb2.GetAllNodeInfoRequest(), timeout=10)
        except grpc.RpcError as err:
            return err.code() == grpc.StatusCode.UNAUTHENTICATED
    return False


def test_a_private_ray_instance_refuses_connections_without_the_token(tmp_path):
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_raylet_start_wait_time_s": "300"}
    env.pop("RAY_AUTH_MODE", None)
    env.pop("RAY_AUTH_TOKEN", None)
    proc = subprocess.Popen([sys.executable, "-m", "harness", *SWEEP, f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: set[tuple[str, str]] = set()
    checked: dict[str, bool] = {}
    deadline = time.monotonic() + 800
    while proc.poll() is None and time.monotonic() < deadline:  # a hang guard, not a timing assert
        seen |= _listeners(_descendants(proc.pid))
        for addr, name in seen:
            if name == "gcs_server" and not LOOPBACK.match(addr) and addr not in checked:
                checked[addr] = _refuses_without_token(int(addr.rsplit(":", 1)[1]))
        time.sleep(0.2)
    if proc.poll() is None:
        proc.kill()
    output = proc.communicate()[0]
    assert proc.returncode == 0, output[-3000:]
    assert any(name in {"gcs_server", "raylet"} for _, name in seen), seen  # Ray's own servers were sampled
    assert checked and all(checked.values()), (checked, seen)
