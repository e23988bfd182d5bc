"""The real engine for tests: llama-server from the project's cached build, on a free loopback port.

Session scope: one server for every engine test (4 slots, 1 thread). The build is the same one
`make engine` runs (instant once cached; ~10 min on 2 cores the first time on a machine).

The validate_engine suite (test_validate_engine.py) runs on a second server of its own, in the
background from the first engine test on (`validate_run`, a new process): its ~20 s are
mostly waits (each pinned probe's shared start, Poisson gaps between requests), which then overlap the
other engine tests (~20 s) instead of following them. Two servers, so no test shares another's slots or
engine log; harness-profile times its probes on its own server's CPU clock (see test_profile_engine.py).
`pytest -m engine` runs them; they also pass with xdist's default `--dist load` (each worker then starts
the servers its tests need).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.engine.build import BuildError, ensure_engine
from harness.engine.server import start_server

SLOTS = 4
CONTEXT = 4 * 4096  # tokens of KV in all; each slot holds up to 4,096
# One thread: on a shared 2-core machine two threads spin on barriers whenever the other is descheduled
# (measured here under load: 512-token prefill 2.4 s median with -t 2, 0.39 s with -t 1).
THREADS = 1
BUILD_TIMEOUT = 2400  # s: a test that starts the session may have to build the engine first
ROOT = Path(__file__).resolve().parents[2]
VALIDATE_MODULE = Path(__file__).with_name("test_validate_engine.py")
MAX_RUN_S = 900  # a background run is killed after this long, whatever waits for it


@pytest.fixture(scope="session")
def engine_build():
    try:
        return ensure_engine()
    except BuildError as err:
        pytest.fail(f"cannot build the engine: {err}")


def _server(engine_build, tmp_path_factory, name: str):
    log = tmp_path_factory.mktemp(name) / "llama-server.log"
    return start_server(engine_build.binary, engine_build.model, log, slots=SLOTS, threads=THREADS, context=CONTEXT)


@pytest.fixture(scope="session")
def engine_server(engine_build, tmp_path_factory):
    """A running llama-server (`.url` is http://127.0.0.1:PORT, `.process.pid`); stopped after the session."""
    with _server(engine_build, tmp_path_factory, "engine") as server:
        yield server


@pytest.fixture(scope="session")
def engine_url(engine_server):
    return engine_server.url


class BackgroundRun:
    """`python -m <module> ...` started now in a new process; `result(timeout)` waits for it: (return code,
    stdout, stderr); `stop()` kills it."""

    def __init__(self, args: list[str], out: Path) -> None:
        self.out, self.args = out, args
        self._proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)

    def result(self, timeout: float) -> tuple[int, str, str]:
        try:
            out, err = self._proc.communicate(timeout=min(timeout, MAX_RUN_S))
        except subprocess.TimeoutExpired:
            self.stop()
            pytest.fail(f"still running after {timeout:g} s: {self.args}")
        return self._proc.returncode, out, err

    def stop(self) -> None:
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.communicate(timeout=10)


@pytest.fixture(scope="session")
def validate_run(engine_build, tmp_path_factory):
    """The validate_engine suite (`suite_args` in test_validate_engine.py) running in the background against a
    llama-server of its own: `.result(timeout)`, its sweep directory `.out / "sweep"`. Killed here if the session
    ends first; the server outlives it."""
    from .test_validate_engine import suite_args

    with _server(engine_build, tmp_path_factory, "validate_engine_server") as server:
        out = tmp_path_factory.mktemp("validate_engine")
        run = BackgroundRun(suite_args(server.url, out / "sweep"), out)
        yield run
        run.stop()


@pytest.fixture(scope="session", autouse=True)
def _validate_in_background(request):
    """At the first engine test, start `validate_run` when this process surely runs test_validate_engine.py too
    (no xdist); under xdist the test starts it when it runs."""
    if getattr(request.config.option, "dist", "no") != "no":
        return
    if any(item.path == VALIDATE_MODULE for item in request.session.items):
        request.getfixturevalue("validate_run")
