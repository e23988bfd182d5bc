"""Start and stop llama-server on a free loopback port (the test fixture and `harness-profile` share it)."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

HOST = "127.0.0.1"


@dataclass
class EngineServer:
    """A running llama-server: its URL, its process and where it logs."""

    url: str
    process: subprocess.Popen
    log: Path
    args: list[str] = field(default_factory=list)

    def stop(self, grace_s: float = 10.0) -> None:
        stop_process(self.process, grace_s)

    def __enter__(self) -> EngineServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def stop_process(process: subprocess.Popen, grace_s: float = 10.0) -> None:
    """Terminate, then kill if it has not exited within grace_s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(grace_s)


def set_niceness(nice: int, key: str) -> dict[str, int]:
    """Run this process (and every process it starts from now on) at niceness `nice`.

    On a shared machine a measured engine and its load generator at -10 keep their CPU share
    when other work is runnable. Raises InputError (one line) when not permitted."""
    import os

    from harness.errors import InputError

    before = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except (PermissionError, OSError) as err:
        raise InputError(f"{key}={nice}: cannot set this process's niceness ({err.strerror or err}); "
                         f"a negative value needs root (CAP_SYS_NICE), or set {key}=null") from err
    return {"before": before, "after": os.getpriority(os.PRIO_PROCESS, 0)}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def get_json(url: str, timeout_s: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def start_server(binary: Path, model: Path, log: Path, *, slots: int = 4, threads: int = 2,
                 context: int = 16384, port: int = 0, ready_timeout_s: float = 120.0,
                 extra: list[str] | None = None) -> EngineServer:
    """Start llama-server on 127.0.0.1 and a free port; return once /health answers 200.

    `context` is the server's whole KV budget in tokens, shared by its `slots` (each slot holds
    up to context / slots tokens). `port` 0: a free one.
    """
    port = port or free_port()
    args = [str(binary), "-m", str(model), "--host", HOST, "--port", str(port), "-np", str(slots),
            "-t", str(threads), "-tb", str(threads), "-c", str(context), "--metrics", "--slots", "--no-webui",
            *(extra or [])]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:
        proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    server = EngineServer(url=f"http://{HOST}:{port}", process=proc, log=log, args=args)
    return wait_healthy(server, "llama-server", ready_timeout_s,
                        lambda: get_json(server.url + "/health", timeout_s=2.0).get("status") == "ok")


S = TypeVar("S", bound=EngineServer)


def wait_healthy(server: S, name: str, timeout_s: float, healthy: Callable[[], bool], poll_s: float = 0.2) -> S:
    """`server` once `healthy()` (its /health) says so; RuntimeError with its log's last lines if it exits
    first, or (stopped) if it is not healthy within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            tail = server.log.read_text(errors="replace").strip().splitlines()[-3:]
            raise RuntimeError(f"{name} exited with {server.process.returncode} before it was ready: "
                               f"{' | '.join(tail)} (log {server.log})")
        try:
            if healthy():
                return server
        except (urllib.error.URLError, OSError, ValueError):
            pass
        time.sleep(poll_s)
    server.stop()
    raise RuntimeError(f"{name} did not answer /health within {timeout_s:g} s (log {server.log})")


def serve_until_interrupted(server: EngineServer) -> int:
    """Wait on a started server until it exits or Ctrl-C; stop it either way (exit status 0)."""
    try:
        server.process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0
