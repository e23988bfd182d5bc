"""Processes inside a testbed namespace: started with `ip netns exec`, logged to the run directory, health-checked.

Each child runs under util-linux's `setpriv --pdeathsig KILL`, so it dies with the harness even after a kill -9
of the harness (the namespaces are then cleared by the next start or `harness-testbed down`). Start children
from the main thread: the kernel sends that signal when the *thread* that forked them exits.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from harness.engine.server import stop_process


def die_with_parent() -> list[str]:
    """The command prefix that ties a child's life to this process (empty without setpriv)."""
    return ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []


@dataclass
class NsProcess:
    """A process in a namespace: its role name, URL (for health) and log."""

    name: str
    url: str
    process: subprocess.Popen
    log: Path

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, grace_s: float = 5.0) -> None:
        stop_process(self.process, grace_s)

    def tail(self, lines: int = 3) -> str:
        try:
            return " | ".join(self.log.read_text(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return ""


def start(name: str, ns: str, args: list[str], url: str, log: Path) -> NsProcess:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as fh:
        proc = subprocess.Popen(["ip", "netns", "exec", ns, *die_with_parent(), *args], stdout=fh,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return NsProcess(name=name, url=url, process=proc, log=log)


def wait_healthy(procs: list[NsProcess], timeout_s: float) -> None:
    """Return once every process answers GET /health with 200; RuntimeError naming the one that did not."""
    pending = list(procs)
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        for proc in list(pending):
            if not proc.alive():
                raise RuntimeError(f"testbed {proc.name} exited with {proc.process.returncode} before it was "
                                   f"ready: {proc.tail()} (log {proc.log})")
            try:
                with urllib.request.urlopen(proc.url + "/health", timeout=2.0) as resp:
                    if resp.status == 200:
                        pending.remove(proc)
            except (urllib.error.URLError, OSError, ValueError):
                pass
        if pending:
            time.sleep(0.2)
    if pending:
        raise RuntimeError(f"testbed {pending[0].name} did not answer /health within {timeout_s:g} s "
                           f"(log {pending[0].log})")
