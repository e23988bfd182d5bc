"""The real engine for tests: llama-server from the project's cached build, on a free loopback port.

Session scope: one server for every engine test (4 slots, 1 thread). The build is the same one
`make engine` runs (instant once cached; ~10 min on 2 cores the first time on a machine).

The validate_engine suite (test_validate_engine.py) runs on a second server of its own, in the
background from the first engine test on (`validate_run`, forked from the CLI zygote): its ~20 s are
mostly waits (each pinned probe's shared start, Poisson gaps between requests), which then overlap the
other engine tests (~20 s) instead of following them. Two servers, so no test shares another's slots or
engine log; harness-profile times its probes on its own server's CPU clock (see test_profile_engine.py).
Alone (`pytest -p no:xdist tests/engine`) the three modules take ~20 CPU s, servers, commands and the CLI
zygote included (~28 before their designs were halved and the suite forked).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from pathlib import Path

import cli_zygote  # tools/cli_zygote.py, loaded by tests/conftest.py
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
    """`python -m <module> ...` started now, forked from the CLI zygote (tools/cli_zygote.py: its third-party
    imports, ~1 s of CPU in a new interpreter, are done) and waited on in a thread; `result(timeout)` waits for it:
    (return code, stdout, stderr); `stop()` kills it (by its pid, which the zygote reports once it runs)."""

    def __init__(self, args: list[str], out: Path) -> None:
        self.out, self.args = out, args
        self._pidfd: int | None = None
        self._done: subprocess.CompletedProcess[str] | None = None
        self._error: BaseException | None = None
        cli_zygote.start()  # the process's zygote made here, not in the thread: the tests' own commands share it
        self._thread = threading.Thread(target=self._run, name="background-run", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:  # the zygote kills it after MAX_RUN_S whatever happens here
            self._done = cli_zygote.run(self.args, cwd=ROOT, timeout=MAX_RUN_S, on_fork=self._forked)
        except BaseException as err:  # handed to result()
            self._error = err

    def _forked(self, pid: int) -> None:
        self._pidfd = os.pidfd_open(pid)  # the process itself, even if its pid is reused once it is reaped

    def result(self, timeout: float) -> tuple[int, str, str]:
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.stop()
            done = self._done
            pytest.fail(f"still running after {timeout:g} s: {self.args}\n{done.stderr[-3000:] if done else ''}")
        if self._error is not None:
            raise self._error
        assert self._done is not None
        return self._done.returncode, self._done.stdout, self._done.stderr

    def stop(self) -> None:
        if self._thread.is_alive() and self._pidfd is not None:
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
        self._thread.join(10)
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None


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
    """At the first engine test, start `validate_run` when this process runs test_validate_engine.py too (no
    xdist, or --dist loadscope, which keeps tests/engine/ on one worker: tests/conftest.py ONE_UNIT)."""
    if getattr(request.config.option, "dist", "no") not in ("no", "loadscope"):
        return
    if any(item.path == VALIDATE_MODULE for item in request.session.items):
        request.getfixturevalue("validate_run")
