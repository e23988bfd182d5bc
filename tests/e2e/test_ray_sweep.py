"""Sweeps on a real Ray cluster: a local head (`ray start --head`, 2 CPUs) joined by address through
`hydra/launcher=ray_cluster`. The Ray sweep's report equals the same sweep's under the basic launcher
(sim mode is deterministic), the jobs run in Ray workers while the plan and report callbacks run once
in the driver, and a sweep whose driver is killed midway leaves its finished runs reportable.

Needs the `ray` extra (`pip install -e '.[test,ray]'`, which `make test` installs); skipped without it.
The cluster lives in its own process group and is killed in a `finally`, whatever the tests do.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import commands  # tests/commands.py
import pandas as pd
import pytest
from hydra.experimental.callback import Callback

from harness.analysis.callback import ReportCallback
from harness.plan import PlanCallback

if importlib.util.find_spec("ray") is None or importlib.util.find_spec("hydra_plugins.hydra_ray_launcher") is None:
    pytest.skip("the ray extra is not installed (pip install -e '.[test,ray]')", allow_module_level=True)

pytestmark = [pytest.mark.ray, pytest.mark.timeout(480)]

ROOT = Path(__file__).resolve().parents[2]
# Three jobs on the head's two CPUs: the third starts only once a worker is free, so it would reuse that
# worker without max_calls=1 (checked: with max_calls=0 the log shows 2 worker pids, not 3).
THRESHOLDS = [5000, 20000, 80000]
SWEEP = ["experiment=threshold_sweep", f"deployment.router.threshold_tokens={','.join(map(str, THRESHOLDS))}",
         "workload.num_requests=50", "analysis.figures=false", "loadgen.progress=false",
         "+hydra.callbacks.plan.kv_table=false"]
PATH_COLUMNS = ["run_dir"]  # where the sweep was written: differs by construction


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGKILL the head's process group: raylet, GCS and the workers all live in that one group.

    Not SIGTERM first: `ray start --block` answers it by draining the node for up to 30 s before it
    stops anything (measured here: the whole group still up 20 s later), so a grace period only waited
    for the SIGKILL that followed it. The cluster's files go with its temp dir."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


@contextlib.contextmanager
def local_ray_head(num_cpus: int = 2, start_timeout_s: float = 120.0) -> Iterator[tuple[str, dict[str, str], int]]:
    """A private Ray head on this machine: yields (address, env for drivers, the head's process group).

    Ray binds its ports on every interface (it will not bind loopback only), so the cluster requires a
    random token (RAY_AUTH_MODE=token): only processes given `env` can join or submit work."""
    ray_cli = Path(sys.executable).with_name("ray")
    if not ray_cli.exists():
        pytest.skip(f"no ray command beside {sys.executable}")
    temp = tempfile.mkdtemp(prefix="prfaas-ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    port = _free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16),
           "RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0"}
    log = Path(temp) / "head.log"
    # --no-monitor: no autoscaler monitor (a fixed one-node cluster has nothing to scale; ~0.5 s of CPU).
    cmd = [str(ray_cli), "start", "--head", "--block", f"--num-cpus={num_cpus}", f"--port={port}",
           f"--ray-client-server-port={_free_port()}", f"--dashboard-agent-listen-port={_free_port()}",
           "--include-dashboard=false", "--disable-usage-stats", "--no-monitor", f"--temp-dir={temp}"]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + start_timeout_s
        while "Ray runtime started" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ray start --head did not come up (exit {proc.poll()}):\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
        yield f"127.0.0.1:{port}", env, proc.pid
    finally:
        _stop_group(proc)
        shutil.rmtree(temp, ignore_errors=True)


def _harness(args: list[str], env: dict[str, str], timeout_s: float = 300.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", "-m", *args], cwd=ROOT, env=env, check=False,
                          capture_output=True, text=True, timeout=timeout_s)


@pytest.fixture(scope="module")
def basic_sweep_started(tmp_path_factory) -> Iterator[tuple[Path, threading.Thread, dict]]:
    """The same sweep under the basic launcher, started first: it runs while the Ray head boots. A new
    process waited on from a thread, so the head starts meanwhile; killed at the timeout, so the thread
    always ends."""
    out = tmp_path_factory.mktemp("basic") / "sweep"
    result: dict = {}

    def run() -> None:
        try:
            result["proc"] = commands.run(["-m", "harness", "-m", *SWEEP, "hydra/launcher=basic",
                                          f"hydra.sweep.dir={out}"], cwd=ROOT, timeout=300, new_process=True)
        except BaseException as exc:  # reported by basic_sweep
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield out, thread, result
    finally:
        thread.join(timeout=330)


@pytest.fixture(scope="module")
def ray_head(basic_sweep_started) -> Iterator[tuple[str, dict[str, str], int]]:
    with local_ray_head() as head:
        yield head


@pytest.fixture(scope="module")
def ray_sweep(ray_head, tmp_path_factory):
    address, env, _ = ray_head
    out = tmp_path_factory.mktemp("ray") / "sweep"
    proc = _harness([*SWEEP, "hydra/launcher=ray_cluster", f"hydra.launcher.ray.init.address={address}",
                     f"hydra.sweep.dir={out}"], env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def basic_sweep(basic_sweep_started):
    out, thread, result = basic_sweep_started
    thread.join(timeout=330)
    if "error" in result:
        raise result["error"]
    assert "proc" in result, "the basic sweep did not end"
    proc = result["proc"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def _report(sweep_dir: Path) -> pd.DataFrame:
    frame = pd.read_parquet(sweep_dir / "report.parquet")
    return frame.drop(columns=PATH_COLUMNS).sort_values("run_name").reset_index(drop=True)


def test_ray_sweep_report_equals_the_basic_launchers(ray_sweep, basic_sweep):
    ray_dir, _ = ray_sweep
    on_ray, local = _report(ray_dir), _report(basic_sweep)
    assert sorted(on_ray["deployment.router.threshold_tokens"]) == THRESHOLDS
    assert (on_ray["completed"] == 50).all()
    assert on_ray["throughput_rps"].nunique() == len(THRESHOLDS)  # the sweep really varied something
    # Equal to the bit, the planner's columns too: its mean length no longer depends on how many BLAS
    # threads the process runs (Ray's workers one, OMP_NUM_THREADS=1; a command one by default).
    pd.testing.assert_frame_equal(on_ray, local, check_exact=True)
    for name in on_ray["run_name"]:  # the same run directories, request for request
        pd.testing.assert_frame_equal(pd.read_parquet(ray_dir / name / "requests.parquet"),
                                      pd.read_parquet(basic_sweep / name / "requests.parquet"), check_exact=True)
        pd.testing.assert_frame_equal(pd.read_parquet(ray_dir / name / "summary.parquet"),
                                      pd.read_parquet(basic_sweep / name / "summary.parquet"), check_exact=True)
        assert (ray_dir / name / ".hydra" / "overrides.yaml").is_file()


def test_jobs_run_in_ray_workers_and_the_callbacks_once_in_the_driver(ray_sweep):
    out, log = ray_sweep
    assert f"Ray Launcher is launching {len(THRESHOLDS)} jobs" in log and "Connected to Ray cluster" in log
    workers = set(re.findall(r"\(_run_job pid=(\d+)\)", log))
    assert len(workers) == len(THRESHOLDS)  # max_calls=1: a fresh Ray worker process per job
    for marker in ("planner: wrote", "report: "):
        lines = [line for line in log.splitlines() if marker in line]
        assert len(lines) == 1, (marker, lines)
        assert "_run_job" not in lines[0]  # printed by the driver, not forwarded from a worker
    assert (out / "plan.json").is_file() and (out / "plan_sweep_threshold.parquet").is_file()
    assert (out / "multirun.yaml").is_file()


def test_the_sweep_callbacks_have_no_per_job_hooks():
    """Hydra calls on_job_start/on_job_end inside each Ray worker: the sweep callbacks must not use them."""
    for cls in (PlanCallback, ReportCallback):
        for hook in ("on_job_start", "on_job_end", "on_run_start", "on_run_end"):
            assert getattr(cls, hook) is getattr(Callback, hook), (cls.__name__, hook)


def _ray_workers(pgid: int) -> dict[int, bytes]:
    """Ray worker processes of the head's group (pid -> command line: `ray::IDLE`, `ray::_run_job`, or the
    worker script while it starts)."""
    workers = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if os.getpgid(int(proc.name)) != pgid:
                continue
            cmdline = (proc / "cmdline").read_bytes()
        except (OSError, ProcessLookupError):
            continue
        if cmdline.startswith(b"ray::") or b"default_worker.py" in cmdline:
            workers[int(proc.name)] = cmdline
    return workers


def test_a_ray_sweep_killed_midway_leaves_its_finished_runs_reportable(ray_head, tmp_path):
    address, env, pgid = ray_head
    out = tmp_path / "killed"
    # Two jobs at once on the head's two CPUs: a short run, and one whose 100,000 requests take ~5 s of CPU
    # more (measured alone here), still running when the driver is killed right after the short one ends.
    args = [
        "experiment=threshold_sweep",
        "deployment.router.threshold_tokens=10000",
        "workload.num_requests=150,100000",
        "analysis.figures=false",
        "loadgen.progress=false",
        "+hydra.callbacks.plan.kv_table=false",
        "hydra/launcher=ray_cluster",
        f"hydra.launcher.ray.init.address={address}",
        f"hydra.sweep.dir={out}",
    ]
    before = set(_ray_workers(pgid))  # the head's workers from earlier sweeps (none of this one's)
    driver = subprocess.Popen([sys.executable, "-m", "harness", "-m", *args], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not list(out.glob("*/summary.parquet")):
            assert driver.poll() is None, f"the sweep ended (exit {driver.returncode}) before it could be killed"
            assert time.monotonic() < deadline, "no run finished in time"
            time.sleep(0.2)
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
    # Ray ends a dead driver's workers (each job has its own: max_calls=1); wait until every worker started for
    # this sweep is gone before counting, so no job (one still starting when the driver died included) can
    # finish after the count. Waiting on `ray::_run_job` titles alone missed a worker handed its job as the
    # driver died, before it took that title (it finished after the count: 1 run in ~7 full suites).
    deadline = time.monotonic() + 60
    while (left := set(_ray_workers(pgid)) - before) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"Ray workers of the killed sweep still alive after 60 s: {sorted(left)}"
    done = sorted(p.parent.name for p in out.glob("*/summary.parquet"))
    assert len(done) == 1 and done[0].endswith("workload.num_requests=150")  # the long run never finished
    assert not (out / "report.parquet").exists()  # the report callback never ran
    proc = commands.run(["-m", "harness.report", str(out), "--no-figures"], cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = pd.read_parquet(out / "report.parquet")
    finished = report[~report["incomplete"].astype(bool)]  # a run killed mid-way is reported, marked incomplete
    assert sorted(finished["run_name"]) == done
    assert (finished["completed"] == 150).all()
    for name in done:
        assert len(pd.read_parquet(out / name / "requests.parquet")) == 150
