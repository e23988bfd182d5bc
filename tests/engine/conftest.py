"""The real engine for tests: llama-server from the project's cached build, on a free loopback port.

Session scope: one server for every engine test (4 slots, 1 thread). The build is the same one
`make engine` runs (instant once cached; ~10 min on 2 cores the first time on a machine).

The validate_engine suite (test_validate_engine.py) runs on a second server of its own, in the
background from the first engine test on (`validate_run`): its ~25 s are mostly waits (each pinned
probe's shared start, Poisson gaps between requests), which then overlap the other engine tests
(~15 s) instead of following them. Two servers, so no test shares another's slots or engine log;
harness-profile times its probes on its own server's CPU clock (see test_profile_engine.py).
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
    """A command started now; `result(timeout)` waits for it: (return code, stdout, stderr)."""

    def __init__(self, args: list[str], out: Path) -> None:
        self.out = out
        with (out / "stdout").open("w") as stdout, (out / "stderr").open("w") as stderr:
            self.process = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdin=subprocess.DEVNULL,
                                            stdout=stdout, stderr=stderr)

    def result(self, timeout: float) -> tuple[int, str, str]:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            pytest.fail(f"still running after {timeout:g} s: {self.process.args}\n"
                        f"{self.text('stderr')[-3000:]}")
        return code, self.text("stdout"), self.text("stderr")

    def text(self, name: str) -> str:
        return (self.out / name).read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture(scope="session")
def validate_run(engine_build, tmp_path_factory):
    """The validate_engine suite (`suite_args` in test_validate_engine.py) running in the background against a
    llama-server of its own: `.result(timeout)`, its sweep directory `.out / "sweep"`. A real interpreter (not
    the CLI zygote: its command can be killed here if the session ends first); the server outlives it."""
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
