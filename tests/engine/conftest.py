"""The real engine for tests: llama-server from the project's cached build, on a free loopback port.

Session scope: one server for every engine test (4 slots, 2 threads). The build is the same one
`make engine` runs (instant once cached; ~10 min on 2 cores the first time on a machine).
"""

from __future__ import annotations

import pytest

from harness.engine.build import BuildError, ensure_engine
from harness.engine.server import start_server

SLOTS = 4
CONTEXT = 4 * 4096  # tokens of KV in all; each slot holds up to 4,096


@pytest.fixture(scope="session")
def engine_build():
    try:
        return ensure_engine()
    except BuildError as err:
        pytest.fail(f"cannot build the engine: {err}")


@pytest.fixture(scope="session")
def engine_url(engine_build, tmp_path_factory):
    """URL of a running llama-server (http://127.0.0.1:PORT); stopped after the session."""
    log = tmp_path_factory.mktemp("engine") / "llama-server.log"
    with start_server(engine_build.binary, engine_build.model, log, slots=SLOTS, threads=2,
                      context=CONTEXT) as server:
        yield server.url
