"""The real engine for tests: llama-server from the project's cached build, on a free loopback port.

Session scope: one server for every engine test (4 slots, 1 thread). The build is the same one
`make engine` runs (instant once cached; ~10 min on 2 cores the first time on a machine).
"""

from __future__ import annotations

import pytest

from harness.engine.build import BuildError, ensure_engine
from harness.engine.server import start_server

SLOTS = 4
CONTEXT = 4 * 4096  # tokens of KV in all; each slot holds up to 4,096
# One thread: on a shared 2-core machine two threads spin on barriers whenever the other is descheduled
# (measured here under load: 512-token prefill 2.4 s median with -t 2, 0.39 s with -t 1).
THREADS = 1
BUILD_TIMEOUT = 2400  # s: a test that starts the session may have to build the engine first


@pytest.fixture(scope="session")
def engine_build():
    try:
        return ensure_engine()
    except BuildError as err:
        pytest.fail(f"cannot build the engine: {err}")


@pytest.fixture(scope="session")
def engine_server(engine_build, tmp_path_factory):
    """A running llama-server (`.url` is http://127.0.0.1:PORT, `.process.pid`); stopped after the session."""
    log = tmp_path_factory.mktemp("engine") / "llama-server.log"
    with start_server(engine_build.binary, engine_build.model, log, slots=SLOTS, threads=THREADS,
                      context=CONTEXT) as server:
        yield server


@pytest.fixture(scope="session")
def engine_url(engine_server):
    return engine_server.url
